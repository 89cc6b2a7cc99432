"""--precision: bf16 copies of a model, and what "auto" chooses."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers.processes import run_python
from t2t_repro.checkpoints import load_model
from t2t_repro.decoding import precision
from t2t_repro.serving import export_saved_model


def test_a_bf16_copy_holds_the_weights_rounded_and_fp32_is_the_model(toy_run_dir):
    model, _, _ = load_model(toy_run_dir)
    assert precision.in_precision(model, "fp32") is model
    assert precision.in_precision(model, None) is model
    copy = precision.in_precision(model, "bf16")
    assert keras.mixed_precision.global_policy().name == "float32"
    assert copy.compute_dtype == "bfloat16"
    assert precision.in_precision(copy, "bf16") is copy
    assert [w.path for w in copy.weights] == [w.path for w in model.weights]
    for low, full in zip(copy.weights, model.weights, strict=True):
        expected = tf.cast(full, low.dtype) if full.dtype == "float32" else full
        np.testing.assert_array_equal(low.numpy(), expected.numpy())
    # The original keeps its float32 weights, and a bf16 copy asked for
    # fp32 becomes float32 again.
    assert {w.dtype for w in model.trainable_weights} == {"float32"}
    back = precision.in_precision(copy, "fp32")
    assert {w.dtype for w in back.trainable_weights} == {"float32"}


@pytest.mark.parametrize(
    "speedup, expected", [(4.7, "bf16"), (1.8, "bf16"), (1.4, "fp32"), (0.6, "fp32")]
)
def test_auto_follows_the_measured_bf16_speedup(monkeypatch, speedup, expected):
    monkeypatch.setattr(precision, "matmul_speedup", lambda dtype, device: speedup)
    assert precision.resolve_precision("auto") == expected
    assert precision.resolve_precision("fp32") == "fp32"
    with pytest.raises(ValueError, match="expected one of fp32, bf16, auto"):
        precision.resolve_precision("fp16")


@pytest.mark.slow
def test_an_export_names_its_precision(toy_run_dir, tmp_path):
    for name, dtype in [("fp32", "float32"), ("bf16", "bfloat16")]:
        path = export_saved_model(
            toy_run_dir, str(tmp_path / name), precision=name, warmup_requests=0
        )
        loaded = tf.saved_model.load(path)
        assert loaded.compute_dtype.numpy().decode() == dtype
        assert {v.dtype for v in loaded.model_variables if v.dtype.is_floating} == {
            tf.as_dtype(dtype)
        }


def test_precision_is_refused_where_it_cannot_apply(toy_run_dir, tmp_path):
    result = run_python(
        [
            "-m",
            "t2t_repro.cli",
            "translate",
            f"--saved_model={tmp_path}",
            "--precision=bf16",
        ]
    )
    assert result.returncode != 0
    assert "--precision is for --model_dir" in result.stderr
    result = run_python(
        [
            "-m",
            "t2t_repro.cli",
            "export",
            f"--model_dir={toy_run_dir}",
            "--format=ctranslate2",
            f"--export_dir={tmp_path}",
            "--precision=bf16",
        ]
    )
    assert result.returncode != 0
    assert "--precision is for SavedModels" in result.stderr
