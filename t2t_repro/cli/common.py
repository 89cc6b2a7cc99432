"""What every command-line tool does around its `main`.

- `--help`: the tool's docstring and the flags it reads, by topic
  (`tool_help.py`).
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

from t2t_repro.cli import TOOL_PREFIX, tool_help
from t2t_repro.cli import flags as cli_flags
from t2t_repro.config import ConfigError, MissingExtraError
from t2t_repro.data import DataError
from t2t_repro.training import TrainingError

FLAGS = flags.FLAGS
# Errors that describe the user's input or files, not a bug.
USER_ERRORS = (
    app.UsageError,
    DataError,
    ConfigError,
    MissingExtraError,
    TrainingError,
    OSError,
)
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


def _flagfiles(arguments):
    """The --flagfile paths named in `arguments` (`--flagfile=PATH` or
    `--flagfile PATH`, one dash or two), `~` expanded as absl does."""
    paths = []
    for argument, following in zip(arguments, [*arguments[1:], None]):
        name, equals, value = argument.lstrip("-").partition("=")
        if argument.startswith("-") and name == "flagfile":
            path = value if equals else following
            if path:
                paths.append(os.path.expanduser(path))
    return paths


def _undecodable_flagfile(argv):
    """'FILE:LINE: not valid UTF-8' for the first --flagfile of `argv`, or
    of the flagfiles they name, that absl could not read as text. (The
    text-file readers' own check needs TensorFlow, which a flag error must
    not wait for.)"""
    pending, seen = _flagfiles(argv[1:]), set()
    while pending:
        path = pending.pop(0)
        if path in seen:
            continue
        seen.add(path)
        try:
            with open(path, "rb") as handle:
                lines = handle.read().splitlines()
        except OSError:
            continue
        for number, raw in enumerate(lines, start=1):
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError as error:
                return f"{path}:{number}: not valid UTF-8 (byte {error.start})"
            # One flag a line (a path may hold spaces); comments skipped.
            if line.startswith("-") and line.lstrip("-").startswith("flagfile="):
                pending.append(os.path.expanduser(line.partition("=")[2].strip()))
    return "a flagfile is not valid UTF-8"


def _parse_flags(argv):
    """absl's parser, with a bad flag as one line like every other error;
    then a settings flag's value is checked as its settings class checks
    it (the same message as in Python)."""
    try:
        argv = FLAGS(argv)
    except flags.Error as error:
        _exit_with_error(" ".join(str(error).split()))
    except UnicodeDecodeError:  # absl reads flagfiles as text
        _exit_with_error(_undecodable_flagfile(argv))
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
    module = sys.modules[main.__module__]
    sys.modules["__main__"].__doc__ = module.__doc__
    # The name --help heads the flags with (a console script's full path
    # otherwise) and errors start with.
    sys.argv[0] = os.path.basename(sys.argv[0])
    if module.__name__ == "__main__" and module.__spec__ is not None:
        # python -m t2t_repro.cli.train: named as its console script.
        sys.argv[0] = TOOL_PREFIX + module.__spec__.name.rpartition(".")[2]
    tool_help.register_key_flags()
    tool_help.define_help_flags()

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
