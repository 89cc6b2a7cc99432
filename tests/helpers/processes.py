"""Running the package's tools and the tests' helper scripts in fresh
Python processes, as a user or a server would."""

import os
import socket
import subprocess
import sys
import threading

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


def user_environment(**extra):
    """`quiet_environment` without TF_CPP_MIN_LOG_LEVEL, as a user runs a
    tool: setting that variable at all asks the tools for TensorFlow's own
    log lines."""
    environment = quiet_environment(**extra)
    del environment["TF_CPP_MIN_LOG_LEVEL"]
    return environment


def free_port():
    """A TCP port of 127.0.0.1 that nothing listens on (for TF_CONFIG)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_python(args, stdin=None, env=None, timeout=600, quiet=True):
    """`python *args` run from the repository root; a CompletedProcess with
    text stdout and stderr. `env` adds variables to `quiet_environment`,
    or with `quiet=False` to `user_environment`."""
    environment = quiet_environment if quiet else user_environment
    return subprocess.run(
        [sys.executable, *args],
        input=stdin,
        cwd=REPO,
        env=environment(**(env or {})),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_python(args, env=None):
    """`python *args` started from the repository root in
    `quiet_environment(**env)`, stdout and stderr piped (text)."""
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=REPO,
        env=quiet_environment(**(env or {})),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_line(process, text, seconds=300):
    """Reads `process`'s stderr up to a line containing `text`; returns
    the lines read. If none comes within `seconds` (or stderr ends), kills
    `process` and raises AssertionError with the end of what it wrote."""
    watchdog = threading.Timer(seconds, process.kill)
    watchdog.start()
    lines = []
    try:
        for line in process.stderr:
            lines.append(line)
            if text in line:
                return lines
    finally:
        watchdog.cancel()
    process.kill()
    raise AssertionError(f"no {text!r} within {seconds} s:\n" + "".join(lines)[-3000:])


def signal_after_step(process, signum, step=5, seconds=300):
    """Sends `signum` to a `t2t-train` `process` (started by
    `start_python`) once it has logged `step STEP/`; returns its whole
    (stdout, stderr) once it has exited."""
    before = wait_for_line(process, f"step {step}/", seconds)
    process.send_signal(signum)
    stdout, rest = process.communicate(timeout=120)
    return stdout, "".join(before) + rest
