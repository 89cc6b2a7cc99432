"""What every command-line tool does around its `main`.

- `--help` (also -h, -? and --helpshort) shows the tool's docstring and
  the flags it reads, grouped by topic: the tool's own flags under its
  name, then those of `flags.py` under their topic's heading
  (`flags.TOPICS`, in the order of `flags.TOPIC_ORDER`), each heading's
  flags in name order and absl's format. The flags it reads are the "key
  flags" of the main module (absl's short help; for a console script the
  main module is the script wrapper): the tool's flags are registered as
  its key flags; the training flags a tool defines only to parse a
  training flagfile are not, see `flags.SHOWN`. --helpfull is absl's.
- TensorFlow's C++ start-up lines (oneDNN, CUDA stubs, CPU feature guard)
  are written before absl logging is initialised, so TF_CPP_MIN_LOG_LEVEL
  does not hide them all: they are filtered out of stderr while TensorFlow
  loads, unless the user asks for them with TF_CPP_MIN_LOG_LEVEL or
  --verbosity >= 1.
- Bad input (a bad flag, a `DataError` or `ConfigError`, a file that
  cannot be read or written) ends the tool with one line naming the
  problem, exit status 2, never a traceback.
"""

import contextlib
import logging
import os
import re
import sys
import tempfile

from absl import app, flags

from t2t_repro.cli import flags as cli_flags
from t2t_repro.config import ConfigError
from t2t_repro.data import DataError
from t2t_repro.training import TrainingError

FLAGS = flags.FLAGS
# Errors that describe the user's input or files, not a bug.
USER_ERRORS = (app.UsageError, DataError, ConfigError, TrainingError, OSError)
# TensorFlow's file-system errors (tf.io.gfile, SavedModel writing).
_TENSORFLOW_FILE_ERRORS = (
    "NotFoundError",
    "PermissionDeniedError",
    "AlreadyExistsError",
)
# Start-up lines TensorFlow writes to stderr whatever the log level.
_START_UP_NOISE = re.compile(
    r"All log messages before absl::InitializeLog|port\.cc:.*oneDNN|"
    r"cudart_stub\.cc|cpu_feature_guard\.cc|To enable the following "
    r"instructions|cuda_platform\.cc|cuda_executor\.cc|cuda_dnn\.cc|"
    r"cuda_fft\.cc|cuda_blas\.cc|Unable to register cu|computation_placer|"
    r"absl::InitializeLog\(\) is called"
)


def _register_key_flags():
    """Makes the package's flags that the tool reads the main module's key
    flags: those of `cli/flags.py` it shows, every other module's."""
    main_module = sys.argv[0]
    for module, module_flags in FLAGS.flags_by_module_dict().items():
        if module.startswith("t2t_repro"):
            for flag in module_flags:
                if module != cli_flags.__name__ or flag.name in cli_flags.SHOWN:
                    FLAGS.register_key_flag_for_module(main_module, flag)


def _flags_by_topic():
    """[(heading, the tool's flags under it in name order)], the headings
    in order: the tool's own flags (its module's, `streaming.py`'s) under
    the tool's name, then those of `cli/flags.py` under their topics."""
    tool = sys.argv[0]
    groups: dict[str, dict] = {}
    for flag in FLAGS.get_key_flags_for_module(tool):
        if flag.name not in FLAGS or FLAGS[flag.name] is not flag:
            continue  # overridden since (absl's help skips it too)
        topic = tool
        if FLAGS.find_module_defining_flag(flag.name) == cli_flags.__name__:
            topic = cli_flags.TOPICS.get(flag.name, tool)
        groups.setdefault(topic, {})[flag.name] = flag
    order = [tool, *cli_flags.TOPIC_ORDER]
    order += sorted(set(groups) - set(order))
    return [
        (topic, [groups[topic][name] for name in sorted(groups[topic])])
        for topic in order
        if topic in groups
    ]


def _flag_help(flag):
    """A flag's entry in --help, as absl writes it: '  --name: help',
    wrapped, then its default and the values it takes."""
    name = f"--[no]{flag.name}" if flag.boolean else f"--{flag.name}"
    if flag.short_name:
        name = f"-{flag.short_name},{name}"
    lines = [
        flags.text_wrap(
            f"{name}: {flag.help or ''}", indent="    ", firstline_indent="  "
        )
    ]
    if flag.default_as_str:
        lines.append(
            flags.text_wrap(f"(default: {flag.default_as_str})", indent="    ")
        )
    if flag.parser.syntactic_help:
        lines.append(flags.text_wrap(f"({flag.parser.syntactic_help})", indent="    "))
    return "\n".join(lines)


def help_text():
    """The tool's --help: its docstring, then its flags by topic."""
    doc = sys.modules["__main__"].__doc__ or f"\nUSAGE: {sys.argv[0]} [flags]\n"
    sections = [
        f"{topic}:\n" + "\n".join(map(_flag_help, topic_flags))
        for topic, topic_flags in _flags_by_topic()
    ]
    text = doc
    if sections:
        text += "\nflags:\n\n" + "\n\n".join(sections) + "\n"
    return text + "\nTry --helpfull to get a list of all flags.\n"


class _HelpFlag(flags.BooleanFlag):
    """absl's --help and --helpshort (exit status 1 after the help, as
    absl's), writing `help_text()`."""

    def __init__(self, name, short_name):
        super().__init__(
            name,
            False,
            "show this help",
            short_name=short_name,
            allow_hide_cpp=True,
            allow_override=True,
        )

    def parse(self, argument):
        super().parse(argument)
        if self.value:
            try:
                sys.stdout.write(help_text())
                sys.stdout.flush()
            except BrokenPipeError:  # e.g. `t2t-train --help | head`
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(1)


