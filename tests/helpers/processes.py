"""Running the package's tools and the tests' helper scripts in fresh
Python processes, as a user or a server would."""

import os
import socket
import subprocess
import sys

# This package: the helper scripts run as processes, and import each other
# as `helpers.NAME` with tests/ on the path.
HELPERS = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HELPERS)
REPO = os.path.dirname(TESTS)


def quiet_environment(**extra):
    """os.environ with TensorFlow's C++ logging quiet and the `helpers`
    package importable (the helper scripts import each other), plus
    `extra`."""
    return {**os.environ, "PYTHONPATH": TESTS, "TF_CPP_MIN_LOG_LEVEL": "2", **extra}


def free_port():
    """A TCP port of 127.0.0.1 that nothing listens on (for TF_CONFIG)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_python(args, stdin=None, env=None, timeout=600):
    """`python *args` run from the repository root; a CompletedProcess with
    text stdout and stderr."""
    return subprocess.run(
        [sys.executable, *args],
        input=stdin,
        cwd=REPO,
        env=quiet_environment(**(env or {})),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def signal_after_step(process, signum, step=5, timeout=300):
    """Sends `signum` to a `t2t-train` `process` (stderr piped) once it
    has logged `step N/` (or after `timeout` seconds); returns
    `communicate()`'s (stdout, rest of stderr)."""
    import time

    deadline = time.time() + timeout
    for line in process.stderr:
        if f"step {step}/" in line or time.time() > deadline:
            break
    process.send_signal(signum)
    return process.communicate(timeout=120)
