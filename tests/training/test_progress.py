"""Training progress: the log line's step of the total and ETA, the bar on
a terminal, and the dev evaluation's progress."""

import io
import logging
import re

import pytest

from helpers.toy_run import learnable_run_evaluator, toy_pairs, toy_trainer
from t2t_repro.progress import Progress
from t2t_repro.training.metrics import format_duration, log_line


@pytest.mark.parametrize(
    "seconds, text",
    [
        (0, "0s"),
        (-3, "0s"),
        (45.4, "45s"),
        (59.6, "1m00s"),
        (252, "4m12s"),
        (3600 + 5 * 60 + 29, "1h05m"),
        (3 * 86400 + 4 * 3600 + 59 * 60, "3d04h"),
    ],
)
def test_durations_show_their_two_largest_units(seconds, text):
    assert format_duration(seconds) == text


_METRICS = {
    "loss": 2.13456,
    "accuracy": 0.5123,
    "learning_rate": 0.000712,
    "grad_norm": 0.8123,
    "tokens_per_second": 12345.6,
    "padding_efficiency": 0.851,
    "seconds_per_step": 0.4,
    "nonfinite_steps": 0.0,
}


def test_log_line_gives_the_step_of_the_total_and_the_eta_at_its_rate():
    # 650 steps left at 0.4 s a step.
    assert log_line(_METRICS, 300, 950) == (
        "step 300/950 loss 2.1346 acc 0.512 lr 0.000712 |g| 0.812 12346 "
        "tok/s pad-eff 0.85 0.400 s/step ETA 4m20s"
    )
    assert log_line(_METRICS, 950, 950).endswith(" ETA 0s")


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_bar_only_on_a_terminal_and_cleared_for_each_log_line():
    log_file = io.StringIO()
    plain = Progress(10, "trained", "steps", 3, interval=None, stream=log_file)
    plain.update()
    plain.close()
    assert log_file.getvalue() == ""

    terminal = _Terminal()
    # Where the log lines go: the same terminal, as stderr's would.
    handler = logging.StreamHandler(terminal)
    logging.getLogger().addHandler(handler)
    try:
        bar = Progress(10, "trained", "steps", 3, interval=None, stream=terminal)
        bar.update()
        logging.getLogger("absl").warning("a log line")
        bar.update()
        bar.close()
    finally:
        logging.getLogger().removeHandler(handler)
    before, after = terminal.getvalue().split("a log line\n")
    assert "3/10" in before
    # The bar's line was blanked and the log line starts a line of its own.
    assert re.search(r"\r +\r+$", before), repr(before)
    assert "5/10" in after  # and the bar comes back below it
    assert not handler.filters  # the bar took its filter away


def test_toy_run_logs_the_step_of_the_total_and_the_eta(tmp_path, caplog):
    # An in-process flag parse elsewhere sets absl's logger to WARNING.
    caplog.set_level(logging.INFO, logger="absl")
    toy_trainer(tmp_path / "run", 10).train()
    lines = [
        r.getMessage() for r in caplog.records if re.match(r"step \d+/", r.getMessage())
    ]
    assert len(lines) == 2
    assert re.fullmatch(r"step 5/10 loss .* s/step ETA \d+s", lines[0])
    assert re.fullmatch(r"step 10/10 loss .* s/step ETA 0s", lines[1])


def test_dev_evaluation_reports_sentences_done_and_their_rate(
    toy_run_dir, tmp_path, capsys
):
    learnable_run_evaluator(toy_run_dir, toy_pairs().take(8), str(tmp_path))
    assert re.search(r"translated 8/8 sentences, [\d.]+/s", capsys.readouterr().err)
