"""A writer's lock on the file it writes (or on a file inside the
directory it fills): an flock, which the kernel releases when the writer
dies, whatever its host name or PID namespace (containers sharing a
volume), so that the next writer can tell a dead writer's leftovers from
a live one's work. Free of TensorFlow: t2t-fetch uses it."""

import contextlib
import fcntl


def writer_is_gone(lock_path):
    """Whether the writer that locked `lock_path` (`hold_writer_lock`) is
    gone: its lock is free to take. False while it lives, if the file went
    meanwhile, and where the file system has no such locks."""
    try:
        # Opened for writing: NFS emulates flock with fcntl locks, whose
        # exclusive kind needs it.
        with open(lock_path, "r+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def hold_writer_lock(handle):
    """Takes the flock `writer_is_gone` checks on `handle`'s file, for as
    long as it stays open; nothing where the file system has none."""
    with contextlib.suppress(OSError):
        fcntl.flock(handle, fcntl.LOCK_EX)
