"""The run directory and its checkpoints: everything that reads or writes
MODEL_DIR goes through `RunDir`.

    MODEL_DIR/
      config.json     the TransformerConfig (a resume with another is refused)
      spm.model       the shared SentencePiece vocabulary
      training.json   the TrainingOptions the run was last started with
      train.lock      pid and host of the trainer running on it, if any
                      (kept fresh: non-chief workers wait while it is)
      ckpt-N.*        the last --keep_checkpoints checkpoints
      checkpoint      their list (tf.train.CheckpointManager's)
      corrupt/TIME/   checkpoints a resume found unreadable, set aside
      best/           the best checkpoints by dev BLEU (best_checkpoints.py)
      average/        t2t-train --average_last's average, itself a run dir,
                      with averaged.json (what it averages)
      train/ dev/ eval/  TensorBoard events
      .worker_K/      a non-chief worker's throw-away checkpoints
      input/worker-K/ a non-chief worker's input-iterator checkpoints

A checkpoint holds every model variable under its Keras path (see
`model_checkpoint`) and, in training, the optimizer and step counters.
"""

import atexit
import dataclasses
import itertools
import json
import os
import re
import shutil
import socket
import threading
import time

import numpy as np
import tensorflow as tf
from absl import logging

from t2t_repro.best_checkpoints import BestCheckpoints
from t2t_repro.config import ConfigError, TransformerConfig
from t2t_repro.data.vocabulary import (
    SPM_MODEL_FILENAME,
    load_sentencepiece,
    vocab_size_of,
)
from t2t_repro.files import directory_written_whole, read_json_object, write_atomically

