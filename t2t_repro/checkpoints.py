"""The run directory and its checkpoints: everything that reads or writes
MODEL_DIR goes through `RunDir`.

    MODEL_DIR/
      config.json     the TransformerConfig (a resume with another is refused)
      spm.model       the shared SentencePiece vocabulary
      training.json   the TrainingOptions the run was last started with
      train.lock      pid and host of the trainer running on it, if any
      ckpt-N.*        the last --keep_checkpoints checkpoints (+ `checkpoint`)
      best/           the best checkpoints by dev BLEU (best_checkpoints.py)
      average/        t2t-train --average_last's average, itself a run dir
      train/ dev/ eval/  TensorBoard events
      .worker_K/      a non-chief worker's throw-away checkpoints
      input/worker-K/ a non-chief worker's input-iterator checkpoints

A checkpoint holds every model variable under its Keras path (see
`model_checkpoint`) and, in training, the optimizer and step counters.
"""

import atexit
import dataclasses
import json
import os
import shutil
import socket
import time

import numpy as np
import tensorflow as tf
from absl import logging

from t2t_repro.best_checkpoints import BestCheckpoints
from t2t_repro.config import ConfigError, TransformerConfig
from t2t_repro.data.vocabulary import SPM_MODEL_FILENAME, load_sentencepiece
from t2t_repro.files import write_atomically

CONFIG_FILENAME = "config.json"
TRAINING_OPTIONS_FILENAME = "training.json"
LOCK_FILENAME = "train.lock"
CHECKPOINT_NAME = "ckpt"
AVERAGE_DIRNAME = "average"
# Options that decide which batches a step sees (or how it computes them):
# resuming with another value silently changes the run's data order.
DATA_ORDER_OPTIONS = ("batch_tokens", "accum_steps", "seed",
                      "shuffle_buffer", "overlong", "mixed_precision",
                      "replicas")


