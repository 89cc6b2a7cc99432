"""Learning-rate schedule and label-smoothed loss against references."""

import numpy as np
import pytest
import tensorflow as tf

from helpers import numpy_reference as ref
from t2t_repro import kernels
from t2t_repro.training.losses import (
    LabelSmoothedCrossEntropy,
    evaluation_stats,
    smoothed_cross_entropy_stats,
)
from t2t_repro.training.schedule import TransformerSchedule, paper_adam


def test_schedule_values_match_formula():
    schedule = TransformerSchedule(d_model=512, warmup_steps=4000)
    for iteration in [0, 1, 99, 3998, 3999, 4000, 10000, 99999]:
        np.testing.assert_allclose(
            float(schedule(iteration)),
            ref.transformer_lr(iteration + 1, 512, 4000),
            rtol=1e-6,
        )


def test_schedule_peaks_at_warmup_and_starts_positive():
    schedule = TransformerSchedule(d_model=512, warmup_steps=4000)
    values = schedule(tf.range(0, 20000)).numpy()
    assert values[0] > 0
    assert int(np.argmax(values)) + 1 == 4000
    np.testing.assert_allclose(values.max(), (512 * 4000) ** -0.5, rtol=1e-6)


def test_schedule_serialises_and_scales():
    schedule = TransformerSchedule(d_model=256, warmup_steps=100, scale=2.0)
    clone = TransformerSchedule.from_config(schedule.get_config())
    assert float(clone(50)) == float(schedule(50))
    np.testing.assert_allclose(
        float(schedule(50)), 2 * ref.transformer_lr(51, 256, 100), rtol=1e-6
    )
    with pytest.raises(ValueError, match="warmup_steps"):
        TransformerSchedule(d_model=512, warmup_steps=0)


def test_cooldown_decays_linearly_to_zero_over_the_last_steps():
    plain = TransformerSchedule(d_model=256, warmup_steps=100)
    cooled = TransformerSchedule(
        d_model=256, warmup_steps=100, cooldown_steps=200, total_steps=1000
    )
    iterations = tf.range(0, 1200)
    ratio = (cooled(iterations) / plain(iterations)).numpy()
    updates = np.arange(1, 1201)  # update n runs at iteration n - 1
    expected = np.clip((1000 - updates + 1) / 200, 0.0, 1.0)
    np.testing.assert_allclose(ratio, expected, rtol=1e-5, atol=1e-7)
    assert ratio[800] == 1.0 and ratio[801] < 1.0  # 200/200 at update 801
    assert float(cooled(999)) > 0 and float(cooled(1000)) == 0.0
    clone = TransformerSchedule.from_config(cooled.get_config())
    assert float(clone(900)) == float(cooled(900))
    with pytest.raises(ValueError, match="cooldown_steps"):
        TransformerSchedule(256, 100, cooldown_steps=2000, total_steps=1000)


@pytest.mark.parametrize("strategy", ["default", "mirrored"])
def test_optimizer_updates_match_adam_reference(strategy):
    rng = np.random.default_rng(0)
    start = rng.normal(size=(2, 8, 16)).astype(np.float32)
    gradients = rng.normal(size=(6, 2, 8, 16)).astype(np.float32)
    schedule = TransformerSchedule(16, warmup_steps=3)
    scope = (
        tf.distribute.MirroredStrategy(["/cpu:0"])
        if strategy == "mirrored"
        else tf.distribute.get_strategy()
    )
    with scope.scope():
        variables = [tf.Variable(w) for w in start]
        optimizer = paper_adam(schedule)

    @tf.function
    def update(step_gradients):
        scope.run(
            lambda: optimizer.apply_gradients(
                zip(tf.unstack(step_gradients), variables)
            )
        )

    for step_gradients in gradients:
        update(step_gradients)
    rates = [float(schedule(i)) for i in range(len(gradients))]
    for index, variable in enumerate(variables):
        expected = ref.adam(start[index], gradients[:, index], rates, 0.9, 0.98, 1e-9)
        # Each update moves a weight by about the rate (~0.1 here).
        np.testing.assert_allclose(variable.numpy(), expected, rtol=0, atol=2e-6)
    assert int(optimizer.iterations.numpy()) == len(gradients)


def test_optimizer_uses_paper_hyperparameters():
    optimizer = paper_adam(TransformerSchedule(512))
    assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (0.9, 0.98, 1e-9)


