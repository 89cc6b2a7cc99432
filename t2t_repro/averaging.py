"""Checkpoint averaging (the paper: last 5 for base, 20 for big)."""

import os
import shutil

import numpy as np
import tensorflow as tf
from absl import logging

from t2t_repro.best_checkpoints import BestCheckpoints
from t2t_repro.config import ConfigError
from t2t_repro.model import Transformer
from t2t_repro.run_files import (CONFIG_FILENAME,
                                 checkpoint_step, load_run, model_checkpoint,
                                 vocab_path)


def newest_checkpoints(model_dir, count):
    """Paths of the `count` newest checkpoints the run's manager kept."""
    state = tf.train.get_checkpoint_state(model_dir)
    paths = list(state.all_model_checkpoint_paths) if state else []
    if len(paths) < count:
        raise ConfigError(f"{model_dir}: holds {len(paths)} checkpoint(s), "
                          f"cannot average the last {count}; raise "
                          "--keep_checkpoints when training")
    return paths[-count:]


def average_checkpoints(model_dir, output_dir, num_checkpoints,
                        select="last"):
    """Writes the mean of the float weights of the newest checkpoints
    (`select="last"`) or of those with the highest dev BLEU (`"best"`,
    from `--keep_best`); other variables, such as dropout RNG states, come
    from the newest (or best) one. Returns the new checkpoint's path, named
    after that one's step."""
    if select == "best":
        # The best last: like the newest for "last", it names the output.
        paths = BestCheckpoints(model_dir).best_paths(num_checkpoints)[::-1]
    elif select == "last":
        paths = newest_checkpoints(model_dir, num_checkpoints)
    else:
        raise ConfigError(f"select must be 'last' or 'best', got {select!r}")
    config, _, _ = load_run(model_dir, paths[-1])
    model = Transformer(config, name="transformer")
    checkpoint = model_checkpoint(model)
    sums = [np.zeros(v.shape, np.float64) for v in model.weights]
    for path in paths:
        checkpoint.restore(path).expect_partial() \
            .assert_existing_objects_matched()
        for total, variable in zip(sums, model.weights):
            total += variable.numpy()
    for total, variable in zip(sums, model.weights):
        if "float" in str(variable.dtype):
            variable.assign((total / len(paths)).astype(variable.dtype))
    if tf.io.gfile.exists(output_dir) and tf.io.gfile.listdir(output_dir):
        raise FileExistsError(f"{output_dir}: exists and is not empty")
    tf.io.gfile.makedirs(output_dir)
    for name in (CONFIG_FILENAME, os.path.basename(vocab_path(model_dir))):
        shutil.copyfile(os.path.join(model_dir, name),
                        os.path.join(output_dir, name))
    manager = tf.train.CheckpointManager(checkpoint, output_dir, 1,
                                         checkpoint_name="ckpt")
    saved = manager.save(checkpoint_number=checkpoint_step(paths[-1]))
    logging.info("averaged %s into %s", ", ".join(paths), saved)
    return saved
