"""A setting out of its bounds is refused with one message, the same in
Python (its settings class) and as a flag (one line, exit status 2)."""

import math

import pytest

from helpers.processes import run_python
from t2t_repro.config import (
    ConfigError,
    DecodingOptions,
    ServingLimits,
    TrainingOptions,
    TransformerConfig,
)


@pytest.mark.parametrize(
    "tool, flag, settings",
    [
        ("train", "--train_steps=0", lambda: TrainingOptions("run", train_steps=0)),
        ("train", "--dropout=1", lambda: TransformerConfig(dropout=1.0)),
        ("translate", "--alpha=-1", lambda: DecodingOptions(alpha=-1.0)),
        ("export", "--max_alpha=nan", lambda: ServingLimits(max_alpha=math.nan)),
    ],
)
def test_a_setting_out_of_bounds_is_one_error_in_python_and_as_a_flag(
    tool, flag, settings, tmp_path
):
    with pytest.raises(ConfigError) as refused:
        settings()
    required = [f"--model_dir={tmp_path}"]
    if tool == "export":
        required.append(f"--export_dir={tmp_path}/export")
    result = run_python(
        ["-m", "t2t_repro.cli", tool, *required, flag],
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"t2t-{tool}: error: {refused.value}"]
