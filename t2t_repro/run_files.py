"""The files a training run keeps in its model_dir besides checkpoints."""

import dataclasses
import json
import os

import tensorflow as tf

from t2t_repro.config import TransformerConfig
from t2t_repro.data.vocabulary import SPM_MODEL_FILENAME, load_sentencepiece

CONFIG_FILENAME = "config.json"


def vocab_path(model_dir):
    return os.path.join(model_dir, SPM_MODEL_FILENAME)


def save_run_config(model_dir, config):
    """Writes config.json; refuses to resume a run with a different model."""
    path = os.path.join(model_dir, CONFIG_FILENAME)
    saved = dataclasses.asdict(config)
    if tf.io.gfile.exists(path):
        previous = load_run_config(model_dir)
        if previous != config:
            changed = {k: (v, saved[k])
                       for k, v in dataclasses.asdict(previous).items()
                       if saved[k] != v}
            raise ValueError(
                f"{path}: this run was trained with a different model "
                f"config; changed (old, new): {changed}. Use a new "
                "--model_dir or the original flags.")
        return
    tf.io.gfile.makedirs(model_dir)
    with tf.io.gfile.GFile(path, "w") as handle:
        json.dump(saved, handle, indent=2)


def load_run_config(model_dir):
    path = os.path.join(model_dir, CONFIG_FILENAME)
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(
            f"{path}: not found; is {model_dir} a t2t-train model_dir?")
    with tf.io.gfile.GFile(path) as handle:
        return TransformerConfig(**json.load(handle))


def load_run(model_dir):
    """(config, SentencePiece proto, latest checkpoint path) of a run."""
    config = load_run_config(model_dir)
    proto = load_sentencepiece(vocab_path(model_dir))
    checkpoint = tf.train.latest_checkpoint(model_dir)
    if checkpoint is None:
        raise FileNotFoundError(f"{model_dir}: no checkpoint found")
    return config, proto, checkpoint
