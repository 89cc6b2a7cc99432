"""A run's checkpoints: what one holds, which the run keeps, whether one
reads back whole, and a model loaded from one.

A checkpoint holds every model variable under its Keras path (see
`model_checkpoint`) and, in training, the optimizer, the step counters and
the input iterator (training/). Functions take the run directory's path;
its files are listed in run_dir.py.
"""

import itertools
import os
import re
import time

import numpy as np
import tensorflow as tf
from absl import logging

from t2t_repro.config import ConfigError
from t2t_repro.model import Transformer
from t2t_repro.run_dir import (
    CHECKPOINT_LIST_FILENAME,
    CHECKPOINT_NAME,
    CONFIG_FILENAME,
    CORRUPT_DIRNAME,
    RunDir,
)


def checkpoint_manager(checkpoint, directory, max_to_keep):
    """A `tf.train.CheckpointManager` of `checkpoint` in `directory`, whose
    checkpoints are `directory/ckpt-STEP`."""
    return tf.train.CheckpointManager(
        checkpoint, directory, max_to_keep, checkpoint_name=CHECKPOINT_NAME
    )


def listed_checkpoints(model_dir):
    """The run's checkpoints, oldest first, as its checkpoint list names
    them; ConfigError if that list is corrupt (a run that took it for
    missing would start over, and overwrite them)."""
    state = _checkpoint_state(model_dir)
    if state is None:
        return []
    paths = [
        path
        for path in state.all_model_checkpoint_paths
        if not _half_deleted(state, path)
    ]
    if state.model_checkpoint_path not in paths:
        paths.append(state.model_checkpoint_path)
    return paths


def _checkpoint_state(model_dir):
    """The run's `CheckpointState`, None if it has no checkpoint list;
    ConfigError if the list is corrupt."""
    path = os.path.join(model_dir, CHECKPOINT_LIST_FILENAME)
    try:
        state = tf.train.get_checkpoint_state(model_dir)
    except ValueError:  # an empty list; an unparsable one gives None
        state = None
    if state is None and tf.io.gfile.exists(path):
        raise ConfigError(f"{path}: corrupt (not a list of checkpoints)")
    return state


def _half_deleted(state, path):
    """Whether the list's `path` is a checkpoint the run had let go: the
    manager deletes a checkpoint it no longer keeps before it rewrites the
    list, so a process killed in between leaves the list naming an older
    checkpoint whose index is gone."""
    return path != state.model_checkpoint_path and not tf.io.gfile.exists(
        path + ".index"
    )


def _remove_half_deleted_data(model_dir):
    """Removes the data files of `model_dir`'s half-deleted checkpoints.
    TensorFlow's manager would delete them at the run's next save, but a
    run killed in its last save has none."""
    state = _checkpoint_state(model_dir)
    if state is None:
        return
    # Only this run's own checkpoints (an edited or copied list can name
    # paths elsewhere), matched by exact name (a directory name may hold
    # glob characters).
    names = [
        re.escape(os.path.basename(path))
        for path in state.all_model_checkpoint_paths
        if _half_deleted(state, path)
        and os.path.normpath(os.path.dirname(path)) == os.path.normpath(model_dir)
        and re.fullmatch(rf"{CHECKPOINT_NAME}-\d+", os.path.basename(path))
    ]
    if not names:
        return
    data_file = re.compile(rf"(?:{'|'.join(names)})\.data-\d{{5}}-of-\d{{5}}")
    for name in tf.io.gfile.listdir(model_dir):
        if data_file.fullmatch(name):
            leftover = os.path.join(model_dir, name)
            tf.io.gfile.remove(leftover)
            logging.info("%s: removed (its checkpoint was being deleted)", leftover)


def latest_checkpoint(model_dir):
    """The run's newest checkpoint, or None."""
    paths = listed_checkpoints(model_dir)
    return paths[-1] if paths else None


def newest_intact_checkpoint(model_dir):
    """(the newest checkpoint that reads back whole, or None; the newer
    ones that do not, as (path, problem), newest first)."""
    corrupt: list[tuple[str, str]] = []
    for path in reversed(listed_checkpoints(model_dir)):
        problem = checkpoint_problem(path)
        if problem is None:
            return path, corrupt
        corrupt.append((path, problem))
    return None, corrupt


def check_intact(model_dir, checkpoint, objects=None):
    """ConfigError `CHECKPOINT: corrupt checkpoint (...)`, naming the
    run's newest intact checkpoint, unless `checkpoint` (or, with
    `objects`, what a restore of those reads: see `checkpoint_problem`)
    reads back whole."""
    problem = checkpoint_problem(checkpoint, objects)
    if problem is None:
        return
    intact, _ = newest_intact_checkpoint(model_dir)
    newest = (
        f"the newest intact one is {intact} (--checkpoint={intact})"
        if intact
        else f"no checkpoint of {model_dir} is intact"
    )
    rotated = (
        not tf.io.gfile.exists(checkpoint + ".index")
        and os.path.dirname(os.path.abspath(checkpoint)) == os.path.abspath(model_dir)
        and checkpoint not in listed_checkpoints(model_dir)
    )
    if rotated:
        # Not damage: a run training on rotated it out since it was picked.
        raise ConfigError(
            f"{checkpoint}: deleted since it was picked (a training run keeps "
            f"only its --keep_checkpoints newest); {newest}"
        )
    raise ConfigError(f"{checkpoint}: corrupt checkpoint ({problem}); {newest}")


