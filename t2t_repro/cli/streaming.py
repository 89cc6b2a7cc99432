"""What t2t-translate and t2t-score share: inputs read, processed and
written in chunks of --buffer_size lines, so that memory is bounded by a
chunk, not by the file; each finished chunk appended to --output and
flushed, so that a crash leaves every finished line and --resume continues
after it; UTF-8 output whatever the locale; progress on stderr.

Defines flags (in `define_streaming_flags`) but imports neither TensorFlow
nor the library's TensorFlow modules: `--help` must stay fast.
"""

import contextlib
import itertools
import os
import re
import sys

from absl import flags, logging

from t2t_repro.data import DataError

FLAGS = flags.FLAGS
STDOUT = "-"
# A number in an output line: written with 6 decimals, but any decimal
# number, -inf or nan is taken (a line may have been edited by hand).
NUMBER = r"-?(?:\d+(?:\.\d*)?|inf|nan)"
# A line of t2t-score's output: LOG_PROB, TOKENS, PER_TOKEN, SCORE.
SCORE_LINE = re.compile(rf"{NUMBER}\t\d+\t{NUMBER}\t{NUMBER}")


def define_streaming_flags(output_help):
    if "buffer_size" in FLAGS:
        return
    flags.DEFINE_string("output", STDOUT, output_help)
    flags.DEFINE_integer(
        "buffer_size",
        1000,
        "Input lines read, processed "
        "and written at a time: memory is bounded by it, "
        "and batches are sorted by length within it (a "
        "larger buffer pads less).",
        lower_bound=1,
    )
    flags.DEFINE_bool(
        "resume",
        False,
        "Continue an interrupted run: keep "
        "the complete lines --output already holds (a partial "
        "last line is cut off), skip as many inputs and "
        "append the rest. Use the same flags as the "
        "interrupted run. Without it, --output is overwritten.",
    )
    flags.DEFINE_bool(
        "progress",
        True,
        "Show progress on stderr: a bar "
        "with rate and ETA on a terminal, else a line every "
        "30 s and one at the end.",
    )
    flags.register_multi_flags_validator(
        ["resume", "output"],
        lambda values: not values["resume"] or values["output"] != STDOUT,
        message="--resume continues an --output file; stdout cannot be resumed",
    )


def count_lines(path):
    """The lines of a regular file (checked as UTF-8, gzip too), or None
    for stdin or a pipe, which cannot be read twice."""
    from t2t_repro.data.text_files import check_exists, is_read_once, numbered_lines

    check_exists(path)
    if is_read_once(path):
        return None
    return sum(1 for _ in numbered_lines(path))


def resume_point(path, lines_per_input, line_fits=None):
    """How many inputs the output file `path` holds all lines of (0 if it
    does not exist). Cuts the file after them: a crash can leave a partial
    line, or part of an input's `lines_per_input` lines. DataError if a
    complete line fails `line_fits(text, input_index)` (0-based): output
    of other flags, which appending to would mix two formats."""
    if not os.path.exists(path):
        return 0
    complete_lines = keep_bytes = position = 0
    with open(path, "rb") as handle:
        for line in handle:
            position += len(line)
            if line.endswith(b"\n"):
                complete_lines += 1
                text = line.decode("utf-8", "replace").rstrip("\r\n")
                input_index = (complete_lines - 1) // lines_per_input
                if line_fits is not None and not line_fits(text, input_index):
                    raise DataError(
                        f"{path}:{complete_lines}: not a line this run would "
                        "write (another tool's output, or other flags): resume "
                        "the interrupted run's --output with its flags, or "
                        "drop --resume"
                    )
                if complete_lines % lines_per_input == 0:
                    keep_bytes = position
    if keep_bytes < position:
        with open(path, "r+b") as handle:
            handle.truncate(keep_bytes)
    return complete_lines // lines_per_input


def skip_done(items, done, output, input_name):
    """Skips the first `done` of `items`, whose output `output` holds;
    DataError if there are fewer."""
    skipped = sum(1 for _ in itertools.islice(items, done))
    if skipped < done:
        raise DataError(
            f"{output} holds the output of {done} inputs but "
            f"{input_name} has {skipped}: not its output, or "
            "other flags (--n_best)"
        )


def _chunks(items, size):
    while chunk := list(itertools.islice(items, size)):
        yield chunk


def _file_status(path):
    """`os.stat` of `path`, of stdin for "-"; None if it does not exist or
    stdin is closed."""
    from t2t_repro.data.text_files import STDIN

    try:
        return os.fstat(0) if path == STDIN else os.stat(path)
    except OSError:
        return None


