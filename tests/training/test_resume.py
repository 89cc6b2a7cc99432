"""Resuming a run: exactly where it stopped, every weight restored, and
never silently with other settings (a changed model, data order,
precision, replica count or --accum_steps is refused unless
--allow_option_changes)."""

import types

import numpy as np
import pytest
import tensorflow as tf

from helpers.toy_run import SMALL, toy_pairs, toy_trainer
from helpers.train_command import MULTI30K_VAL, run_train
from helpers.vocab_for_tests import tiny_vocab
from t2t_repro import checkpoints
from t2t_repro.checkpoints import load_model
from t2t_repro.config import ConfigError, TrainingOptions, TransformerConfig
from t2t_repro.training.prepare import prepare_run


def _weights_twice(monkeypatch):
    """Makes training checkpoints of the earlier layout, which held each
    weight's `tf.Variable`, so that the optimizer's Keras variables stored
    every weight again under optimizer/_trainable_variables/."""
    keyed = checkpoints._variables_by_key
    monkeypatch.setattr(
        checkpoints,
        "_variables_by_key",
        lambda model: {key: v.value for key, v in keyed(model).items()},
    )


@pytest.mark.parametrize(
    "layout",
    ["each_weight_once", pytest.param("weights_twice", marks=pytest.mark.slow)],
)
def test_resume_reproduces_an_uninterrupted_run(tmp_path, monkeypatch, layout):
    straight = toy_trainer(tmp_path / "straight", 20)
    straight.train()
    expected = [w.numpy() for w in straight.model.weights]
    saved = tf.train.list_variables(str(tmp_path / "straight" / "ckpt-20"))
    stored = [n for n, _ in saved if n.startswith("model/")]
    assert len(stored) == len(straight.model.variables)  # dropout RNGs too
    assert not [n for n, _ in saved if n.startswith("optimizer/_trainable")]

    with monkeypatch.context() as patch:
        if layout == "weights_twice":
            _weights_twice(patch)
        first_half = toy_trainer(tmp_path / "resumed", 10)
        assert first_half.train() == 10
    saved = tf.train.list_variables(str(tmp_path / "resumed" / "ckpt-10"))
    copies = [n for n, _ in saved if n.startswith("optimizer/_trainable")]
    assert len(copies) == (layout == "weights_twice") * len(
        first_half.model.trainable_variables
    )
    del first_half
    resumed = toy_trainer(tmp_path / "resumed", 20)
    assert resumed.step == 10
    assert resumed.train() == 20
    for want, got in zip(expected, resumed.model.weights):
        np.testing.assert_allclose(got.numpy(), want, atol=1e-5)
    assert int(resumed.optimizer.iterations.numpy()) == 20


def test_a_fresh_model_restores_every_trained_weight(tmp_path):
    # Keras 3 hides list-held sublayers from tf.train.Checkpoint: a model
    # checkpoint that saved the embedding alone once passed every resume
    # test, because the optimizer also tracks the variables.
    trainer = toy_trainer(tmp_path / "run", 5)
    trainer.train()
    restored, proto, checkpoint = load_model(str(tmp_path / "run"))
    assert checkpoint.endswith("ckpt-5") and proto == tiny_vocab()
    assert len(restored.weights) == len(trainer.model.weights) > 20
    for want, got in zip(trainer.model.weights, restored.weights):
        np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=want.path)


def test_changed_model_flags_do_not_resume_silently(tmp_path):
    toy_trainer(tmp_path / "run", 1).train()
    other = TransformerConfig(**{**SMALL.__dict__, "d_model": 32})
    with pytest.raises(ValueError, match="different model config"):
        prepare_run(
            other,
            TrainingOptions(
                model_dir=str(tmp_path / "run"), train_steps=2, mixed_precision="fp32"
            ),
            tf.distribute.MirroredStrategy(),
            tiny_vocab(),
            toy_pairs(),
        )


