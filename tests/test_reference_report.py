"""scripts/reference_report.py: one results JSON of a finished run."""

import json

import pytest

from helpers.processes import run_python
from helpers.toy_run import toy_pairs, toy_trainer
from t2t_repro.averaging import average_checkpoints

EVAL_FIELDS = {
    "test": "test.en",
    "sacrebleu": 12.5,
    "sacrebleu_signature": "nrefs:1|case:mixed",
    "chrf": 30.0,
    "tokenized_bleu": 13.0,
    "tokenized_bleu_note": "tokenized",
    "lc_tok_bleu": 14.0,
    "lc_tok_bleu_note": "lowercased",
    "beam_size": 5,
    "alpha": 1.2,
}


@pytest.mark.slow
def test_the_report_names_the_checkpoints_the_average_holds(tmp_path):
    run = tmp_path / "run"
    options = {
        "dev_pairs": toy_pairs().take(2),
        "eval_every": 3,
        "checkpoint_every": 1,
        "keep_checkpoints": 6,
        "keep_best": 2,
        "dev_bleu_sentences": 2,
    }
    toy_trainer(run, 6, **options).train()
    # The last 3 checkpoints, not the best ones kept at evaluations.
    average_checkpoints(str(run), str(tmp_path / "average"), 3)
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "test.json").write_text(json.dumps(EVAL_FIELDS))
    report_command = [
        "scripts/reference_report.py",
        f"--run_dir={run}",
        f"--average_dir={tmp_path / 'average'}",
        f"--eval_dir={tmp_path / 'eval'}",
        f"--output={tmp_path / 'report.json'}",
        f"--plot={tmp_path / 'report.png'}",
        "--nomatmul_ceiling",
    ]
    result = run_python(report_command)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["averaged"] == [4, 5, 6]
    assert report["steps"] == 6
    assert report["sacrebleu"] == 12.5
    assert [e["step"] for e in report["dev_curve"]] == [3, 6]
    assert (tmp_path / "report.png").stat().st_size > 0
    # Trained on, the run outgrows its average: the report refuses it.
    toy_trainer(run, 7, **options).train()
    result = run_python(report_command)
    assert result.returncode != 0
    assert "averages checkpoints up to step 6, but" in result.stderr
