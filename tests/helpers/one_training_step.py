"""Runs one Trainer step on a fixed global batch; saves loss and weights.

    python one_training_step.py OUT.npz MODEL_DIR CPU_DEVICES

Run in a fresh process because logical CPU devices must be configured
before TensorFlow starts. Under TF_CONFIG it runs as one worker of a
MultiWorkerMirroredStrategy.
"""

import dataclasses
import sys

import numpy as np
import tensorflow as tf

from helpers.toy_run import SMALL
from helpers.vocab_for_tests import tiny_vocab
from t2t_repro.config import TrainingOptions
from t2t_repro.training import distribution
from t2t_repro.training.losses import smoothed_cross_entropy_stats
from t2t_repro.training.prepare import prepare_run

GLOBAL_BATCH = 8
# Without dropout: every replica layout computes the same step.
CONFIG = dataclasses.replace(SMALL, dropout=0.0, attention_dropout=0.0)


def global_batch():
    """Rows of different real lengths, so replicas see unequal token counts."""
    rng = np.random.default_rng(0)
    source = np.zeros((GLOBAL_BATCH, 12), np.int32)
    target = np.zeros((GLOBAL_BATCH, 10), np.int32)
    for row in range(GLOBAL_BATCH):
        source[row, : 3 + row] = rng.integers(4, 40, 3 + row)
        target[row, : 2 + row] = rng.integers(4, 40, 2 + row)
    target_input = np.concatenate(
        [np.full((GLOBAL_BATCH, 1), 2, np.int32), target[:, :-1]], axis=1
    )
    return (source, target_input), target


def one_step(strategy, model_dir, micro_batches, config=CONFIG, **options):
    """One update of a `config` model from `micro_batches` (each like
    `global_batch()`): a dict of the loss per target token, gradient norm
    and updated weights. `options` override `TrainingOptions` fields."""
    options = TrainingOptions(
        model_dir=model_dir,
        train_steps=1,
        warmup_steps=1,
        learning_rate_scale=0.1,
        accum_steps=len(micro_batches),
        **{"mixed_precision": "fp32", **options},
    )
    trainer = prepare_run(config, options, strategy, tiny_vocab())
    # Each replica takes its rows of every micro-batch; the step reads this
    # worker's replicas' batches micro-batch by micro-batch.
    context = distribution.input_context(strategy)
    replicas = strategy.num_replicas_in_sync
    first = context.input_pipeline_id * trainer.local_replicas
    batches = [
        tf.nest.map_structure(
            lambda rows: tf.constant(np.array_split(rows, replicas)[replica]), batch
        )
        for batch in micro_batches
        for replica in range(first, first + trainer.local_replicas)
    ]
    step = trainer.compile_step(
        tf.nest.map_structure(
            lambda t: tf.TensorSpec([None, None], t.dtype), batches[0]
        )
    )
    outputs = step(tuple(batches))
    return {
        "loss": float(outputs["loss_sum"] / outputs["target_tokens"]),
        "replicas": strategy.num_replicas_in_sync,
        "grad_norm": float(outputs["grad_norm"]),
        # Not the dropout RNG states: Keras names those per process.
        **{
            w.path: w.numpy()
            for w in trainer.model.weights
            if not w.path.endswith("seed_generator_state")
        },
    }


def direct_gradient_norm(trainer, batch, objective):
    """(the global norm of the gradient of `objective(logits, loss_sum,
    count)` for `trainer`'s weights as they are, computed eagerly on
    `batch`, one like `global_batch()`; the batch's real target tokens),
    to check a compiled step against."""
    (source, target_input), target = batch
    with tf.GradientTape() as tape:
        logits = trainer.model((source, target_input), training=True)
        loss_sum, count, _ = smoothed_cross_entropy_stats(
            target, logits, trainer.options.label_smoothing
        )
        value = objective(logits, loss_sum, count)
    # Dense: the norm of an IndexedSlices gradient (the embedding's) would
    # count a token's repeated rows apart.
    gradients = [
        tf.convert_to_tensor(g)
        for g in tape.gradient(value, trainer.model.trainable_variables)
    ]
    return float(tf.linalg.global_norm(gradients)), float(count)


def main(out_path, model_dir, cpu_devices):
    strategy = distribution.make_strategy(cpu_devices)
    np.savez(out_path, **one_step(strategy, model_dir, [global_batch()]))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
