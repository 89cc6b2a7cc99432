"""t2t-train's answers to flags and data it cannot train on: the problem
named, never a traceback or a wait for a batch that never comes."""

import pytest

from helpers.multi30k_data import multi30k
from helpers.train_command import MULTI30K_VAL, run_train


@pytest.mark.slow
def test_cli_rejects_bad_flags_clearly(tmp_path):
    result = run_train(
        f"--model_dir={tmp_path}/a", "--d_model=30", "--num_heads=4", *MULTI30K_VAL
    )
    assert result.returncode != 0
    assert "d_model=30 is not divisible by num_heads=4" in result.stderr
    result = run_train(
        f"--model_dir={tmp_path}/b", f"--train_src={multi30k('val', 'en')}"
    )
    assert result.returncode != 0
    assert "--train_src and --train_tgt go together" in result.stderr
    result = run_train(
        f"--model_dir={tmp_path}/c",
        f"--train_src={multi30k('val', 'en')}",
        f"--train_tgt={multi30k('train', 'de')}",
    )
    assert result.returncode != 0
    assert "parallel files must be line-aligned" in result.stderr


@pytest.mark.slow
def test_data_that_yields_no_batch_is_an_error_not_a_hang(tmp_path):
    # Every pair longer than --max_length: the repeated, filtered input
    # used to wait forever for a first batch.
    result = run_train(
        f"--model_dir={tmp_path}/long", "--max_length=2", *MULTI30K_VAL, timeout=120
    )
    assert result.returncode != 0
    assert f"{multi30k('val', 'en')}: no pair fits --max_length=2" in result.stderr
    assert "Traceback" not in result.stderr
    blank = tmp_path / "blank.en"
    blank.write_text(" \n\t\n  \n", "utf-8")
    (tmp_path / "words.de").write_text("ein\nzwei\ndrei\n", "utf-8")
    result = run_train(
        f"--model_dir={tmp_path}/blank",
        f"--train_src={blank}",
        f"--train_tgt={tmp_path}/words.de",
        timeout=120,
    )
    assert result.returncode != 0
    assert "every one of the 3 lines has an empty" in result.stderr
    assert "Traceback" not in result.stderr