class RunDir:
    """One run directory (see the module docstring for its files)."""

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
                changed = {k: (v, saved[k])
                           for k, v in dataclasses.asdict(previous).items()
                           if saved[k] != v}
                raise ConfigError(
                    f"{path}: this run was trained with a different model "
                    f"config; changed (old, new): {changed}. Use a new "
                    "--model_dir or the original flags.")
            return
        write_atomically(path, json.dumps(saved, indent=2))

    def load_config(self):
        path = self.file(CONFIG_FILENAME)
        if not tf.io.gfile.exists(path):
            raise FileNotFoundError(
                f"{path}: not found; is {self.path} a t2t-train model_dir?")
        with tf.io.gfile.GFile(path) as handle:
            return TransformerConfig(**json.load(handle))

    # spm.model ---------------------------------------------------------

    @property
    def vocab_path(self):
        return self.file(SPM_MODEL_FILENAME)

    def save_vocabulary(self, vocab_proto):
        """Writes the run's SentencePiece model; refuses to swap it for
        another one, which would scramble every token id."""
        if tf.io.gfile.exists(self.vocab_path):
            if load_sentencepiece(self.vocab_path) != vocab_proto:
                raise ConfigError(f"{self.vocab_path}: this run has a "
                                  "different SentencePiece vocabulary")
            return
        write_atomically(self.vocab_path, vocab_proto)

    def load_vocabulary(self):
        return load_sentencepiece(self.vocab_path)

    def ensure_vocabulary(self, train_vocabulary, is_chief,
                          wait_seconds=600):
        """The run's SentencePiece proto. If there is none yet, the chief
        calls `train_vocabulary(path)` to write it and other workers wait
        for it (up to `wait_seconds`)."""
        if not tf.io.gfile.exists(self.vocab_path):
            if is_chief:
                tf.io.gfile.makedirs(self.path)
                train_vocabulary(self.vocab_path)
            else:
                deadline = time.time() + wait_seconds
                while (not tf.io.gfile.exists(self.vocab_path) and
                       time.time() < deadline):
                    time.sleep(1)
        return self.load_vocabulary()

    # train.lock --------------------------------------------------------

    def lock_for_training(self):
        """Makes this process the run's only trainer, until
        `release_training_lock` or its exit.

        Writes train.lock (pid, host) exclusively. A lock whose process is
        gone (killed on this host) is taken over; a live one, or one from
        another host (whose process cannot be checked from here), is a
        ConfigError naming the holder. Directories on remote filesystems
        (gs://...) are not locked: they have no exclusive create.
        """
        if "://" in self.path:
            logging.warning("%s: remote model_dir, not locked against a "
                            "second trainer", self.path)
            return
        os.makedirs(self.path, exist_ok=True)
        path = self.file(LOCK_FILENAME)
        mine = {"pid": os.getpid(), "host": socket.gethostname()}
        while True:
            try:
                descriptor = os.open(path, os.O_CREAT | os.O_EXCL |
                                     os.O_WRONLY)
            except FileExistsError:
                holder = _read_lock(path)
                if holder == mine:
                    return
                if not _is_stale(path, holder, mine["host"]):
                    raise ConfigError(
                        f"{path}: another trainer (pid {holder.get('pid')} "
                        f"on {holder.get('host')}) is using this model_dir; "
                        "two would overwrite each other's checkpoints. "
                        "Wait for it, or delete the file if it is gone.")
                if holder:
                    logging.warning("%s: taking over the lock of pid %s, "
                                    "which is no longer running", path,
                                    holder["pid"])
                try:
                    # Only one of several racing trainers wins the rename.
                    os.rename(path, f"{path}.stale.{os.getpid()}")
                    os.remove(f"{path}.stale.{os.getpid()}")
                except FileNotFoundError:
                    pass
                continue
            with os.fdopen(descriptor, "w") as handle:
                json.dump(mine, handle)
            atexit.register(self.release_training_lock)
            return

    def release_training_lock(self):
        """Removes train.lock if this process holds it."""
        path = self.file(LOCK_FILENAME)
        if _read_lock(path) == {"pid": os.getpid(),
                                "host": socket.gethostname()}:
            os.remove(path)

    # training.json -----------------------------------------------------

    def save_training_options(self, options, replicas, allow_changes=False):
        """Writes how the run was last started (with the replica count);
        refuses, unless `allow_changes`, a resume that changes one of
        DATA_ORDER_OPTIONS. Returns the changed ones' names."""
        values = {k: v for k, v in dataclasses.asdict(options).items()
                  if k != "model_dir"}
        values["replicas"] = replicas
        previous = self.load_training_options()
        changed = {k: (previous.get(k), values[k])
                   for k in DATA_ORDER_OPTIONS
                   if previous and k in previous and previous[k] != values[k]}
        if not allow_changes:
            if changed:
                raise ConfigError(
                    f"{self.file(TRAINING_OPTIONS_FILENAME)}: resuming with "
                    "other data-order options would not continue the same "
                    f"run; changed (old, new): {changed}. Use the original "
                    "flags, or --allow_option_changes.")
        write_atomically(self.file(TRAINING_OPTIONS_FILENAME),
                         json.dumps(values, indent=2))
        return sorted(changed)

    def load_training_options(self):
        """training.json as a dict, or None before the run's first start."""
        path = self.file(TRAINING_OPTIONS_FILENAME)
        if not tf.io.gfile.exists(path):
            return None
        with tf.io.gfile.GFile(path) as handle:
            return json.load(handle)

    # Checkpoints -------------------------------------------------------

    def checkpoint_manager(self, checkpoint, max_to_keep, worker=None):
        """The manager of the run's checkpoints; for a non-chief worker
        (`worker` = its task id), one that saves where nobody reads, since
        every worker must take part in saving."""
        directory = (self.path if worker is None else
                     self.file(f".worker_{worker}"))
        return tf.train.CheckpointManager(checkpoint, directory, max_to_keep,
                                          checkpoint_name=CHECKPOINT_NAME)

    def input_checkpoint_manager(self, checkpoint, max_to_keep, pipeline):
        """The manager of a non-chief worker's input-iterator checkpoints
        (`pipeline` = its input pipeline id), numbered by step like the
        model's."""
        return tf.train.CheckpointManager(
            checkpoint, self.file(os.path.join("input", f"worker-{pipeline}")),
            max_to_keep, checkpoint_name=CHECKPOINT_NAME)

    def latest_checkpoint(self):
        return tf.train.latest_checkpoint(self.path)

    def newest_checkpoints(self, count):
        """Paths of the `count` newest checkpoints the manager kept."""
        state = tf.train.get_checkpoint_state(self.path)
        paths = list(state.all_model_checkpoint_paths) if state else []
        if len(paths) < count:
            raise ConfigError(f"{self.path}: holds {len(paths)} "
                              f"checkpoint(s), cannot average the last "
                              f"{count}; raise --keep_checkpoints when "
                              "training")
        return paths[-count:]

    def load_model(self, checkpoint=None):
        """(model with the checkpoint's weights, SentencePiece proto,
        checkpoint path); the latest checkpoint unless `checkpoint` names
        one."""
        from t2t_repro.model import Transformer

        config = self.load_config()
        proto = self.load_vocabulary()
        checkpoint = checkpoint or self.latest_checkpoint()
        if checkpoint is None:
            raise FileNotFoundError(f"{self.path}: no checkpoint found")
        if not tf.io.gfile.exists(checkpoint + ".index"):
            raise FileNotFoundError(
                f"{checkpoint}: no such checkpoint ({checkpoint}.index is "
                "missing; name it as path/ckpt-STEP)")
        model = Transformer(config, name="transformer")
        _check_shapes(model, checkpoint, self.file(CONFIG_FILENAME))
        try:
            model_checkpoint(model).restore(
                checkpoint).expect_partial().assert_existing_objects_matched()
        except (ValueError, AssertionError, tf.errors.OpError) as error:
            first_line = str(error).strip().splitlines()[0]
            raise ConfigError(
                f"{checkpoint}: does not fit {self.file(CONFIG_FILENAME)}: "
                f"{first_line}") from None
        return model, proto, checkpoint

    # Averaging ---------------------------------------------------------

    def average(self, output_dir, count, select="last"):
        """Writes the mean of the float weights of the newest `count`
        checkpoints (`select="last"`) or of the best by dev BLEU (`"best"`,
        from `--keep_best`) into `output_dir`, a run dir of its own; other
        variables, such as dropout RNG states, come from the newest (or
        best) one. Returns the new checkpoint's path, named after that
        one's step."""
        from t2t_repro.model import Transformer

        if select == "best":
            # The best last: like the newest for "last", it names the output.
            paths = BestCheckpoints(self.path).best_paths(count)[::-1]
        elif select == "last":
            paths = self.newest_checkpoints(count)
        else:
            raise ConfigError(f"select must be 'last' or 'best', got "
                              f"{select!r}")
        model = Transformer(self.load_config(), name="transformer")
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
        output = RunDir(output_dir)
        tf.io.gfile.makedirs(output_dir)
        for name in (CONFIG_FILENAME, SPM_MODEL_FILENAME):
            shutil.copyfile(self.file(name), output.file(name))
        saved = output.checkpoint_manager(checkpoint, 1).save(
            checkpoint_number=checkpoint_step(paths[-1]))
        logging.info("averaged %s into %s", ", ".join(paths), saved)
        return saved

    def average_of_last(self, count):
        """(average run dir, checkpoint paths) of the last `count`
        checkpoints, written to MODEL_DIR/average unless it is current."""
        paths = self.newest_checkpoints(count)
        output = RunDir(self.file(AVERAGE_DIRNAME))
        existing = output.latest_checkpoint()
        if existing is None or (checkpoint_step(existing) !=
                                checkpoint_step(paths[-1])):
            shutil.rmtree(output.path, ignore_errors=True)
            self.average(output.path, count)
        return output, paths


