"""The files a training run keeps in its model_dir besides checkpoints."""

import dataclasses
import json
import os

import tensorflow as tf

from t2t_repro.config import ConfigError, TransformerConfig
from t2t_repro.data.vocabulary import SPM_MODEL_FILENAME, load_sentencepiece
from t2t_repro.files import write_atomically

CONFIG_FILENAME = "config.json"
TRAINING_OPTIONS_FILENAME = "training.json"


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
            raise ConfigError(
                f"{path}: this run was trained with a different model "
                f"config; changed (old, new): {changed}. Use a new "
                "--model_dir or the original flags.")
        return
    write_atomically(path, json.dumps(saved, indent=2))


def save_vocabulary(model_dir, vocab_proto):
    """Writes the run's SentencePiece model; refuses to swap it for
    another one, which would scramble every token id."""
    path = vocab_path(model_dir)
    if tf.io.gfile.exists(path):
        if load_sentencepiece(path) != vocab_proto:
            raise ConfigError(f"{path}: this run has a different "
                             "SentencePiece vocabulary")
        return
    write_atomically(path, vocab_proto)


# Options that decide which batches a step sees (or how it computes them):
# resuming with another value silently changes the run's data order.
DATA_ORDER_OPTIONS = ("batch_tokens", "accum_steps", "seed",
                      "shuffle_buffer", "overlong", "mixed_precision",
                      "replicas")


def save_training_options(model_dir, options, replicas,
                          allow_changes=False):
    """Writes how the run was last started (training.json, with the
    replica count); refuses, unless `allow_changes`, a resume that changes
    one of DATA_ORDER_OPTIONS."""
    values = {k: v for k, v in dataclasses.asdict(options).items()
              if k != "model_dir"}
    values["replicas"] = replicas
    previous = load_training_options(model_dir)
    if previous and not allow_changes:
        changed = {k: (previous.get(k), values[k])
                   for k in DATA_ORDER_OPTIONS
                   if k in previous and previous[k] != values[k]}
        if changed:
            raise ConfigError(
                f"{os.path.join(model_dir, TRAINING_OPTIONS_FILENAME)}: "
                "resuming with other data-order options would not continue "
                f"the same run; changed (old, new): {changed}. Use the "
                "original flags, or --allow_option_changes.")
    write_atomically(os.path.join(model_dir, TRAINING_OPTIONS_FILENAME),
                     json.dumps(values, indent=2))


def load_training_options(model_dir):
    """training.json of a run as a dict, or None before its first start."""
    path = os.path.join(model_dir, TRAINING_OPTIONS_FILENAME)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as handle:
        return json.load(handle)


def load_run_config(model_dir):
    path = os.path.join(model_dir, CONFIG_FILENAME)
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(
            f"{path}: not found; is {model_dir} a t2t-train model_dir?")
    with tf.io.gfile.GFile(path) as handle:
        return TransformerConfig(**json.load(handle))


def load_run(model_dir, checkpoint=None):
    """(config, SentencePiece proto, checkpoint path) of a run; the latest
    checkpoint unless `checkpoint` names one."""
    config = load_run_config(model_dir)
    proto = load_sentencepiece(vocab_path(model_dir))
    checkpoint = checkpoint or tf.train.latest_checkpoint(model_dir)
    if checkpoint is None:
        raise FileNotFoundError(f"{model_dir}: no checkpoint found")
    return config, proto, checkpoint


def model_checkpoint(model, **others):
    """A `tf.train.Checkpoint` of every model variable, keyed by its Keras
    path, dropout RNG states included, plus `others` (e.g. the optimizer).

    Keras 3 keeps sublayers held in Python lists out of TensorFlow's object
    graph, so `tf.train.Checkpoint(model=model)` would save the embedding
    alone; explicit paths also keep checkpoints readable and stable.
    """
    return tf.train.Checkpoint(model=_variables_by_key(model), **others)


def _variables_by_key(model):
    """Keras paths, except for dropout RNG states: Keras names their seed
    generators by a process-wide counter, so they go by their order."""
    keyed, rng_states = {}, 0
    for variable in model.variables:
        if variable.path.endswith("seed_generator_state"):
            keyed[f"dropout_rng/{rng_states}"] = variable.value
            rng_states += 1
        else:
            keyed[variable.path] = variable.value
    return keyed


def checkpoint_step(checkpoint):
    """The step a `.../ckpt-N` checkpoint path was saved at."""
    return int(checkpoint.rsplit("-", 1)[1])


def load_trained_model(model_dir, checkpoint=None):
    """(model with the checkpoint's weights, SentencePiece proto, checkpoint
    path) of a t2t-train (or t2t-average) model_dir."""
    from t2t_repro.model import Transformer

    config, proto, checkpoint = load_run(model_dir, checkpoint)
    model = Transformer(config, name="transformer")
    model_checkpoint(model).restore(
        checkpoint).expect_partial().assert_existing_objects_matched()
    return model, proto, checkpoint
