"""Run files: written so that a kill never leaves half of one, read so that
one damaged anyway (a truncated copy, a full disk) is named in one line."""

import contextlib
import ctypes
import errno
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import threading
import uuid

import tensorflow as tf

from t2t_repro.config import ConfigError
from t2t_repro.writer_lock import hold_writer_lock, writer_is_gone

_CHUNK_BYTES = 1 << 20


def write_atomically(path, data):
    """Writes `data` (str or bytes) to `path` through a temporary sibling
    and a rename, so a kill never leaves half a file under `path`. The
    sibling's name is this write's own: two processes writing one path
    (two t2t-eval runs of one checkpoint) each rename a whole file, and
    the last wins."""
    tf.io.gfile.makedirs(os.path.dirname(path) or ".")
    temporary = f"{path}.tmp-{uuid.uuid4().hex[:12]}"
    try:
        with tf.io.gfile.GFile(
            temporary, "wb" if isinstance(data, bytes) else "w"
        ) as handle:
            handle.write(data)
        tf.io.gfile.rename(temporary, path, overwrite=True)
    except BaseException:
        with contextlib.suppress(tf.errors.OpError):
            tf.io.gfile.remove(temporary)
        raise


def check_writable(directory):
    """Makes `directory` if missing and writes a file in it, then removes
    it: a file error naming `directory` now, not after the long work whose
    results go there."""
    probe = os.path.join(directory, f".write-test-{uuid.uuid4().hex[:12]}")
    write_atomically(probe, "")
    tf.io.gfile.remove(probe)


# Inside a partial directory while its writer lives, locked by it
# (`hold_writer_lock`).
_WRITER_LOCK = ".writer.lock"


def _partial_prefix(destination):
    parent, name = os.path.split(destination.rstrip("/"))
    return parent or ".", f".{name}.partial-"


def _is_local(path):
    return "://" not in path


def _remove_dead_writers_partials(destination):
    """Removes the temporary directories of `directory_written_whole` for
    `destination` whose writer died (a kill -9): those whose writer lock
    can be taken. Local file systems only, where flock works."""
    parent, prefix = _partial_prefix(destination)
    if not (_is_local(parent) and os.path.isdir(parent)):
        return
    for name in os.listdir(parent):
        lock_path = os.path.join(parent, name, _WRITER_LOCK)
        if name.startswith(prefix) and writer_is_gone(lock_path):
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)


# renameat2(2) of Linux 3.15+ (glibc 2.28+), whose RENAME_EXCHANGE swaps
# two paths in one step; None where the C library has none.
_RENAMEAT2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(first, second):
    """Swaps the local directories `first` and `second` in one step, so
    that no moment sees either name empty; False (nothing done) where the
    system or the file system cannot."""
    if _RENAMEAT2 is None or not _is_local(first):
        return False
    if (
        _RENAMEAT2(
            _AT_FDCWD,
            os.fsencode(first),
            _AT_FDCWD,
            os.fsencode(second),
            _RENAME_EXCHANGE,
        )
        == 0
    ):
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), second)


def _terminate(signum, frame):
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def _sigterm_raises():
    """SIGTERM raises SystemExit inside the block (so `finally` clauses
    run), in the main thread, unless the process ignores SIGTERM."""
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.getsignal(signal.SIGTERM)
        if previous == signal.SIG_IGN:
            previous = None
        else:
            signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def directory_written_whole(destination, replace=False):
    """Yields a new temporary sibling directory to write `destination`'s
    files in, and renames it to `destination` when the block ends, so that
    nobody (TF Serving polling for versions, a rerun) ever sees half of
    it: on a local file system, where a rename is atomic (on gs:// and
    the like it copies object by object). If the block raises, SIGTERM
    included, the temporary directory is removed; one that a kill -9 left
    is removed by the next writer of the same destination.

    Without `replace`, FileExistsError if `destination` exists, before or
    after the block: of two writers, the first to finish wins and the
    other leaves no trace. With `replace`, an existing `destination` is
    replaced only once the new one is complete, in one swap on a local
    Linux file system (elsewhere by two renames, between which a kill
    would leave neither at `destination`)."""
    if tf.io.gfile.exists(destination) and not replace:
        raise FileExistsError(f"{destination} exists")
    _remove_dead_writers_partials(destination)
    parent, prefix = _partial_prefix(destination)
    partial = os.path.join(
        parent, f"{prefix}{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    )
    tf.io.gfile.makedirs(partial)
    lock = None
    if _is_local(partial):
        lock = open(os.path.join(partial, _WRITER_LOCK), "wb")
        hold_writer_lock(lock)
    try:
        with _sigterm_raises():
            yield partial
            if lock is not None:
                # (A writer that empties the directory took it already.)
                with contextlib.suppress(FileNotFoundError):
                    os.remove(lock.name)
            if tf.io.gfile.exists(destination):
                if not replace:
                    raise FileExistsError(
                        f"{destination} exists: written by another process meanwhile"
                    )
                # The old one ends up at `partial`, removed below.
                if not _exchange(partial, destination):
                    old = partial + ".old"
                    tf.io.gfile.rename(destination, old)
                    tf.io.gfile.rename(partial, destination)
                    tf.io.gfile.rmtree(old)
            else:
                tf.io.gfile.rename(partial, destination)
    finally:
        if lock is not None:
            lock.close()
        if tf.io.gfile.exists(partial):
            tf.io.gfile.rmtree(partial)


def file_error_cause(error):
    """What went wrong, from a TensorFlow op's error or an OSError,
    without the op's function and name: e.g. 'PATH; No space left on
    device'."""
    text = (getattr(error, "message", None) or str(error)).strip()
    text = re.sub(
        r"\{\{function_node [^}]*\}\}\s*|\s*\[Op:\w+\]",
        "",
        text.splitlines()[-1] if text else "",
    )
    return text or type(error).__name__


def read_json_object(path):
    """The JSON object in the run file `path`; ConfigError
    `PATH: corrupt (...)` if it holds none."""
    with tf.io.gfile.GFile(path, "rb") as handle:
        data = handle.read()
    if not data.strip():
        problem = "empty file"
    else:
        try:
            value = json.loads(data)
        except ValueError as error:  # not JSON, or not UTF-8
            problem = f"not JSON: {error}"
        else:
            if isinstance(value, dict):
                return value
            problem = f"a JSON {type(value).__name__}, not an object"
    raise ConfigError(f"{path}: corrupt ({problem})")


def sha256_of(path):
    """The hex SHA-256 of the file at `path` (any tf.io.gfile path), read a
    chunk at a time."""
    digest = hashlib.sha256()
    with tf.io.gfile.GFile(path, "rb") as handle:
        while chunk := handle.read(_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()