def test_label_smoothed_loss_matches_reference_and_ignores_padding():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 5, 11)).astype(np.float32)
    labels = rng.integers(1, 11, size=(2, 5))
    labels[0, 3:] = 0
    expected = ref.smoothed_cross_entropy(labels, logits, 0.1)
    loss = LabelSmoothedCrossEntropy(0.1)(tf.constant(labels), logits)
    np.testing.assert_allclose(float(loss), expected, rtol=1e-5)
    # Changing logits at padded positions changes nothing.
    noisy = logits.copy()
    noisy[0, 3:] += 100.0
    np.testing.assert_allclose(
        float(LabelSmoothedCrossEntropy(0.1)(tf.constant(labels), noisy)),
        expected,
        rtol=1e-5,
    )
    _, count, _ = smoothed_cross_entropy_stats(tf.constant(labels), logits, 0.1)
    assert float(count) == 8.0
    # The dev set's unfused one-pass version: both losses, summed.
    smoothed, negative_log_likelihood, count = evaluation_stats(
        tf.constant(labels), noisy, 0.1
    )
    assert float(count) == 8.0
    np.testing.assert_allclose(float(smoothed), 8 * expected, rtol=1e-5)
    np.testing.assert_allclose(
        float(negative_log_likelihood),
        8 * ref.smoothed_cross_entropy(labels, logits, 0.0),
        rtol=1e-5,
    )


def test_unsmoothed_loss_is_plain_cross_entropy():
    logits = np.log(np.array([[[0.1, 0.2, 0.7]]], np.float32))
    loss = LabelSmoothedCrossEntropy(0.0)(tf.constant([[2]]), logits)
    np.testing.assert_allclose(float(loss), -np.log(0.7), rtol=1e-5)


def test_correct_count_skips_padding():
    logits = np.zeros((1, 4, 5), np.float32)
    logits[0, np.arange(4), [0, 2, 3, 3]] = 1.0
    labels = tf.constant([[0, 2, 3, 4]])
    _, _, correct = smoothed_cross_entropy_stats(labels, logits, 0.1)
    assert float(correct) == 2.0


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_cpp_loss_kernel_matches_numpy_with_its_gradient(dtype):
    rng = np.random.default_rng(3)
    logits = (rng.normal(size=(3, 70, 37)) * 4).astype(np.float32)
    logits = tf.cast(tf.cast(logits, dtype), tf.float32).numpy()  # as the kernel sees
    labels = rng.integers(1, 37, size=(3, 70))
    labels[1, 50:] = 0
    logits[1, 50:] += 100.0  # padding: no loss, no gradient
    # Ties: the first maximum is the argmax, as tf.argmax's.
    logits[2, 7, :], labels[2, 7] = 0.0, 3
    logits[2, 7, [3, 9]] = 5.0  # label first: a hit
    logits[2, 8, :], labels[2, 8] = 0.0, 9
    logits[2, 8, [3, 9]] = 5.0  # label second: a miss
    weights = (labels != 0).astype(np.float64)
    with kernels.enabled(True):
        assert kernels.active()
        with tf.GradientTape() as tape:
            inputs = tf.constant(logits, dtype)
            tape.watch(inputs)
            loss_sum, count, correct = smoothed_cross_entropy_stats(
                tf.constant(labels, tf.int32), inputs, 0.1
            )
        gradient = tape.gradient(loss_sum, inputs)
    assert gradient.dtype == dtype
    assert float(count) == weights.sum()
    np.testing.assert_allclose(
        float(loss_sum),
        weights.sum() * ref.smoothed_cross_entropy(labels, logits, 0.1),
        rtol=1e-5,
    )
    hits = (logits.argmax(-1) == labels) * weights
    assert hits[2, 7] == 1 and hits[2, 8] == 0
    assert float(correct) == hits.sum()
    z = logits.astype(np.float64)
    softmax = np.exp(z - z.max(-1, keepdims=True))
    softmax /= softmax.sum(-1, keepdims=True)
    target = np.full(z.shape, 0.1 / 37)
    np.put_along_axis(target, labels[..., None], 0.9 + 0.1 / 37, axis=-1)
    want = (softmax - target) * weights[..., None]
    # bf16 gradients are float32 ones rounded to nearest (2^-8 relative).
    rtol = 2**-8 * 1.01 if dtype == tf.bfloat16 else 1e-5
    np.testing.assert_allclose(
        tf.cast(gradient, tf.float32).numpy(), want, rtol=rtol, atol=1e-6
    )


def test_cpp_loss_kernel_names_a_bad_label_or_shape():
    with kernels.enabled(True):
        with pytest.raises(
            tf.errors.InvalidArgumentError, match="label 5 at row 1 is outside"
        ):
            smoothed_cross_entropy_stats(
                tf.constant([[1, 5]]), tf.zeros([1, 2, 5]), 0.1
            )
        with pytest.raises(
            tf.errors.InvalidArgumentError, match=r"labels of shape \[2,1\] for"
        ):
            smoothed_cross_entropy_stats(
                tf.constant([[1], [2]]), tf.zeros([1, 2, 5]), 0.1
            )
