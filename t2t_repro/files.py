"""Writing run files so that a kill never leaves half of one."""

import os

import tensorflow as tf


def write_atomically(path, data):
    """Writes `data` (str or bytes) to `path` through a temporary sibling
    and a rename, so a kill never leaves half a file under `path`."""
    tf.io.gfile.makedirs(os.path.dirname(path) or ".")
    temporary = path + ".tmp"
    with tf.io.gfile.GFile(temporary, "wb" if isinstance(data, bytes)
                           else "w") as handle:
        handle.write(data)
    tf.io.gfile.rename(temporary, path, overwrite=True)