CONFIG_FILENAME = "config.json"
TRAINING_OPTIONS_FILENAME = "training.json"
LOCK_FILENAME = "train.lock"
CHECKPOINT_NAME = "ckpt"
# tf.train.CheckpointManager's list of the checkpoints it keeps.
CHECKPOINT_LIST_FILENAME = "checkpoint"
AVERAGE_DIRNAME = "average"
# In an average's directory: what it averages, and that average() wrote it.
AVERAGED_FILENAME = "averaged.json"
CORRUPT_DIRNAME = "corrupt"
# Options that decide which batches a step sees (or how it computes them):
# resuming with another value silently changes the run's data order.
DATA_ORDER_OPTIONS = (
    "batch_tokens",
    "accum_steps",
    "seed",
    "shuffle_buffer",
    "overlong",
    "mixed_precision",
    "replicas",
)


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

    def ensure_vocabulary(
        self, train_vocabulary, is_chief, chief_start_seconds=600, poll_seconds=1
    ):
        """The run's SentencePiece proto. If there is none yet, the chief
        calls `train_vocabulary(path)` to write it and other workers wait
        for it: for as long as the chief holds its train.lock, and up to
        `chief_start_seconds` for a chief that has not taken it yet (or
        ever, on a remote model_dir, which is not locked). ConfigError when
        the lock is gone and no vocabulary came."""
        if not tf.io.gfile.exists(self.vocab_path):
            if is_chief:
                tf.io.gfile.makedirs(self.path)
                train_vocabulary(self.vocab_path)
            else:
                self._wait_for_vocabulary(chief_start_seconds, poll_seconds)
        return self.load_vocabulary()

    def _wait_for_vocabulary(self, chief_start_seconds, poll_seconds):
        lock = _LockWatcher(self.file(LOCK_FILENAME))
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

    # train.lock --------------------------------------------------------

    def lock_for_training(self):
        """Makes this process the run's only trainer, until
        `release_training_lock` or its exit.

        Writes train.lock (pid, host) exclusively, and touches it every
        LOCK_REFRESH_SECONDS while it holds it, for workers on other hosts
        to see it alive. A lock whose process is gone (killed on this host)
        is taken over; a live one, or one from another host (whose process
        cannot be checked from here), is a ConfigError naming the holder.
        Directories on remote filesystems (gs://...) are not locked: they
        have no exclusive create.
        """
        if "://" in self.path:
            logging.warning(
                "%s: remote model_dir, not locked against a second trainer", self.path
            )
            return
        os.makedirs(self.path, exist_ok=True)
        path = self.file(LOCK_FILENAME)
        mine = {"pid": os.getpid(), "host": socket.gethostname()}
        while True:
            try:
                descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                holder = _read_lock(path)
                if holder == mine:
                    return
                if not _is_stale(path, holder, mine["host"]):
                    raise ConfigError(
                        f"{path}: another trainer (pid {holder.get('pid')} "
                        f"on {holder.get('host')}) is using this model_dir; "
                        "two would overwrite each other's checkpoints. "
                        "Wait for it, or delete the file if it is gone."
                    ) from None
                if holder:
                    logging.warning(
                        "%s: taking over the lock of pid %s, "
                        "which is no longer running",
                        path,
                        holder["pid"],
                    )
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
            threading.Thread(target=_keep_fresh, args=(path, mine), daemon=True).start()
            return

    def release_training_lock(self):
        """Removes train.lock if this process holds it."""
        path = self.file(LOCK_FILENAME)
        if _read_lock(path) == {"pid": os.getpid(), "host": socket.gethostname()}:
            os.remove(path)

    # training.json -----------------------------------------------------

    def save_training_options(self, options, replicas, allow_changes=False, data=None):
        """Writes how the run was last started: the options, the replica
        count and `data`, the identity of the data it reads ({split:
        [{"path", "size", "sha256"} or {"tfds", "split", "version"}]}; None
        keeps the recorded one). Refuses, unless `allow_changes`, a resume
        that changes one of DATA_ORDER_OPTIONS or the data; allowed, a data
        change is a warning. Returns the names of what changed."""
        path = self.file(TRAINING_OPTIONS_FILENAME)
        values = {
            k: v for k, v in dataclasses.asdict(options).items() if k != "model_dir"
        }
        values["replicas"] = replicas
        previous = self.load_training_options() or {}
        values["data"] = previous.get("data") if data is None else data
        changed = {
            k: (previous[k], values[k])
            for k in DATA_ORDER_OPTIONS
            if k in previous and previous[k] != values[k]
        }
        data_changes = _data_changes(previous.get("data") or {}, values["data"] or {})
        if not allow_changes:
            if changed:
                raise ConfigError(
                    f"{path}: resuming with other data-order options would "
                    "not continue the same run; changed (old, new): "
                    f"{changed}. Use the original flags, or "
                    "--allow_option_changes."
                )
            if data_changes:
                raise ConfigError(
                    "; ".join(
                        f"{name} changed since the run started ({details})"
                        for name, details in data_changes
                    )
                    + ": resuming would misalign the data; pass "
                    "--allow_option_changes to resume anyway"
                )
        for name, details in data_changes:
            logging.warning(
                "%s changed since the run started (%s): resuming "
                "anyway (--allow_option_changes), on data an "
                "uninterrupted run did not see",
                name,
                details,
            )
        write_atomically(path, json.dumps(values, indent=2))
        return sorted(changed) + [name for name, _ in data_changes]

    def load_training_options(self):
        """training.json as a dict, or None before the run's first start."""
        path = self.file(TRAINING_OPTIONS_FILENAME)
        if not tf.io.gfile.exists(path):
            return None
        return read_json_object(path)

    # Checkpoints -------------------------------------------------------

    def checkpoint_manager(self, checkpoint, max_to_keep, worker=None):
        """The manager of the run's checkpoints; for a non-chief worker
        (`worker` = its task id), one that saves where nobody reads, since
        every worker must take part in saving."""
        directory = self.path if worker is None else self.file(f".worker_{worker}")
        return tf.train.CheckpointManager(
            checkpoint, directory, max_to_keep, checkpoint_name=CHECKPOINT_NAME
        )

    def input_checkpoint_manager(self, checkpoint, max_to_keep, pipeline):
        """The manager of a non-chief worker's input-iterator checkpoints
        (`pipeline` = its input pipeline id), numbered by step like the
        model's."""
        return tf.train.CheckpointManager(
            checkpoint,
            self.file(os.path.join("input", f"worker-{pipeline}")),
            max_to_keep,
            checkpoint_name=CHECKPOINT_NAME,
        )

    def checkpoints(self):
        """The run's checkpoints, oldest first, as its checkpoint list names
        them; ConfigError if that list is corrupt (a run that took it for
        missing would start over, and overwrite them)."""
        path = self.file(CHECKPOINT_LIST_FILENAME)
        try:
            state = tf.train.get_checkpoint_state(self.path)
        except ValueError:  # an empty list; an unparsable one gives None
            state = None
        if state is None:
            if tf.io.gfile.exists(path):
                raise ConfigError(f"{path}: corrupt (not a list of checkpoints)")
            return []
        paths = list(state.all_model_checkpoint_paths)
        if state.model_checkpoint_path not in paths:
            paths.append(state.model_checkpoint_path)
        return paths

    def latest_checkpoint(self):
        paths = self.checkpoints()
        return paths[-1] if paths else None

    def newest_intact_checkpoint(self):
        """(the newest checkpoint that reads back whole, or None; the newer
        ones that do not, as (path, problem), newest first)."""
        corrupt: list[tuple[str, str]] = []
        for path in reversed(self.checkpoints()):
            problem = checkpoint_problem(path)
            if problem is None:
                return path, corrupt
            corrupt.append((path, problem))
        return None, corrupt

    def check_intact(self, checkpoint):
        """ConfigError `CHECKPOINT: corrupt checkpoint (...)`, naming the
        run's newest intact checkpoint, unless `checkpoint` reads back
        whole."""
        problem = checkpoint_problem(checkpoint)
        if problem is None:
            return
        intact, _ = self.newest_intact_checkpoint()
        raise ConfigError(
            f"{checkpoint}: corrupt checkpoint ({problem}); "
            + (
                f"the newest intact one is {intact} (--checkpoint={intact})"
                if intact
                else f"no checkpoint of {self.path} is intact"
            )
        )

    def checkpoint_to_resume(self, set_aside):
        """The newest intact checkpoint, or None in a new run.

        Each newer one, corrupt, is named in a warning; with `set_aside`
        (the chief) its files move to corrupt/TIME/ and it leaves the
        checkpoint list, since a save of its step would overwrite them and
        the user may want them. If none is intact, a ConfigError rather
        than a new run over the old one's files.
        """
        intact, corrupt = self.newest_intact_checkpoint()
        if corrupt and intact is None:
            newest, problem = corrupt[0]
            raise ConfigError(
                f"{newest}: corrupt checkpoint ({problem}), and "
                "no older checkpoint is intact: nothing to "
                "resume from"
            )
        if not corrupt:
            return intact
        moved = ""
        if set_aside:
            directory = self.file(
                os.path.join(CORRUPT_DIRNAME, time.strftime("%Y%m%d-%H%M%S"))
            )
            self._set_aside([path for path, _ in corrupt], directory)
            moved = f", moved to {directory}"
        for path, problem in corrupt:
            logging.warning(
                "%s: corrupt checkpoint (%s)%s; resuming from %s",
                path,
                problem,
                moved,
                intact,
            )
        return intact

    def _set_aside(self, checkpoints, directory):
        """Moves the files of `checkpoints` (the newest of the list) to
        `directory` and drops them from the checkpoint list."""
        tf.io.gfile.makedirs(directory)
        for checkpoint in checkpoints:
            for path in tf.io.gfile.glob(checkpoint + ".*"):
                tf.io.gfile.rename(
                    path, os.path.join(directory, os.path.basename(path))
                )
        state = tf.train.get_checkpoint_state(self.path)
        kept = [
            (path, timestamp)
            for path, timestamp in itertools.zip_longest(
                state.all_model_checkpoint_paths, state.all_model_checkpoint_timestamps
            )
            if path not in checkpoints
        ]
        # The call tf.train.CheckpointManager makes: paths stay relative,
        # so the run directory can still be moved.
        tf.__internal__.train.update_checkpoint_state(
            self.path,
            kept[-1][0],
            all_model_checkpoint_paths=[path for path, _ in kept],
            all_model_checkpoint_timestamps=(
                [timestamp for _, timestamp in kept]
                if state.all_model_checkpoint_timestamps
                else None
            ),
            last_preserved_timestamp=state.last_preserved_timestamp,
            save_relative_paths=True,
        )

    def newest_checkpoints(self, count):
        """Paths of the `count` newest checkpoints the manager kept."""
        paths = self.checkpoints()
        if len(paths) < count:
            raise ConfigError(
                f"{self.path}: holds {len(paths)} "
                f"checkpoint(s), cannot average the last "
                f"{count}; raise --keep_checkpoints when "
                "training"
            )
        return paths[-count:]

    def load_model(self, checkpoint=None):
        """(model with the checkpoint's weights, SentencePiece proto,
        checkpoint path); the latest checkpoint unless `checkpoint` names
        one. A corrupt one is a ConfigError, never a silent fall-back to an
        older one (whose scores would be credited to the wrong step)."""
        from t2t_repro.model import Transformer

        config = self.load_config()
        proto = self.load_vocabulary()
        if not checkpoint:
            checkpoint = self.latest_checkpoint()
            if checkpoint is None:
                raise FileNotFoundError(f"{self.path}: no checkpoint found")
        elif not tf.io.gfile.exists(checkpoint + ".index"):
            raise FileNotFoundError(
                f"{checkpoint}: no such checkpoint ({checkpoint}.index is "
                "missing; name it as path/ckpt-STEP)"
            )
        self.check_intact(checkpoint)
        model = Transformer(config, name="transformer")
        _check_shapes(model, checkpoint, self.file(CONFIG_FILENAME))
        try:
            model_checkpoint(model).restore(
                checkpoint
            ).expect_partial().assert_existing_objects_matched()
        except (ValueError, AssertionError, tf.errors.OpError) as error:
            first_line = str(error).strip().splitlines()[0]
            raise ConfigError(
                f"{checkpoint}: does not fit {self.file(CONFIG_FILENAME)}: {first_line}"
            ) from None
        return model, proto, checkpoint

    # Averaging ---------------------------------------------------------

    def average(self, output_dir, count, select="last", replace=False):
        """Writes the mean of the float weights of the newest `count`
        checkpoints (`select="last"`) or of the best by dev BLEU (`"best"`,
        from `--keep_best`) into `output_dir`, a run dir of its own; other
        variables, such as dropout RNG states, come from the newest (or
        best) one. Returns the new checkpoint's path, named after that
        one's step. `output_dir` also gets AVERAGED_FILENAME, saying what
        was averaged. With `replace`, an existing `output_dir` is replaced
        once the new average is complete."""
        from t2t_repro.model import Transformer

        if select == "best":
            # The best last: like the newest for "last", it names the output.
            paths = BestCheckpoints(self.path).best_paths(count)[::-1]
        elif select == "last":
            paths = self.newest_checkpoints(count)
        else:
            raise ConfigError(f"select must be 'last' or 'best', got {select!r}")
        model = Transformer(self.load_config(), name="transformer")
        checkpoint = model_checkpoint(model)
        sums = [np.zeros(v.shape, np.float64) for v in model.weights]
        for path in paths:
            self.check_intact(path)
        for path in paths:
            checkpoint.restore(path).expect_partial().assert_existing_objects_matched()
            for total, variable in zip(sums, model.weights):
                total += variable.numpy()
        for total, variable in zip(sums, model.weights):
            if "float" in str(variable.dtype):
                variable.assign((total / len(paths)).astype(variable.dtype))
        if tf.io.gfile.exists(output_dir) and not tf.io.gfile.listdir(output_dir):
            tf.io.gfile.rmtree(output_dir)  # an empty one is ours to fill
        with directory_written_whole(output_dir, replace) as partial:
            output = RunDir(partial)
            for name in (CONFIG_FILENAME, SPM_MODEL_FILENAME):
                shutil.copyfile(self.file(name), output.file(name))
            output.checkpoint_manager(checkpoint, 1).save(
                checkpoint_number=checkpoint_step(paths[-1])
            )
            write_atomically(
                output.file(AVERAGED_FILENAME),
                json.dumps(
                    {
                        "select": select,
                        "count": count,
                        "checkpoints": [os.path.basename(p) for p in paths],
                    },
                    indent=1,
                ),
            )
        saved = RunDir(output_dir).latest_checkpoint()
        logging.info("averaged %s into %s", ", ".join(paths), saved)
        return saved

    def average_of_last(self, count):
        """(average run dir, checkpoint paths) of the last `count`
        checkpoints, written to MODEL_DIR/average unless it is current."""
        paths = self.newest_checkpoints(count)
        output = RunDir(self.file(AVERAGE_DIRNAME))
        exists = tf.io.gfile.exists(output.path)
        if exists:
            averaged = output.averaged()
            if averaged is None:
                raise ConfigError(
                    f"{output.path} exists and is not an average of the last "
                    "checkpoints (no averaged.json saying so, or files "
                    "averages do not hold); move it away"
                )
            if averaged.get("checkpoints") == [os.path.basename(p) for p in paths]:
                return output, paths
            logging.info(
                "replacing %s, the average of %s",
                output.path,
                ", ".join(averaged.get("checkpoints") or ["unrecorded checkpoints"]),
            )
        self.average(output.path, count, replace=exists)
        return output, paths

    def averaged(self):
        """What this directory averages, if `average(select="last")` wrote
        it and it holds nothing else: its AVERAGED_FILENAME's object ({}
        without one, as averages written before it existed); None for
        anything else."""
        names = {name.rstrip("/") for name in tf.io.gfile.listdir(self.path)}
        average_files = {
            CONFIG_FILENAME,
            SPM_MODEL_FILENAME,
            CHECKPOINT_LIST_FILENAME,
            AVERAGED_FILENAME,
        }
        if not all(
            name in average_files or name.startswith(CHECKPOINT_NAME + "-")
            for name in names
        ):
            return None
        if AVERAGED_FILENAME not in names:
            return {}
        averaged = read_json_object(self.file(AVERAGED_FILENAME))
        return averaged if averaged.get("select") == "last" else None