# A lock file this old that still holds no pid was cut off by a kill
# between its creation and its write.
_UNWRITTEN_LOCK_SECONDS = 10


def _read_lock(path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def _is_stale(path, holder, host):
    """Whether the lock's process is known to be gone (or the lock was
    released meanwhile)."""
    if not holder:
        try:
            return (time.time() - os.path.getmtime(path) >
                    _UNWRITTEN_LOCK_SECONDS)
        except FileNotFoundError:
            return True
    if holder.get("host") != host or not isinstance(holder.get("pid"), int):
        return False
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # alive, another user's
    return False


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


def _check_shapes(model, checkpoint, config_path):
    """Raises ConfigError at the first model variable whose shape in
    `checkpoint` differs (before a restore, which would fail half-way)."""
    saved = tf.train.load_checkpoint(checkpoint).get_variable_to_shape_map()
    for key, variable in _variables_by_key(model).items():
        # tf.train.Checkpoint's escaping of object-graph names.
        escaped = key.replace(".", "..").replace("/", ".S")
        shape = saved.get(f"model/{escaped}/.ATTRIBUTES/VARIABLE_VALUE")
        if shape is not None and list(shape) != list(variable.shape):
            raise ConfigError(
                f"{checkpoint}: does not fit {config_path}: {key} has shape "
                f"{list(shape)} in the checkpoint, {list(variable.shape)} in "
                "the model")


def holds(checkpoint, name):
    """Whether `checkpoint` saved an object under the top-level `name`."""
    return any(key.startswith(f"{name}/") for key in
               tf.train.load_checkpoint(checkpoint).get_variable_to_shape_map())


def checkpoint_step(checkpoint):
    """The step a `.../ckpt-N` checkpoint path was saved at."""
    return int(checkpoint.rsplit("-", 1)[1])
