"""Training in 16 bits and XLA: the step matches float32's, fp16 counts its
skipped steps, the model decodes as float32's does, and
--mixed_precision=auto measures, then keeps the run's first choice."""

import collections
import dataclasses
import json
import math
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers.margins import teacher_forced_margins
from helpers.one_training_step import CONFIG, global_batch, one_step
from helpers.toy_run import toy_pairs, toy_trainer
from t2t_repro import kernels
from t2t_repro.checkpoints import load_model
from t2t_repro.config import DecodingOptions
from t2t_repro.data.vocabulary import make_tokenizer
from t2t_repro.decoding.precision import in_precision
from t2t_repro.inference.translators import ModelTranslator
from t2t_repro.run_dir import RunDir
from t2t_repro.training import precision as training_precision


@pytest.mark.parametrize(
    "precision, jit_compile, rtol",
    [pytest.param("fp32", True, 1e-5, marks=pytest.mark.slow), ("bf16", False, 2e-2)],
)
def test_xla_and_bf16_steps_match_float32(tmp_path, precision, jit_compile, rtol):
    strategy = tf.distribute.MirroredStrategy()
    plain = one_step(strategy, str(tmp_path / "plain"), [global_batch()])
    other = one_step(
        strategy,
        str(tmp_path / "other"),
        [global_batch()],
        mixed_precision=precision,
        jit_compile=jit_compile,
    )
    np.testing.assert_allclose(other["loss"], plain["loss"], rtol=rtol)
    np.testing.assert_allclose(other["grad_norm"], plain["grad_norm"], rtol=rtol)
    # Adam's first update is +-lr per weight: bf16 may flip the sign of a
    # near-zero gradient, but almost every weight must move the same way.
    same = [
        np.abs(other[k] - plain[k]) <= 1e-5
        for k in plain
        if k not in ("loss", "replicas", "grad_norm") and not k.endswith("/key/bias")
    ]
    fraction = np.mean(np.concatenate([s.ravel() for s in same]))
    assert fraction > (0.999 if precision == "fp32" else 0.95), fraction


@pytest.mark.parametrize(
    "precision, rtol",
    [("fp32", 1e-6), pytest.param("bf16", 1e-3, marks=pytest.mark.slow)],
)
def test_cpu_kernels_step_matches_tensorflow_ops(
    tmp_path, monkeypatch, precision, rtol
):
    traced = []

    def counting(name):
        kernel = getattr(kernels, name)

        def counted(*args):
            traced.append(name)
            return kernel(*args)

        return counted

    for name in ("layer_norm", "masked_softmax", "dropout", "smoothed_cross_entropy"):
        monkeypatch.setattr(kernels, name, counting(name))
    strategy = tf.distribute.MirroredStrategy()
    # With dropout: the kernel drops what the TensorFlow ops drop.
    config = dataclasses.replace(CONFIG, dropout=0.3)
    steps = {
        choice: one_step(
            strategy,
            str(tmp_path / choice),
            [global_batch()],
            config=config,
            mixed_precision=precision,
            cpu_kernels=choice,
        )
        for choice in ("tf", "auto")
    }
    # Every sublayer's LayerNorm and residual dropout (2 per encoder layer,
    # 3 per decoder layer), every attention (1 per encoder layer, 2 per
    # decoder layer), the two embeddings' dropouts, then the loss.
    sublayers = 2 * CONFIG.num_encoder_layers + 3 * CONFIG.num_decoder_layers
    assert collections.Counter(traced[:-1]) == {
        "layer_norm": sublayers,
        "masked_softmax": CONFIG.num_encoder_layers + 2 * CONFIG.num_decoder_layers,
        "dropout": sublayers + 2,
    }
    assert traced[-1] == "smoothed_cross_entropy"
    # The key bias's gradient is zero up to rounding (softmax ignores a
    # shift common to all keys): Adam's first update is +-lr on its noise.
    for key, value in steps["tf"].items():
        if key.endswith("/key/bias"):
            continue
        np.testing.assert_allclose(
            steps["auto"][key], value, rtol=rtol, atol=rtol, err_msg=key
        )


# fp16 is emulated on CPU (18 s): slow.
@pytest.mark.parametrize(
    "precision", ["bf16", pytest.param("fp16", marks=pytest.mark.slow)]
)
def test_mixed_precision_trains_and_counts_skipped_steps(tmp_path, precision):
    trainer = toy_trainer(tmp_path / precision, 12, mixed_precision=precision)
    assert (
        trainer.model.compute_dtype
        == {"bf16": "bfloat16", "fp16": "float16"}[precision]
    )
    assert trainer.train() == 12
    updates = int(trainer.optimizer.iterations.numpy())
    if precision == "fp16":
        # The loss scale halves on each skipped (overflowing) step and
        # cannot grow back within 12 steps.
        scale = float(trainer.optimizer.dynamic_scale.numpy())
        assert 0 < updates <= 12
        assert scale == 2.0**15 / 2 ** (12 - updates)
    else:
        assert updates == 12
    assert os.path.exists(tmp_path / precision / "ckpt-12.index")
    # Models built afterwards are float32 again.
    assert keras.mixed_precision.global_policy().name == "float32"
    resumed = toy_trainer(tmp_path / precision, 12, mixed_precision=precision)
    assert resumed.step == 12
    assert int(resumed.optimizer.iterations.numpy()) == updates