# A lock file this old that still holds no pid was cut off by a kill
# between its creation and its write.
_UNWRITTEN_LOCK_SECONDS = 10
# A trainer touches its lock this often; a lock from another host (whose
# process cannot be checked from here) left unchanged for
# LOCK_FRESH_SECONDS is taken for a dead trainer's.
LOCK_REFRESH_SECONDS = 10
LOCK_FRESH_SECONDS = 60


def _keep_fresh(path, mine):
    """Touches the lock at `path` for as long as it is `mine`."""
    while True:
        time.sleep(LOCK_REFRESH_SECONDS)
        if _read_lock(path) != mine:
            return
        try:
            os.utime(path)
        except FileNotFoundError:  # released meanwhile
            return


class _LockWatcher:
    """Tells, each time it is asked, whether a train.lock is held: by a
    live process on this host, or on another host by one that keeps it
    fresh. Freshness is timed by this watcher's clock (the lock's
    modification time changed within LOCK_FRESH_SECONDS), so that the
    hosts' clocks need not agree."""

    def __init__(self, path):
        self.path = path
        self._host = socket.gethostname()
        self._mtime: float | None = None
        self._changed_at = 0.0

    def is_held(self):
        holder = _read_lock(self.path)
        try:
            mtime = os.path.getmtime(self.path)
        except FileNotFoundError:
            return False
        if _is_stale(self.path, holder, self._host):
            return False
        if not holder or holder.get("host") == self._host:
            return True  # being written, or a live process here
        now = time.monotonic()
        if mtime != self._mtime:
            self._mtime, self._changed_at = mtime, now
        return now - self._changed_at < LOCK_FRESH_SECONDS


