"""The run directory, MODEL_DIR, and its JSON and vocabulary files.

MODEL_DIR/
  config.json     the TransformerConfig (a resume with another is refused)
  spm.model       the shared SentencePiece vocabulary
  training.json   the TrainingOptions the run was last started with
                  (training/input_state.py: a resume that changes the
                  data order is refused)
  train.lock      pid and host of the trainer running on it, if any
                  (run_lock.py; non-chief workers wait while it is held)
  ckpt-N.*        the last --keep_checkpoints checkpoints
  checkpoint      their list (checkpoints.py)
  corrupt/TIME/   checkpoints a resume found unreadable, set aside
  best/           the best checkpoints by dev BLEU, their scores in
                  scores.json (best_checkpoints.py)
  average/        t2t-train --average_last's average, itself a run dir,
                  with averaged.json (averaging.py)
  train/ dev/     TensorBoard events
  eval/ eval_bf16/  t2t-eval's translations, scores and events
  .worker_K/      a non-chief worker's throw-away checkpoint, while saved
  input/worker-K/ a non-chief worker's input-iterator checkpoints
"""

import dataclasses
import json
import os
import re
import time

import tensorflow as tf

from t2t_repro.config import ConfigError, TransformerConfig
from t2t_repro.data.vocabulary import (
    SPM_MODEL_FILENAME,
    load_sentencepiece,
    vocab_size_of,
)
from t2t_repro.files import read_json_object, write_atomically
from t2t_repro.run_lock import LOCK_FILENAME, LockWatcher

CONFIG_FILENAME = "config.json"
TRAINING_OPTIONS_FILENAME = "training.json"
# tf.train.CheckpointManager's: ckpt-N.* and the list of the kept ones.
CHECKPOINT_NAME = "ckpt"
CHECKPOINT_LIST_FILENAME = "checkpoint"
_CHECKPOINT_FILE = re.compile(
    rf"{CHECKPOINT_NAME}-\d+(?:\.index|\.data-\d{{5}}-of-\d{{5}})"
)
CORRUPT_DIRNAME = "corrupt"
# t2t-train --average_last's average, and in an average's directory what
# it averages (which also says that an average wrote it).
AVERAGE_DIRNAME = "average"
AVERAGED_FILENAME = "averaged.json"
BEST_DIRNAME = "best"
SCORES_FILENAME = "scores.json"
TRAIN_EVENTS_DIRNAME = "train"
DEV_EVENTS_DIRNAME = "dev"
# Where t2t-eval writes a model directory's scores: MODEL_DIR/eval, or
# eval_bf16 for a bf16 evaluation (any run's, an average's too).
EVAL_DIRNAME = "eval"
WORKER_CHECKPOINTS_PREFIX = ".worker_"
WORKER_INPUT_DIRNAME = "input"
WORKER_INPUT_PREFIX = "worker-"

_RUN_FILES = {
    CONFIG_FILENAME,
    SPM_MODEL_FILENAME,
    TRAINING_OPTIONS_FILENAME,
    LOCK_FILENAME,
    CHECKPOINT_LIST_FILENAME,
    AVERAGED_FILENAME,  # when the run directory is an average
    SCORES_FILENAME,  # when it is a run's best/
}
_RUN_SUBDIRS = {
    CORRUPT_DIRNAME,
    BEST_DIRNAME,
    AVERAGE_DIRNAME,
    TRAIN_EVENTS_DIRNAME,
    DEV_EVENTS_DIRNAME,
}


def is_eval_dirname(name):
    """Whether `name` is one of t2t-eval's directories (eval, eval_bf16)."""
    return name == EVAL_DIRNAME or name.startswith(EVAL_DIRNAME + "_")


def is_run_file(relative):
    """Whether `relative`, a path in a run directory relative to it, is
    one of the run's files (the layout above): what a tool must never
    write its output over. Other files in a run directory are the
    user's."""
    first, *rest = os.path.normpath(relative).split(os.sep)
    if not rest:
        return first in _RUN_FILES or bool(_CHECKPOINT_FILE.fullmatch(first))
    return (
        first in _RUN_SUBDIRS
        or is_eval_dirname(first)
        or first.startswith(WORKER_CHECKPOINTS_PREFIX)
        or (first == WORKER_INPUT_DIRNAME and rest[0].startswith(WORKER_INPUT_PREFIX))
    )


def check_vocabulary_fits(config, proto, vocabulary_name, config_name):
    """ConfigError unless the SentencePiece model `proto` has
    `config.vocab_size` pieces: a model of another size would emit ids the
    vocabulary cannot detokenize, or look up ids past its embedding."""
    pieces = vocab_size_of(proto)
    if pieces != config.vocab_size:
        raise ConfigError(
            f"{vocabulary_name}: {pieces} pieces, but {config_name} has "
            f"vocab_size={config.vocab_size}: not this model's vocabulary"
        )


