"""Run files: written so that a kill never leaves half of one, read so that
one damaged anyway (a truncated copy, a full disk) is named in one line."""

import hashlib
import json
import os

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