# What zip_longest pairs with a source that one side does not have.
_NO_SOURCE: dict[str, str] = {}


def _data_changes(recorded, current):
    """(name, what changed) of each data source whose identity differs from
    the one `recorded` (see `RunDir.save_training_options`). A split on one
    side only is not compared: a dev set given for the first time, or a
    run recorded before data identities were."""
    changes = []
    for split in sorted(recorded.keys() & current.keys()):
        for before, now in itertools.zip_longest(
            recorded[split], current[split], fillvalue=_NO_SOURCE
        ):
            # A moved file is the same data.
            differing = sorted(
                k
                for k in before.keys() | now.keys()
                if k != "path" and before.get(k) != now.get(k)
            )
            if differing:
                source = now or before
                name = source.get("path") or (
                    f"TFDS {source.get('tfds')} split {source.get('split')}"
                )
                changes.append(
                    (
                        name,
                        ", ".join(
                            f"{k} {_shown(k, before.get(k))} -> {_shown(k, now.get(k))}"
                            for k in differing
                        ),
                    )
                )
    return changes


def _shown(key, value):
    # 12 hex digits tell two files apart; 64 would bury the message.
    return value[:12] if key == "sha256" and value else value


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
            return time.time() - os.path.getmtime(path) > _UNWRITTEN_LOCK_SECONDS
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
                "the model"
            )


