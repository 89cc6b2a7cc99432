"""Every tool answers bad input with one line, exit status 2, and no
traceback (the matrix is tests/helpers/bad_inputs.py; the README's
"Reliability" table is printed from it)."""

import concurrent.futures

import pytest

from bad_inputs import CASES, fill, run_case, write_files


@pytest.fixture(scope="module")
def outcomes(toy_run_dir, tmp_path_factory):
    """Each case's (exit status, stderr, directory), run a few at a time:
    most of a case's time is TensorFlow's import."""
    directory = str(tmp_path_factory.mktemp("bad_inputs"))
    write_files(directory, toy_run_dir)
    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        results = pool.map(lambda case: run_case(case, directory,
                                                 toy_run_dir), CASES)
        return {case: (*result, directory)
                for case, result in zip(CASES, results)}


@pytest.mark.parametrize("case", CASES,
                         ids=[f"{c.tool}-{c.problem}" for c in CASES])
def test_bad_input_is_one_line_naming_the_problem(case, outcomes,
                                                  toy_run_dir):
    status, stderr, directory = outcomes[case]
    assert "Traceback" not in stderr, stderr[-3000:]
    last_line = stderr.strip().splitlines()[-1]
    assert last_line.startswith(f"t2t-{case.tool}: error: "), stderr[-3000:]
    assert fill(case.expected, directory, toy_run_dir) in last_line
    assert status == 2