def same_file(path, other):
    """Whether `path` and `other` ("-" for stdin) are one file, pipe or
    device, by any path or link."""
    status, other_status = _file_status(path), _file_status(other)
    return None not in (status, other_status) and os.path.samestat(status, other_status)


def refuse_output_over_inputs(output, inputs):
    """DataError if `output` (--output) is the regular file one of `inputs`
    ({flag name: path, "-" for stdin}) reads, by any path or link: opening
    it for writing would empty it before it is read. Call before loading a
    model."""
    if output == STDOUT or not os.path.isfile(output):
        return  # a device or a pipe: writing destroys nothing
    for name, path in inputs.items():
        if same_file(path, output):
            raise DataError(
                f"{output}: --output is also --{name}, which writing it "
                "would destroy; give another --output"
            )


def refuse_output_over_model(output, models):
    """DataError if `output` (--output) is an existing file of the model
    that one of `models` ({flag name: path or None}) names: one of a run
    directory's own files (run_dir.py), or anything in an export's
    directory. Both the path as given (its directories' links followed)
    and where a link at it leads are checked. Call before loading the
    model."""
    if output == STDOUT or not os.path.isfile(output):
        return
    parent, name = os.path.split(os.path.abspath(output))
    places = {os.path.join(os.path.realpath(parent), name), os.path.realpath(output)}
    for flag, path in models.items():
        if path is None:
            continue
        relatives = [os.path.relpath(place, os.path.realpath(path)) for place in places]
        inside = [r for r in relatives if r.split(os.sep)[0] != os.pardir]
        if flag == "model_dir" and inside:
            # Imports TensorFlow, so only for an --output inside a run.
            from t2t_repro.run_dir import is_run_file

            inside = [r for r in inside if is_run_file(r)]
        if inside:
            raise DataError(
                f"{output}: --output is one of the files of --{flag}={path}, "
                "which writing it would destroy; give another --output"
            )


def resumed_inputs(lines_per_input, line_fits):
    """With --resume, how many inputs --output holds the output of (see
    `resume_point`); else 0. Call before loading a model: output of other
    flags fails in a second."""
    if not FLAGS.resume:
        return 0
    return resume_point(FLAGS.output, lines_per_input, line_fits)


def run_stream(items, total, process, lines_per_input, input_name, verb, unit, done):
    """Processes `items`, an iterator of inputs (`total` of them, None if
    unknown), in chunks of --buffer_size, appending each chunk's output
    lines to --output (stdout for -) as UTF-8, flushed, whatever the
    locale. First skips the `done` inputs whose lines --output holds.

    Args:
        process: `process(chunk, first_index, progress)` -> (output lines
            without line breaks, `lines_per_input` per input, and how many
            inputs were truncated); `first_index` is the chunk's first
            input's 0-based index, `progress` a `Progress` or None.
        input_name: the input, for the message if --output holds more
            inputs than it.
        verb, unit: what progress says is done to how many of what
            ("translated", "sentences").
        done: inputs whose output --output holds (`resumed_inputs`).

    Returns:
        (inputs processed by this run, how many of them were truncated).
    """
    from t2t_repro.progress import Progress

    if done:
        skip_done(items, done, FLAGS.output, input_name)
        logging.info(
            "--resume: %s holds %d inputs' output; going on from input %d",
            FLAGS.output,
            done,
            done + 1,
        )
    progress = Progress(total, verb, unit, initial=done) if FLAGS.progress else None
    if FLAGS.output == STDOUT:
        sys.stdout.flush()
        handle = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    else:
        handle = open(FLAGS.output, "ab" if FLAGS.resume else "wb")
    processed = truncated = 0
    with handle:
        for chunk in _chunks(items, FLAGS.buffer_size):
            lines, chunk_truncated = process(chunk, done + processed, progress)
            try:
                handle.write("".join(line + "\n" for line in lines).encode("utf-8"))
                handle.flush()
            except OSError as error:
                if FLAGS.output == STDOUT:
                    raise
                # Closed now, its flush error ignored, so that the `with`
                # block's close cannot replace the DataError below.
                with contextlib.suppress(OSError):
                    handle.close()
                # A full disk, say: name the file, and how to go on.
                resume = (
                    "; once it can be, --resume goes on from there"
                    if os.path.isfile(FLAGS.output)
                    else ""
                )
                raise DataError(
                    f"{FLAGS.output}: cannot be written "
                    f"({error.strerror or error}) after the output of at "
                    f"least {done + processed} inputs{resume}"
                ) from None
            processed += len(chunk)
            truncated += chunk_truncated
    if progress is not None:
        progress.close()
    return processed, truncated