class RunDir:
    """One run directory's config, vocabulary and training options (see
    the module docstring for its other files)."""

    def __init__(self, path):
        self.path = path

    def file(self, name):
        return os.path.join(self.path, name)

    # config.json -------------------------------------------------------

    def save_config(self, config):
        """Writes config.json; refuses to resume with a different model."""
        path = self.file(CONFIG_FILENAME)
        saved = dataclasses.asdict(config)
        if tf.io.gfile.exists(path):
            previous = self.load_config()
            if previous != config:
                changed = {
                    k: (v, saved[k])
                    for k, v in dataclasses.asdict(previous).items()
                    if saved[k] != v
                }
                raise ConfigError(
                    f"{path}: this run was trained with a different model "
                    f"config; changed (old, new): {changed}. Use a new "
                    "--model_dir or the original flags."
                )
            return
        write_atomically(path, json.dumps(saved, indent=2))

    def load_config(self):
        path = self.file(CONFIG_FILENAME)
        if not tf.io.gfile.exists(path):
            raise FileNotFoundError(
                f"{path}: not found; is {self.path} a t2t-train model_dir?"
            )
        values = read_json_object(path)
        unknown = sorted(
            values.keys()
            - {field.name for field in dataclasses.fields(TransformerConfig)}
        )
        if unknown:
            raise ConfigError(
                f"{path}: unknown key{'s' if len(unknown) > 1 else ''} "
                f"{', '.join(map(repr, unknown))} (not a TransformerConfig "
                "field: written by another version of t2t_repro, or edited)"
            )
        try:
            return TransformerConfig(**values)
        except TypeError as error:  # a value of the wrong type
            raise ConfigError(f"{path}: corrupt ({error})") from None
        except ConfigError as error:
            raise ConfigError(f"{path}: {error}") from None

    # spm.model ---------------------------------------------------------

    @property
    def vocab_path(self):
        return self.file(SPM_MODEL_FILENAME)

    def save_vocabulary(self, vocab_proto):
        """Writes the run's SentencePiece model; refuses to swap it for
        another one, which would scramble every token id."""
        if tf.io.gfile.exists(self.vocab_path):
            if self.load_vocabulary() != vocab_proto:
                raise ConfigError(
                    f"{self.vocab_path}: this run has a "
                    "different SentencePiece vocabulary"
                )
            return
        write_atomically(self.vocab_path, vocab_proto)

    def load_vocabulary(self):
        """The serialized SentencePiece model; ConfigError if spm.model is
        not one (truncated, say)."""
        proto = load_sentencepiece(self.vocab_path)
        if not proto:
            # (An empty proto would parse, as a model without pieces.)
            raise ConfigError(f"{self.vocab_path}: corrupt (empty file)")
        try:
            vocab_size_of(proto)
        except RuntimeError:  # sentencepiece's only parse error
            raise ConfigError(
                f"{self.vocab_path}: corrupt (not a SentencePiece model)"
            ) from None
        return proto

    def load_config_and_vocabulary(self):
        """(TransformerConfig, SentencePiece proto) of the run; ConfigError
        if spm.model does not fit config.json (`check_vocabulary_fits`), a
        vocabulary copied from another run."""
        config, proto = self.load_config(), self.load_vocabulary()
        check_vocabulary_fits(
            config, proto, self.vocab_path, self.file(CONFIG_FILENAME)
        )
        return config, proto

    def existing_or_new_vocabulary(
        self, train_vocabulary, is_chief, chief_start_seconds=600, poll_seconds=1
    ):
        """The run's SentencePiece proto: spm.model's. A new run has none:
        the chief returns `train_vocabulary()`'s, for `prepare_run` to
        write before the run's other files, and another worker waits for the
        chief to write it: for as long as the chief holds its train.lock,
        and up to `chief_start_seconds` for a chief that has not taken it
        yet (or ever, on a remote model_dir, which is not locked).
        ConfigError when the lock is gone and no vocabulary came."""
        if not tf.io.gfile.exists(self.vocab_path):
            if is_chief:
                return train_vocabulary()
            self._wait_for_vocabulary(chief_start_seconds, poll_seconds)
        return self.load_vocabulary()

    def _wait_for_vocabulary(self, chief_start_seconds, poll_seconds):
        lock = LockWatcher(self.path)
        deadline = time.monotonic() + chief_start_seconds
        chief_seen = False
        while not tf.io.gfile.exists(self.vocab_path):
            if lock.is_held():
                chief_seen = True
            elif chief_seen or time.monotonic() > deadline:
                # The chief may have written it just before it let go.
                if tf.io.gfile.exists(self.vocab_path):
                    return
                if chief_seen:
                    raise ConfigError(
                        f"{self.vocab_path}: the chief let go of {lock.path} "
                        "without writing the vocabulary; see the chief's "
                        "log"
                    )
                raise ConfigError(
                    f"{self.vocab_path}: not written after "
                    f"{chief_start_seconds:g} s, and no chief holds "
                    f"{lock.path}; is the chief training on this model_dir?"
                )
            time.sleep(poll_seconds)

    # training.json -----------------------------------------------------

    def save_training_options(self, values):
        """Writes training.json: `values`, a JSON object (see
        `training.input_state.record_start`)."""
        write_atomically(
            self.file(TRAINING_OPTIONS_FILENAME), json.dumps(values, indent=2)
        )

    def load_training_options(self):
        """training.json as a dict, or None before the run's first start."""
        path = self.file(TRAINING_OPTIONS_FILENAME)
        if not tf.io.gfile.exists(path):
            return None
        return read_json_object(path)
