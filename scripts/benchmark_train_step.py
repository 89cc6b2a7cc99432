"""Measures training-step throughput on synthetic fixed-shape batches.

    python scripts/benchmark_train_step.py --flagfile=flags/multi30k.cfg

Prints ms/step and real tokens/s for the compiled Trainer step on this
machine, without the input pipeline, so model-side changes can be compared.
"""

import os
import tempfile
import time

import numpy as np
import tensorflow as tf
from absl import app, flags

from t2t_repro import config as config_lib, train  # noqa: F401 (flags)

flags.DEFINE_integer("bench_steps", 10, "Timed steps after warm-up.")
flags.DEFINE_integer("bench_length", 24, "Padded source and target length.")
FLAGS = flags.FLAGS


def main(argv):
    del argv
    from t2t_repro import distribution
    from t2t_repro.trainer import Trainer

    from t2t_repro.data import vocabulary

    # Random letter strings: enough distinct merges for any --vocab_size.
    rng = np.random.default_rng(0)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = ["".join(rng.choice(letters, rng.integers(3, 9)))
             for _ in range(20000)]
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "spm.model")
        vocabulary.train_sentencepiece(
            [" ".join(rng.choice(words, 12)) for _ in range(20000)],
            FLAGS.vocab_size, path)
        proto = vocabulary.load_sentencepiece(path)
    strategy = distribution.make_strategy(FLAGS.cpu_devices)
    options = train.training_options()
    trainer = Trainer(
        config_lib.config_from_flags(vocabulary.vocab_size_of(proto)),
        options, strategy, proto, train_pairs=None)
    length = FLAGS.bench_length
    batch = FLAGS.batch_tokens // (2 * length) // strategy.num_replicas_in_sync
    ids = rng.integers(4, FLAGS.vocab_size, size=(batch, length)).astype(
        np.int32)
    element = ((tf.constant(ids), tf.constant(ids)), tf.constant(ids))
    dataset = tf.data.Dataset.from_tensors(element).repeat()
    iterator = iter(strategy.experimental_distribute_dataset(dataset))
    step = trainer._compile_step(iterator.element_spec)
    batches = tuple(next(iterator) for _ in range(options.accum_steps))
    for _ in range(2):
        step(batches)["loss_sum"].numpy()
    start = time.perf_counter()
    for _ in range(FLAGS.bench_steps):
        out = step(batches)
    out["loss_sum"].numpy()
    seconds = (time.perf_counter() - start) / FLAGS.bench_steps
    tokens = 2 * batch * length * strategy.num_replicas_in_sync * \
        options.accum_steps
    print(f"vocab {trainer.config.vocab_size} batch {batch}x{length} "
          f"replicas {strategy.num_replicas_in_sync} "
          f"jit {FLAGS.jit_compile} precision {FLAGS.mixed_precision}: "
          f"{1000 * seconds:.0f} ms/step, {tokens / seconds:.0f} tokens/s")


if __name__ == "__main__":
    app.run(main)
