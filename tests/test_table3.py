"""Table 3 ablations: each row's flagfile changes what the paper's row
changes, and the report tabulates runs as the paper lays them out."""

import dataclasses
import json
import math
import os

import pytest

from helpers.processes import HELPERS, run_python
from helpers.toy_run import SMALL, toy_pairs, toy_trainer

# What each row changes from flags/table3/base.cfg (the paper's ratio to
# its base), as TransformerConfig / TrainingOptions fields.
BASE_WIDTH, BASE_HEADS, BASE_LAYERS, BASE_FF = 256, 8, 3, 1024
EXPECTED_CHANGES = {
    "A-h1": {"num_heads": 1},
    "A-h4": {"num_heads": 4},
    "A-h16": {"num_heads": 16},
    "A-h32": {"num_heads": 32},
    "B-dk8": {"key_dim": 8, "value_dim": 32},
    "B-dk16": {"key_dim": 16, "value_dim": 32},
    "C-N1": {"num_encoder_layers": 1, "num_decoder_layers": 1},
    "C-N2": {"num_encoder_layers": 2, "num_decoder_layers": 2},
    "C-N4": {"num_encoder_layers": 4, "num_decoder_layers": 4},
    "C-d128": {"d_model": 128},
    "C-d512": {"d_model": 512},
    "C-dff512": {"d_ff": 512},
    "C-dff2048": {"d_ff": 2048},
    "D-drop0.0": {"dropout": 0.0},
    "D-drop0.2": {"dropout": 0.2},
    "D-ls0.0": {"label_smoothing": 0.0},
    "D-ls0.2": {"label_smoothing": 0.2},
    "E-learned": {"position_encoding": "learned"},
}


@pytest.fixture(scope="module")
def table3_flagfiles():
    result = run_python(
        [os.path.join(HELPERS, "flagfile_models.py"), "flags/table3/*.cfg"]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return {
        os.path.basename(path)[:-4]: model
        for path, model in json.loads(result.stdout.strip().splitlines()[-1]).items()
    }


@pytest.mark.slow  # builds every row's model: 48 s
def test_each_row_changes_only_what_the_papers_row_changes(table3_flagfiles):
    base = table3_flagfiles.pop("base")
    assert (
        base["config"]["d_model"],
        base["config"]["num_heads"],
        base["config"]["num_encoder_layers"],
        base["config"]["d_ff"],
    ) == (BASE_WIDTH, BASE_HEADS, BASE_LAYERS, BASE_FF)
    assert sorted(table3_flagfiles) == sorted(EXPECTED_CHANGES)
    base_settings = {**base["config"], **base["training"]}
    for row, model in table3_flagfiles.items():
        settings = {**model["config"], **model["training"]}
        changed = {k: v for k, v in settings.items() if v != base_settings[k]}
        assert changed == EXPECTED_CHANGES[row], row
        # (A): constant computation, d_k = d_v = d_model / h.
        if row.startswith("A-"):
            assert model["params"] == base["params"], row


@pytest.mark.slow
def test_the_report_tabulates_runs_like_the_paper(tmp_path):
    runs, perplexities = tmp_path / "runs", {}
    for row, config in (
        ("A-h1", dataclasses.replace(SMALL, num_heads=1)),
        ("base", SMALL),
    ):
        trainer = toy_trainer(
            runs / row, 4, config=config, eval_every=4, dev_pairs=toy_pairs().take(4)
        )
        trainer.train()
        perplexities[row] = math.exp(trainer.evaluator.loss(trainer.model)[1])
    result = run_python(
        [
            "scripts/table3_report.py",
            f"--runs={runs}",
            f"--output={tmp_path / 'table3'}",
        ]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads((tmp_path / "table3.json").read_text())
    assert [r["row"] for r in rows] == ["base", "A-h1"]  # the paper's order
    for row in rows:
        assert row["steps"] == 4
        assert row["dev_ppl"] == round(perplexities[row["row"]], 2)
        assert math.isfinite(row["dev_bleu"])
    assert (
        rows[0]["N"],
        rows[0]["d_model"],
        rows[0]["h"],
        rows[0]["d_k"],
        rows[0]["P_drop"],
        rows[0]["eps_ls"],
    ) == (1, 16, 2, 8, 0.1, 0.1)
    assert (rows[1]["h"], rows[1]["d_k"], rows[1]["d_v"]) == (1, 16, 16)
    assert rows[0]["params"] == rows[1]["params"]
    assert (rows[0]["paper_ppl"], rows[0]["paper_bleu"]) == (4.92, 25.8)
    table = (tmp_path / "table3.md").read_text()
    assert table == result.stdout
    assert table.splitlines()[0].startswith("| row | N | d_model | d_ff | h")
