"""Runs one Trainer step on a fixed global batch; saves loss and weights.

    python one_training_step.py OUT.npz CPU_DEVICES [MODEL_DIR]

Run in a fresh process because logical CPU devices must be configured
before TensorFlow starts. Under TF_CONFIG it runs as one worker of a
MultiWorkerMirroredStrategy. Used by test_training.py.
"""

import sys

import numpy as np
import tensorflow as tf

from t2t_repro import distribution
from t2t_repro.config import TransformerConfig
from t2t_repro.data.vocabulary import vocab_size_of
from t2t_repro.trainer import Trainer, TrainingOptions
from vocab_for_tests import tiny_vocab

GLOBAL_BATCH = 8


def global_batch():
    """Rows of different real lengths, so replicas see unequal token counts."""
    rng = np.random.default_rng(0)
    source = np.zeros((GLOBAL_BATCH, 12), np.int32)
    target = np.zeros((GLOBAL_BATCH, 10), np.int32)
    for row in range(GLOBAL_BATCH):
        source[row, :3 + row] = rng.integers(4, 40, 3 + row)
        target[row, :2 + row] = rng.integers(4, 40, 2 + row)
    target_input = np.concatenate(
        [np.full((GLOBAL_BATCH, 1), 2, np.int32), target[:, :-1]], axis=1)
    return (source, target_input), target


def main(out_path, cpu_devices, model_dir):
    strategy = distribution.make_strategy(cpu_devices)
    config = TransformerConfig(vocab_size=vocab_size_of(tiny_vocab()),
                               d_model=16, num_heads=2, d_ff=32,
                               num_encoder_layers=1, num_decoder_layers=1,
                               dropout=0.0)
    options = TrainingOptions(model_dir=model_dir, train_steps=1,
                              warmup_steps=1, learning_rate_scale=0.1)
    trainer = Trainer(config, options, strategy, tiny_vocab(), None)
    dataset = tf.data.Dataset.from_tensors(global_batch())
    dataset_options = tf.data.Options()
    dataset_options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.DATA)
    dataset = dataset.with_options(dataset_options)
    iterator = iter(strategy.experimental_distribute_dataset(dataset))
    step = trainer._compile_step(iterator.element_spec)
    outputs = step((next(iterator),))
    loss = float(outputs["loss_sum"] / outputs["target_tokens"])
    np.savez(out_path, loss=loss, replicas=strategy.num_replicas_in_sync,
             grad_norm=float(outputs["grad_norm"]),
             **{w.path: w.numpy() for w in trainer.model.weights})


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]),
         sys.argv[3] if len(sys.argv) > 3 else "/tmp/one_training_step")
