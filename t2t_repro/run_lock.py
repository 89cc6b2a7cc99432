"""MODEL_DIR/train.lock: one trainer per run directory.

The chief holds it (its pid, host and a per-process token) while it
prepares and trains the run, and touches it every LOCK_REFRESH_SECONDS, so
that workers on other hosts, which cannot check its process, see it alive
(`LockWatcher`).
Directories on remote filesystems (gs://...) are not locked: they have no
exclusive create.
"""

import atexit
import contextlib
import json
import os
import socket
import threading
import time
import uuid

from absl import logging

from t2t_repro.config import ConfigError

LOCK_FILENAME = "train.lock"
# A lock file this old that still holds no pid was cut off by a kill
# between its creation and its write.
_UNWRITTEN_LOCK_SECONDS = 10
# A trainer touches its lock this often; a lock from another host (whose
# process cannot be checked from here) left unchanged for
# LOCK_FRESH_SECONDS is taken for a dead trainer's.
LOCK_REFRESH_SECONDS = 10
LOCK_FRESH_SECONDS = 60
# This process's, in its lock: a container restarted on the same host
# often gets the pid its killed predecessor had (1, as the entrypoint), and
# containers that share a host name have each their pid 1.
_PROCESS_TOKEN = uuid.uuid4().hex


@contextlib.contextmanager
def training_lock(model_dir):
    """Makes this process `model_dir`'s only trainer while the block runs.

    Writes train.lock (pid, host, token) exclusively and keeps it fresh.
    A lock whose process is gone (killed on this host) is taken over; a
    live one, or one from another host, is a ConfigError naming the holder. In a
    process that holds it already (a trainer prepared and not trained
    yet), it takes nothing and releases nothing. A lock never released (a
    trainer built and never trained) goes when the process exits.
    """
    if "://" in model_dir:
        logging.warning(
            "%s: remote model_dir, not locked against a second trainer", model_dir
        )
        yield
        return
    path = os.path.join(model_dir, LOCK_FILENAME)
    taken = _take(path)
    try:
        yield
    finally:
        if taken:
            _release(path)


def _mine():
    return {"pid": os.getpid(), "host": socket.gethostname(), "token": _PROCESS_TOKEN}


def _take(path):
    """Takes the lock at `path`; False if this process holds it already."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    mine = _mine()
    while True:
        try:
            descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            holder = _read_lock(path)
            if holder == mine:
                return False
            if not _is_stale(path, holder, mine["host"]):
                raise ConfigError(
                    f"{path}: another trainer (pid {holder.get('pid')} "
                    f"on {holder.get('host')}) is using this model_dir; "
                    "two would overwrite each other's checkpoints. "
                    "Wait for it, or delete the file if it is gone."
                ) from None
            if holder:
                logging.warning(
                    "%s: taking over the lock of pid %s, which is no longer running",
                    path,
                    holder["pid"],
                )
            try:
                # Only one of several racing trainers wins the rename.
                os.rename(path, f"{path}.stale.{os.getpid()}")
                os.remove(f"{path}.stale.{os.getpid()}")
            except FileNotFoundError:
                pass
            continue
        with os.fdopen(descriptor, "w") as handle:
            json.dump(mine, handle)
        atexit.register(_release, path)
        threading.Thread(target=_keep_fresh, args=(path, mine), daemon=True).start()
        return True


def _release(path):
    """Removes the lock at `path` if this process holds it."""
    if _read_lock(path) == _mine():
        os.remove(path)


def _keep_fresh(path, mine):
    """Touches the lock at `path` for as long as it is `mine`."""
    while True:
        time.sleep(LOCK_REFRESH_SECONDS)
        if _read_lock(path) != mine:
            return
        try:
            os.utime(path)
        except FileNotFoundError:  # released meanwhile
            return


class LockWatcher:
    """Tells, each time it is asked, whether the train.lock of `model_dir`
    is held: by a live process on this host, or on another host by one
    that keeps it fresh. Freshness is timed by this watcher's clock (the
    lock's modification time changed within LOCK_FRESH_SECONDS), so that
    the hosts' clocks need not agree."""

    def __init__(self, model_dir):
        self.path = os.path.join(model_dir, LOCK_FILENAME)
        self._host = socket.gethostname()
        self._mtime: float | None = None
        self._changed_at = 0.0

    def is_held(self):
        holder = _read_lock(self.path)
        try:
            mtime = os.path.getmtime(self.path)
        except FileNotFoundError:
            return False
        if _is_stale(self.path, holder, self._host):
            return False
        if not holder or (
            holder.get("host") == self._host and holder.get("pid") != os.getpid()
        ):
            return True  # being written, or a live process here
        now = time.monotonic()
        if mtime != self._mtime:
            self._mtime, self._changed_at = mtime, now
        return now - self._changed_at < LOCK_FRESH_SECONDS


def _read_lock(path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def _is_stale(path, holder, host):
    """Whether the lock's process is known to be gone (or the lock was
    released meanwhile)."""
    if not holder:
        return _untouched_for(path, _UNWRITTEN_LOCK_SECONDS)
    if holder.get("host") != host or not isinstance(holder.get("pid"), int):
        return False
    if holder["pid"] == os.getpid():
        # This process's pid in another process (another container): its
        # process cannot be checked, so it is judged by its freshness.
        return holder.get("token") != _PROCESS_TOKEN and _untouched_for(
            path, LOCK_FRESH_SECONDS
        )
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # alive, another user's
    return False


def _untouched_for(path, seconds):
    """Whether the file at `path` is gone or unchanged for `seconds`."""
    try:
        return time.time() - os.path.getmtime(path) > seconds
    except FileNotFoundError:
        return True