def test_changed_data_order_options_do_not_resume_silently(tmp_path):
    toy_trainer(tmp_path / "run", 1).train()
    with pytest.raises(
        ValueError,
        match=r"changed \(old, new\): "
        r"\{'batch_tokens': \(128, 256\), 'seed': \(3, 4\)\}",
    ):
        toy_trainer(tmp_path / "run", 2, batch_tokens=256, seed=4)
    assert (
        toy_trainer(
            tmp_path / "run", 2, batch_tokens=256, seed=4, allow_option_changes=True
        ).train()
        == 2
    )
    assert (
        toy_trainer(tmp_path / "run", 2, batch_tokens=256, seed=4).step == 2
    )  # the new options are the run's now


@pytest.mark.parametrize(
    "before, after, changed",
    [
        (
            {"mixed_precision": "bf16"},
            {"mixed_precision": "fp32"},
            "'mixed_precision': ('bf16', 'fp32')",
        ),
        pytest.param(
            {}, {"accum_steps": 2}, "'accum_steps': (1, 2)", marks=pytest.mark.slow
        ),
    ],
)
def test_a_resume_with_another_precision_or_accum_steps_is_refused(
    tmp_path, before, after, changed
):
    assert toy_trainer(tmp_path, 1, **before).train() == 1
    with pytest.raises(ConfigError) as refused:
        toy_trainer(tmp_path, 2, **after)
    message = str(refused.value)
    assert "\n" not in message
    assert f"changed (old, new): {{{changed}}}" in message
    assert "--allow_option_changes" in message
    assert not (tmp_path / "train.lock").exists()
    resumed = toy_trainer(tmp_path, 2, allow_option_changes=True, **after)
    assert resumed.step == 1 and resumed.train() == 2
    # The run's options are the new ones now.
    assert toy_trainer(tmp_path, 2, **after).step == 2


def test_a_resume_with_another_replica_count_is_refused(tmp_path):
    assert toy_trainer(tmp_path, 1).train() == 1
    # The check comes before the strategy is used: a stand-in for 2 local
    # replicas (the CLI test below uses real ones).
    two_replicas = types.SimpleNamespace(num_replicas_in_sync=2, cluster_resolver=None)
    with pytest.raises(ConfigError) as refused:
        toy_trainer(tmp_path, 2, strategy=two_replicas)
    message = str(refused.value)
    assert "\n" not in message
    assert "changed (old, new): {'replicas': (1, 2)}" in message
    assert "--allow_option_changes" in message


# Three t2t-train processes (80 s on a loaded 2-core machine).
@pytest.mark.slow
def test_t2t_train_refuses_changed_options_with_one_line(tmp_path):
    flags = [f"--model_dir={tmp_path}/run", "--log_every=1", *MULTI30K_VAL]
    first = run_train(
        *flags, "--train_steps=1", "--cpu_devices=2", "--mixed_precision=bf16"
    )
    assert first.returncode == 0, first.stderr[-3000:]
    changed = [
        "--train_steps=2",
        "--cpu_devices=1",
        "--mixed_precision=fp32",
        "--accum_steps=2",
    ]
    refused = run_train(*flags, *changed)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "Traceback" not in refused.stderr
    # The last line, and the only error line.
    errors = [
        line
        for line in refused.stderr.splitlines()
        if line.startswith("t2t-train: error: ")
    ]
    assert errors == [refused.stderr.strip().splitlines()[-1]], errors
    assert (
        "changed (old, new): {'accum_steps': (1, 2), 'mixed_precision': "
        "('bf16', 'fp32'), 'replicas': (2, 1)}"
    ) in errors[0]
    allowed = run_train(*flags, *changed, "--allow_option_changes")
    assert allowed.returncode == 0, allowed.stderr[-3000:]
    assert tf.train.latest_checkpoint(str(tmp_path / "run")).endswith("ckpt-2")