# Tensors read at once when checking a checkpoint: about 256 MB of float32,
# so that a big checkpoint is never held in memory whole.
_CHECK_BATCH_ELEMENTS = 1 << 26
# What TensorFlow wraps an eager op's error message in.
_OP_ERROR_DECORATION = re.compile(r"\{\{function_node [^}]*\}\}\s*|\s*\[Op:\w+\]")


def checkpoint_problem(checkpoint):
    """Why `checkpoint` (a path/ckpt-N prefix) does not read back whole, or
    None. Reads every tensor, the input pipeline's state included, with the
    op a restore uses (which checks each tensor's CRC32C): a truncated or
    damaged file is found before a restore would fail half-way."""
    if not tf.io.gfile.exists(checkpoint + ".index"):
        return f"{checkpoint}.index is missing"
    try:
        reader = tf.train.load_checkpoint(checkpoint)
        shapes = reader.get_variable_to_shape_map()
        dtypes = reader.get_variable_to_dtype_map()
        batches: list[list[str]] = [[]]
        elements = 0
        for key in sorted(shapes):
            if elements >= _CHECK_BATCH_ELEMENTS:
                batches.append([])
                elements = 0
            batches[-1].append(key)
            elements += int(np.prod(shapes[key]))
        for batch in batches:
            tf.raw_ops.RestoreV2(
                prefix=checkpoint,
                tensor_names=batch,
                shape_and_slices=[""] * len(batch),
                dtypes=[dtypes[key] for key in batch],
            )
    except tf.errors.OpError as error:
        message = _OP_ERROR_DECORATION.sub("", error.message).strip()
        return message.splitlines()[0]
    return None


def holds(checkpoint, name):
    """Whether `checkpoint` saved an object under the top-level `name`."""
    return any(
        key.startswith(f"{name}/")
        for key in tf.train.load_checkpoint(checkpoint).get_variable_to_shape_map()
    )


def remove_unfinished_checkpoint(directory, step):
    """Removes what a failed save of checkpoint `step` left in `directory`
    (its `ckpt-STEP_temp/` shards, any `ckpt-STEP.*` files): a checkpoint
    the manager never listed."""
    prefix = os.path.join(directory, f"{CHECKPOINT_NAME}-{step}")
    for path in tf.io.gfile.glob(prefix + "_temp") + tf.io.gfile.glob(prefix + ".*"):
        if tf.io.gfile.isdir(path):
            tf.io.gfile.rmtree(path)
        else:
            tf.io.gfile.remove(path)


def checkpoint_step(checkpoint):
    """The step a `.../ckpt-N` checkpoint path was saved at."""
    return int(checkpoint.rsplit("-", 1)[1])