@pytest.mark.parametrize(
    "precision",
    [
        "bf16",
        *(pytest.param(p, marks=pytest.mark.slow) for p in ("fp16", "bf16 weights")),
    ],
)
def test_mixed_precision_decodes_as_float32_does(toy_run_dir, precision):
    # A run trained in 16 bits evaluates its dev BLEU with that model. On
    # the toy run, bf16's log-probabilities of the targets are float32's
    # to 0.005 nats (fp16's to 0.0005), and every token still wins by 3+
    # nats (2026-11-25). So: a margin of a nat in 16 bits too, then greedy
    # exactly as float32 (which the margin makes safe on any CPU), and beam
    # search on 90% of the sentences or more (all, when written). A
    # 16-bit-only bug (an embedding scale, a mask value or a cache that
    # rounds badly) costs the margin or many sentences.
    pairs = [(s.decode(), t.decode()) for s, t in toy_pairs().as_numpy_iterator()]
    sources, targets = (list(x) for x in zip(*pairs))
    model, proto, _ = load_model(toy_run_dir)
    tokenizer = make_tokenizer(proto)
    if precision == "bf16 weights":  # --precision=bf16 of the decoders
        low = in_precision(model, "bf16")
        assert {v.dtype for v in low.trainable_weights} == {"bfloat16"}
    else:  # a run trained in 16 bits
        keras.mixed_precision.set_global_policy(training_precision.POLICIES[precision])
        try:
            low, _, _ = load_model(toy_run_dir)
        finally:
            keras.mixed_precision.set_global_policy("float32")
    assert (
        low.compute_dtype
        == {"bf16": "bfloat16", "fp16": "float16", "bf16 weights": "bfloat16"}[
            precision
        ]
    )
    margins = teacher_forced_margins(
        low,
        tokenizer.tokenize(sources).to_tensor(),
        tokenizer.tokenize(targets).to_tensor().numpy(),
    )
    assert margins.min() > 1.0, np.sort(margins)[:5]
    greedy = DecodingOptions(beam_size=1)
    assert ModelTranslator(model, tokenizer, greedy).translate(sources) == targets
    assert ModelTranslator(low, tokenizer, greedy).translate(sources) == targets
    beam = DecodingOptions(beam_size=4)
    full = ModelTranslator(model, tokenizer, beam).translate(sources)
    half = ModelTranslator(low, tokenizer, beam).translate(sources)
    same = np.mean([a == b for a, b in zip(full, half)])
    assert same >= 0.9, (same, [(a, b) for a, b in zip(full, half) if a != b][:5])


def _bf16_speedup_measured(monkeypatch, speedup):
    """Makes "auto" see bf16 matmuls run `speedup` times float32's."""
    monkeypatch.setattr(training_precision, "bf16_matmul_speedup", lambda: speedup)


def test_auto_precision_follows_the_measured_bf16_speedup(monkeypatch):
    for forced in ("fp32", "bf16", "fp16"):
        assert training_precision.resolve_precision(forced) == forced
    for speedup, expected in [(2.0, "bf16"), (1.31, "bf16"), (1.1, "fp32")]:
        _bf16_speedup_measured(monkeypatch, speedup)
        assert training_precision.resolve_precision("auto") == expected
    # The measurement itself: a positive, finite ratio of two real timings
    # (no tighter bound: other processes on the cores skew either one).
    monkeypatch.undo()
    assert 0 < training_precision.bf16_matmul_speedup() < math.inf


# Each direction: a run that "auto" started in one precision, resumed by
# the same command where "auto" would now choose the other (a machine near
# the threshold, or another machine). Code that measured again instead of
# reading training.json would train on in the other precision, or refuse
# the resume as a changed option.
@pytest.mark.parametrize(
    "started, speedup_at_start, speedup_at_resume",
    [("bf16", 2.0, 1.1), ("fp32", 1.1, 2.0)],
)
def test_a_resumed_auto_run_keeps_the_precision_it_started_in(
    monkeypatch, tmp_path, started, speedup_at_start, speedup_at_resume
):
    dtype = {"bf16": "bfloat16", "fp32": "float32"}[started]
    _bf16_speedup_measured(monkeypatch, speedup_at_start)
    first = toy_trainer(tmp_path, 1, mixed_precision="auto")
    assert first.model.compute_dtype == dtype
    assert first.train() == 1
    del first
    assert RunDir(str(tmp_path)).load_training_options()["mixed_precision"] == started

    _bf16_speedup_measured(monkeypatch, speedup_at_resume)
    assert training_precision.resolve_precision("auto") != started
    resumed = toy_trainer(tmp_path, 1, mixed_precision="auto")
    assert resumed.step == 1
    assert resumed.options.mixed_precision == started
    assert resumed.model.compute_dtype == dtype
    assert resumed.train() == 1  # (lets go of the run's lock)
    recorded = json.loads((tmp_path / "training.json").read_text())
    assert recorded["mixed_precision"] == started


@pytest.mark.parametrize(
    "speedups, expected",
    [
        ({"bfloat16": 2.0, "float16": 2.5}, "bf16"),  # Ampere and later
        ({"bfloat16": 0.0, "float16": 3.0}, "fp16"),  # no bf16 (Volta, T4)
        ({"bfloat16": 0.9, "float16": 1.1}, "fp32"),  # no fast 16-bit math
    ],
)
def test_auto_precision_measures_on_the_gpu(monkeypatch, speedups, expected):
    """No GPU here: the device list and the measurement are faked, and the
    test checks the rule and that the GPU, not the CPU, is measured."""
    real_devices = tf.config.list_physical_devices
    monkeypatch.setattr(
        tf.config,
        "list_physical_devices",
        lambda kind=None: (
            [tf.config.PhysicalDevice("/physical_device:GPU:0", "GPU")]
            if kind == "GPU"
            else real_devices(kind)
        ),
    )
    measured = []

    def fake_speedup(dtype, device):
        measured.append(device)
        return speedups[dtype]

    monkeypatch.setattr(training_precision, "matmul_speedup", fake_speedup)
    assert training_precision.resolve_precision("auto") == expected
    assert set(measured) == {"/GPU:0"}
