"""Run files: written so that a kill never leaves half of one, read so that
one damaged anyway (a truncated copy, a full disk) is named in one line."""

import contextlib
import hashlib
import json
import os
import signal
import socket
import threading
import uuid

import tensorflow as tf

from t2t_repro.config import ConfigError

_CHUNK_BYTES = 1 << 20


def write_atomically(path, data):
    """Writes `data` (str or bytes) to `path` through a temporary sibling
    and a rename, so a kill never leaves half a file under `path`."""
    tf.io.gfile.makedirs(os.path.dirname(path) or ".")
    temporary = path + ".tmp"
    with tf.io.gfile.GFile(temporary, "wb" if isinstance(data, bytes)
                           else "w") as handle:
        handle.write(data)
    tf.io.gfile.rename(temporary, path, overwrite=True)


def _partial_prefix(destination):
    parent, name = os.path.split(destination.rstrip("/"))
    return parent, f".{name}.partial-"


def _remove_dead_writers_partials(destination):
    """Removes the temporary directories of `directory_written_whole` for
    `destination` that a killed process of this host left."""
    parent, prefix = _partial_prefix(destination)
    if not tf.io.gfile.isdir(parent or "."):
        return
    host = socket.gethostname()
    for name in tf.io.gfile.listdir(parent or "."):
        name = name.rstrip("/")
        if not name.startswith(prefix):
            continue
        writer_host, pid, _ = (name[len(prefix):].rsplit("-", 2)
                               + ["", ""])[:3]
        if writer_host != host or not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            tf.io.gfile.rmtree(os.path.join(parent, name))
        except PermissionError:  # alive, another user's
            pass


def _terminate(signum, frame):
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def directory_written_whole(destination):
    """Yields a new temporary sibling directory to write `destination`'s
    files in, and renames it to `destination` when the block ends, so that
    nobody (TF Serving polling for versions, a rerun) ever sees half of
    it. If the block raises, SIGTERM included (in the main thread), the
    temporary directory is removed; one that a killed process left is
    removed by the next writer. FileExistsError if `destination` exists,
    before or after the block: of two writers, the first to finish wins
    and the other leaves no trace."""
    if tf.io.gfile.exists(destination):
        raise FileExistsError(f"{destination} exists")
    _remove_dead_writers_partials(destination)
    parent, prefix = _partial_prefix(destination)
    partial = os.path.join(parent, f"{prefix}{socket.gethostname()}-"
                           f"{os.getpid()}-{uuid.uuid4().hex[:8]}")
    tf.io.gfile.makedirs(partial)
    main_thread = threading.current_thread() is threading.main_thread()
    if main_thread:
        previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield partial
        if tf.io.gfile.exists(destination):
            raise FileExistsError(f"{destination} exists: written by "
                                  "another process meanwhile")
        tf.io.gfile.rename(partial, destination)
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
        if tf.io.gfile.exists(partial):
            tf.io.gfile.rmtree(partial)


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
