"""A setting out of its bounds is refused with one message, the same in
Python (its settings class) and as a flag (one line, exit status 2)."""

import dataclasses
import json
import math
import re

import numpy
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


def test_numpy_scalars_become_python_values_that_json_writes():
    # Settings are written as JSON (config.json, an export's decoding record).
    decoding = DecodingOptions(beam_size=numpy.int64(5), alpha=numpy.float32(1.5))
    assert type(decoding.beam_size) is int and type(decoding.alpha) is float
    assert json.loads(json.dumps(dataclasses.asdict(decoding)))["beam_size"] == 5
    with pytest.raises(ConfigError, match="--beam_size=0 must be"):
        DecodingOptions(beam_size=numpy.int64(0))


@pytest.mark.parametrize(
    "settings, message",
    [
        # A number in a string: the combinations would have computed with it.
        (
            lambda: TransformerConfig(d_model="512"),
            "d_model='512' must be int, not str",
        ),
        # A truthy string: a pre-norm model, silently.
        (lambda: TransformerConfig(pre_norm="false"), "pre_norm='false' must be bool"),
        (
            lambda: DecodingOptions(beam_size=True),
            "beam_size=True must be int, not bool",
        ),
        (
            lambda: TrainingOptions("run", label_smoothing="0.1"),
            "must be float, not str",
        ),
        # None only where it is the default ("not given").
        (lambda: TransformerConfig(pre_norm=None), "pre_norm=None must be bool"),
    ],
)
def test_a_setting_of_the_wrong_type_is_refused_naming_it(settings, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        settings()


def test_settings_take_ints_for_floats_and_paths_for_strings(tmp_path):
    assert TransformerConfig(dropout=0).dropout == 0
    assert TrainingOptions(tmp_path).model_dir == str(tmp_path)