def _define_help_flags():
    """absl's help flags, with --help (-?) and --helpshort (-h) ours."""
    app.define_help_flags()  # idempotent: app.run keeps ours
    for name, short_name in (("help", "?"), ("helpshort", "h")):
        flags.DEFINE_flag(_HelpFlag(name, short_name), module_name=app.__name__)


def wants_tensorflow_logs():
    return "TF_CPP_MIN_LOG_LEVEL" in os.environ or FLAGS.verbosity >= 1


def import_tensorflow_quietly():
    """Imports TensorFlow (and finds its devices) with its start-up lines
    dropped from stderr; any other line it writes is passed on."""
    if "tensorflow" in sys.modules or wants_tensorflow_logs():
        return
    # Its C++ warnings too (e.g. a kernel's OP_REQUIRES line before the
    # error a tool reports as one line): asked for, they are shown.
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            import tensorflow as tf

            # The CUDA platform reports itself when devices are listed.
            tf.config.list_physical_devices()
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            for line in captured.read().decode(errors="replace").splitlines():
                if not _START_UP_NOISE.search(line):
                    print(line, file=sys.stderr)


def _exit_with_error(message):
    sys.stderr.write(f"{sys.argv[0]}: error: {message}\n")
    sys.exit(2)


def _describe(error):
    """One line for a user error: an OSError as 'path: reason'."""
    if isinstance(error, OSError) and error.filename and error.strerror:
        return f"{error.filename}: {error.strerror}"
    if _is_full_disk(error):
        from t2t_repro.files import file_error_cause

        return file_error_cause(error)
    text = getattr(error, "message", None) or str(error)
    return text.splitlines()[0] if text else type(error).__name__


def _is_full_disk(error):
    """TensorFlow's error for a write to a full disk (ResourceExhausted,
    which is also its out-of-memory error)."""
    tf = sys.modules.get("tensorflow")
    return (
        tf is not None
        and isinstance(error, tf.errors.ResourceExhaustedError)
        and "No space left on device" in str(error)
    )


def _is_user_error(error):
    if isinstance(error, USER_ERRORS) or _is_full_disk(error):
        return True
    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(
        error, tuple(getattr(tf.errors, name) for name in _TENSORFLOW_FILE_ERRORS)
    )


class StartupLog:
    """The informational log lines a tool writes while it checks its
    inputs, held back so that a user error found by those checks is the
    only line on stderr (not the third, after the strategy's and the
    data's start-up lines); warnings are written at once. `release()`
    writes the held lines and stops holding, once the checks have passed
    (for t2t-train: after the vocabulary, the model and the run directory,
    so a vocabulary learnt on a large corpus delays them by its minute or
    two)."""

    def __init__(self):
        self._root = logging.getLogger()
        self._handlers = self._root.handlers[:]
        self._held: list[logging.LogRecord] = []
        self._holding = True
        self._root.handlers = [_Appender(self._held), *self._handlers]
        for handler in self._handlers:
            handler.addFilter(_warnings_and_above)

    def release(self):
        if not self._holding:
            return
        self.drop()
        for record in self._held:
            self._root.handle(record)

    def drop(self):
        self._holding = False
        self._root.handlers = self._handlers
        for handler in self._handlers:
            handler.removeFilter(_warnings_and_above)


def _warnings_and_above(record):
    return record.levelno >= logging.WARNING


class _Appender(logging.Handler):
    """Keeps the records below WARNING."""

    def __init__(self, records):
        super().__init__(level=logging.NOTSET)
        self.records = records

    def emit(self, record):
        if record.levelno < logging.WARNING:
            self.records.append(record)


@contextlib.contextmanager
def startup_log_held():
    """Holds the log (StartupLog) until the block ends: dropped if it ends
    with a user error (that one line says what went wrong), written
    otherwise (a bug's traceback keeps its context)."""
    startup_log = StartupLog()
    try:
        yield startup_log
    except Exception as error:
        if _is_user_error(error):
            startup_log.drop()
        else:
            startup_log.release()
        raise
    except BaseException:
        startup_log.release()
        raise
    startup_log.release()


def _parse_flags(argv):
    """absl's parser, with a bad flag as one line like every other error;
    then a settings flag's value is checked as its settings class checks
    it (the same message as in Python)."""
    try:
        argv = FLAGS(argv)
    except flags.Error as error:
        _exit_with_error(" ".join(str(error).split()))
    try:
        cli_flags.check_setting_flags()
    except ConfigError as error:
        _exit_with_error(str(error))
    return argv


def run(main, positional_arguments=False, tensorflow=True):
    """`app.run(main)` with the tool's flags in --help, TensorFlow's
    start-up noise hidden and user errors as one line.

    `main` takes no arguments, or with `positional_arguments` the
    command line's non-flag arguments; `tensorflow=False` never imports
    TensorFlow (a tool that does not need it answers in a blink)."""
    doc = sys.modules[main.__module__].__doc__
    sys.modules["__main__"].__doc__ = doc
    # The name --help heads the flags with (a console script's full path
    # otherwise) and errors start with.
    sys.argv[0] = os.path.basename(sys.argv[0])
    _register_key_flags()
    _define_help_flags()

    def main_with_one_line_errors(argv):
        if tensorflow:
            import_tensorflow_quietly()
        try:
            if positional_arguments:
                return main(argv[1:])
            if len(argv) > 1:
                raise app.UsageError(
                    f"unexpected arguments {argv[1:]}: every input is a --flag"
                )
            return main()
        except Exception as error:  # bugs are re-raised below
            if not _is_user_error(error):
                raise
            _exit_with_error(_describe(error))

    app.run(main_with_one_line_errors, flags_parser=_parse_flags)