def checkpoint_to_resume(model_dir, is_chief):
    """The newest intact checkpoint, or None in a new run.

    Each newer one, corrupt, is named in a warning; on the chief its files
    move to corrupt/TIME/ and it leaves the checkpoint list, since a save
    of its step would overwrite them and the user may want them. The chief
    also removes the data of checkpoints a kill left half deleted. If none
    is intact, a ConfigError rather than a new run over the old one's
    files.
    """
    if is_chief:
        _remove_half_deleted_data(model_dir)
    intact, corrupt = newest_intact_checkpoint(model_dir)
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
    if is_chief:
        directory = os.path.join(
            model_dir, CORRUPT_DIRNAME, time.strftime("%Y%m%d-%H%M%S")
        )
        _set_aside(model_dir, [path for path, _ in corrupt], directory)
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


def _set_aside(model_dir, checkpoints, directory):
    """Moves the files of `checkpoints` (the newest of the list) to
    `directory` and drops them from the checkpoint list."""
    tf.io.gfile.makedirs(directory)
    for checkpoint in checkpoints:
        for path in tf.io.gfile.glob(checkpoint + ".*"):
            tf.io.gfile.rename(path, os.path.join(directory, os.path.basename(path)))
    state = tf.train.get_checkpoint_state(model_dir)
    kept = [
        (path, timestamp)
        for path, timestamp in itertools.zip_longest(
            state.all_model_checkpoint_paths, state.all_model_checkpoint_timestamps
        )
        if path not in checkpoints
    ]
    # The call tf.train.CheckpointManager makes: paths stay relative, so
    # the run directory can still be moved.
    tf.__internal__.train.update_checkpoint_state(
        model_dir,
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


def load_model(model_dir, checkpoint=None):
    """(model with the checkpoint's weights, SentencePiece proto,
    checkpoint path) of the run in `model_dir`; the latest checkpoint
    unless `checkpoint` names one. A corrupt one is a ConfigError, never a
    silent fall-back to an older one (whose scores would be credited to
    the wrong step)."""
    run_dir = RunDir(model_dir)
    config, proto = run_dir.load_config_and_vocabulary()
    if not checkpoint:
        checkpoint = latest_checkpoint(model_dir)
        if checkpoint is None:
            raise FileNotFoundError(f"{model_dir}: no checkpoint found")
    elif not tf.io.gfile.exists(checkpoint + ".index"):
        raise FileNotFoundError(
            f"{checkpoint}: no such checkpoint ({checkpoint}.index is "
            "missing; name it as path/ckpt-STEP)"
        )
    check_intact(model_dir, checkpoint, objects=("model",))
    model = Transformer(config, name="transformer")
    restore_model(model, checkpoint, run_dir.file(CONFIG_FILENAME))
    return model, proto, checkpoint


def restore_model(model, checkpoint, config_path):
    """Restores `model`'s weights from `checkpoint`; a ConfigError naming
    both if they do not fit the model built from `config_path`."""
    _check_shapes(model, checkpoint, config_path)
    try:
        model_checkpoint(model).restore(
            checkpoint
        ).expect_partial().assert_existing_objects_matched()
    except (ValueError, AssertionError, tf.errors.OpError) as error:
        first_line = str(error).strip().splitlines()[0]
        raise ConfigError(
            f"{checkpoint}: does not fit {config_path}: {first_line}"
        ) from None


def model_checkpoint(model, **others):
    """A `tf.train.Checkpoint` of every model variable, keyed by its Keras
    path, dropout RNG states included, plus `others` (e.g. the optimizer).

    Keras 3 keeps sublayers held in Python lists out of TensorFlow's object
    graph, so `tf.train.Checkpoint(model=model)` would save the embedding
    alone; explicit paths also keep checkpoints readable and stable. The
    paths hold the Keras variables themselves, the objects the optimizer
    tracks too, so a checkpoint stores each weight once (holding their
    `tf.Variable`s stored the weights again under optimizer/).
    """
    return tf.train.Checkpoint(model=_variables_by_key(model), **others)


def _variables_by_key(model):
    """Keras paths, except for dropout RNG states: Keras names their seed
    generators by a process-wide counter, so they go by their order."""
    keyed, rng_states = {}, 0
    for variable in model.variables:
        if variable.path.endswith("seed_generator_state"):
            keyed[f"dropout_rng/{rng_states}"] = variable
            rng_states += 1
        else:
            keyed[variable.path] = variable
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
# Where a checkpoint keeps its object graph, which every restore reads.
_OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
# What TensorFlow wraps an eager op's error message in.
_OP_ERROR_DECORATION = re.compile(r"\{\{function_node [^}]*\}\}\s*|\s*\[Op:\w+\]")


def checkpoint_problem(checkpoint, objects=None):
    """Why `checkpoint` (a path/ckpt-N prefix) does not read back whole, or
    None. Reads every tensor, the input pipeline's state included, with the
    op a restore uses (which checks each tensor's CRC32C): a truncated or
    damaged file is found before a restore would fail half-way. With
    `objects` (top-level names, e.g. ("model",)), only their tensors and
    the object graph: all that a restore of them reads (a model's weights
    are a small part of a checkpoint that also holds Adam's moments and
    the input pipeline's shuffle buffer)."""
    if not tf.io.gfile.exists(checkpoint + ".index"):
        return f"{checkpoint}.index is missing"
    try:
        reader = tf.train.load_checkpoint(checkpoint)
        shapes = reader.get_variable_to_shape_map()
        dtypes = reader.get_variable_to_dtype_map()
        batches: list[list[str]] = [[]]
        elements = 0
        for key in sorted(shapes):
            skipped = objects is not None and key.split("/", 1)[0] not in objects
            if skipped and key != _OBJECT_GRAPH_KEY:
                continue
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
