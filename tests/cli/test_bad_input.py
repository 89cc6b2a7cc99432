"""Every tool answers bad input with one line on stderr, exit status 2,
and no traceback (the matrix is tests/helpers/bad_inputs.py; the "Bad input"
table of docs/reliability.md is printed from it).

The default suite runs one case per kind of check and tool (a process each,
most of it TensorFlow's import); `-m slow` runs the whole matrix."""

import concurrent.futures
import re

import pytest

from helpers.bad_inputs import (
    CASES,
    as_documented,
    documented_rows,
    fill,
    run_case,
    suite,
    write_files,
)

# A line of TensorFlow's C++ runtime, which a tool cannot always hold back
# (the runtime writes some before absl logging is initialised, whatever the
# log level): absl's C++ log prefix "[IWEF]MMDD HH:MM:SS.micros THREAD
# FILE:LINE] " (before initialisation "0000 00:00:SECONDS_SINCE_1970.micros")
# naming a C++ source file, .cc or .h. Python's absl lines have the same
# prefix naming a .py file: those are the tool's (or TensorFlow's Python's),
# and count.
TENSORFLOW_CPP_LOG_LINE = re.compile(
    r"[IWEF]\d{4} \d\d:\d\d:\d+\.\d{6}\s+\d+ [\w.-]+\.(cc|h):\d+\] "
)


@pytest.fixture(scope="module")
def outcomes(request, toy_run_dir, tmp_path_factory):
    """Each selected case's (exit status, stderr, directory), run a few at
    a time."""
    selected = [
        item.callspec.params["case"]
        for item in request.session.items
        if item.function is test_bad_input_is_one_line_naming_the_problem
    ]
    directory = str(tmp_path_factory.mktemp("bad_inputs"))
    write_files(directory, toy_run_dir)
    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        results = pool.map(
            lambda case: run_case(case, directory, toy_run_dir), selected
        )
        return {case: (*result, directory) for case, result in zip(selected, results)}


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            case,
            id=f"{case.tool}-{case.problem}",
            marks=() if suite(case) == "default" else pytest.mark.slow,
        )
        for case in CASES
    ],
)
def test_bad_input_is_one_line_naming_the_problem(case, outcomes, toy_run_dir):
    status, stderr, directory = outcomes[case]
    assert "Traceback" not in stderr, stderr[-3000:]
    # The error and nothing else: no progress, warning or log line of the
    # tool's before it, Python's (absl, TensorFlow's Python) included.
    lines = [
        line
        for line in stderr.splitlines()
        if line.strip() and not TENSORFLOW_CPP_LOG_LINE.match(line)
    ]
    assert len(lines) == 1, stderr[-3000:]
    assert lines[0].startswith(f"t2t-{case.tool}: error: "), stderr[-3000:]
    assert fill(case.expected, directory, toy_run_dir) in lines[0]
    assert status == 2
    # docs/reliability.md quotes the whole line.
    documented, _ = dict(documented_rows())[case.tool, case.problem]
    assert as_documented(lines[0], directory, toy_run_dir) == documented


@pytest.mark.parametrize(
    "line, tensorflows",
    [
        (
            "I0000 00:00:1795657194.093707   26088 service.cc:153] XLA service "
            "0x7fb9f81401a0 initialized for platform Host",
            True,
        ),
        (
            "E0000 00:00:1795657190.732387   25890 cuda_platform.cc:52] failed "
            "call to cuInit: INTERNAL: CUDA error",
            True,
        ),
        (
            "I0000 00:00:1795657194.566035   26088 device_compiler.h:208] "
            "Compiled cluster using XLA!",
            True,
        ),
        (
            "W1126 01:40:21.646052 139782313417600 cpu_feature_guard.cc:210] "
            "This TensorFlow binary is optimized",
            True,
        ),
        # Python's absl logging, the tool's (or TensorFlow's Python).
        (
            "I1126 01:40:21.709586 139782313417600 train.py:111] 1 replica(s) "
            "with MirroredStrategy",
            False,
        ),
        ("t2t-train: error: DIR/two.de has 2 lines", False),
        ("translated 3/3 sentences, 0.2/s", False),
    ],
)
def test_only_tensorflows_cpp_log_lines_are_left_out(line, tensorflows):
    assert bool(TENSORFLOW_CPP_LOG_LINE.match(line)) == tensorflows


def test_the_docs_table_lists_every_case_with_its_message_and_suite():
    """docs/reliability.md's "Bad input" table has one row per case of the
    matrix, in its suite, whose message holds what the test expects (the
    whole message is compared where the case runs)."""
    rows = documented_rows()
    assert sorted(key for key, _ in rows) == sorted((c.tool, c.problem) for c in CASES)
    rows = dict(rows)
    for case in CASES:
        message, row_suite = rows[case.tool, case.problem]
        assert row_suite == suite(case), case
        assert message.startswith(f"t2t-{case.tool}: error: "), case
        assert fill(case.expected, "DIR", "RUN") in message, case
