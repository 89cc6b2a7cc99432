"""Every tool answers bad input with one line, exit status 2, and no
traceback (the matrix is tests/helpers/bad_inputs.py; the "Bad input"
table of docs/reliability.md is printed from it).

The default suite runs one case per kind of check and tool (a process each,
most of it TensorFlow's import); `-m slow` runs the whole matrix."""

import concurrent.futures
import re

import pytest

from helpers.bad_inputs import CASES, fill, run_case, write_files

DEFAULT_SUITE = {
    ("train", "mismatched lines"),
    ("train", "invalid UTF-8"),
    ("train", "missing test file"),
    ("train", "contradictory flags"),
    ("train", "config.json cut in half"),
    ("eval", "checkpoint does not fit config.json"),
    ("translate", "missing --checkpoint"),
    ("export", "unwritable --export_dir"),
    ("average", "fewer checkpoints than asked"),
    ("attention", "--layers out of range"),
    ("summary", "impossible model"),
}
assert DEFAULT_SUITE <= {(c.tool, c.problem) for c in CASES}


@pytest.fixture(scope="module")
def outcomes(request, toy_run_dir, tmp_path_factory):
    """Each selected case's (exit status, stderr, directory), run a few at
    a time."""
    selected = [
        item.callspec.params["case"]
        for item in request.session.items
        if item.module is request.module
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
            marks=()
            if (case.tool, case.problem) in DEFAULT_SUITE
            else pytest.mark.slow,
        )
        for case in CASES
    ],
)
def test_bad_input_is_one_line_naming_the_problem(case, outcomes, toy_run_dir):
    status, stderr, directory = outcomes[case]
    assert "Traceback" not in stderr, stderr[-3000:]
    # Before the error only the tool's own progress lines (absl INFO):
    # no warning, C++ log line or traceback around it.
    progress = stderr.strip().splitlines()[:-1]
    assert all(re.match(r"I\d{4} ", line) for line in progress), stderr[-3000:]
    last_line = stderr.strip().splitlines()[-1]
    assert last_line.startswith(f"t2t-{case.tool}: error: "), stderr[-3000:]
    assert fill(case.expected, directory, toy_run_dir) in last_line
    assert status == 2
