"""Checkpoint averaging (t2t-average, t2t-train --average_last): the mean
of a run's last or best checkpoints, written as a run directory of its own
that every tool takes."""

import json
import os
import shutil

import numpy as np
import tensorflow as tf
from absl import logging

from t2t_repro.best_checkpoints import BestCheckpoints
from t2t_repro.checkpoints import (
    check_intact,
    checkpoint_manager,
    checkpoint_step,
    latest_checkpoint,
    listed_checkpoints,
    model_checkpoint,
    restore_model,
)
from t2t_repro.config import ConfigError
from t2t_repro.data.vocabulary import SPM_MODEL_FILENAME
from t2t_repro.files import directory_written_whole, read_json_object, write_atomically
from t2t_repro.model import Transformer
from t2t_repro.run_dir import (
    AVERAGE_DIRNAME,
    AVERAGED_FILENAME,
    CHECKPOINT_LIST_FILENAME,
    CHECKPOINT_NAME,
    CONFIG_FILENAME,
    RunDir,
    is_eval_dirname,
)


def newest_checkpoints(model_dir, count):
    """Paths of the `count` newest checkpoints the run kept, oldest
    first."""
    paths = listed_checkpoints(model_dir)
    if len(paths) < count:
        raise ConfigError(
            f"{model_dir}: holds {len(paths)} "
            f"checkpoint(s), cannot average the last "
            f"{count}; raise --keep_checkpoints when "
            "training"
        )
    return paths[-count:]


def selected_checkpoints(model_dir, count, select="last"):
    """Paths of the `count` newest checkpoints (`select="last"`) or of the
    best by dev BLEU (`"best"`, kept by `--keep_best`), ending with the
    newest (or best), which names an average of them."""
    if select == "best":
        return BestCheckpoints(model_dir).best_paths(count)[::-1]
    if select == "last":
        return newest_checkpoints(model_dir, count)
    raise ConfigError(f"select must be 'last' or 'best', got {select!r}")


def average_checkpoints(model_dir, output_dir, count, select="last", replace=False):
    """Writes the mean of the float weights of the `selected_checkpoints`
    of the run in `model_dir` into `output_dir`, a run dir of its own;
    other variables, such as dropout RNG states, come from the newest (or
    best) one. Returns the new checkpoint's path, named after that one's
    step. `output_dir` also gets AVERAGED_FILENAME, saying what was
    averaged. With `replace`, an existing `output_dir` is replaced once
    the new average is complete."""
    # Refused before the checkpoints are read (an empty one is ours).
    if not replace and tf.io.gfile.exists(output_dir):
        if tf.io.gfile.listdir(output_dir):
            raise FileExistsError(f"{output_dir} exists")
    paths = selected_checkpoints(model_dir, count, select)
    run_dir = RunDir(model_dir)
    # Checked here: config.json and spm.model are copied into the average.
    config, _ = run_dir.load_config_and_vocabulary()
    model = Transformer(config, name="transformer")
    checkpoint = model_checkpoint(model)
    sums = [np.zeros(v.shape, np.float64) for v in model.weights]
    for path in paths:
        check_intact(model_dir, path, objects=("model",))
    for path in paths:
        restore_model(model, path, run_dir.file(CONFIG_FILENAME))
        for total, variable in zip(sums, model.weights):
            total += variable.numpy()
    for total, variable in zip(sums, model.weights):
        if "float" in str(variable.dtype):
            variable.assign((total / len(paths)).astype(variable.dtype))
    if tf.io.gfile.exists(output_dir) and not tf.io.gfile.listdir(output_dir):
        tf.io.gfile.rmtree(output_dir)  # an empty one is ours to fill
    # t2t-eval's scores of the average it replaces are kept, named by the
    # step they scored, beside the new average's; unless the new one has
    # that step too (another count of checkpoints ending at the same one):
    # they would pass for the new weights' scores.
    carried = _eval_dirs(output_dir) if replace else []
    replaced = latest_checkpoint(output_dir) if carried else None
    if replaced and checkpoint_step(replaced) == checkpoint_step(paths[-1]):
        logging.warning(
            "%s: not keeping t2t-eval's results of the average it replaces: "
            "they scored other weights under the same step, %d",
            output_dir,
            checkpoint_step(replaced),
        )
        carried = []
    with directory_written_whole(output_dir, replace) as partial:
        for name in carried:
            shutil.copytree(os.path.join(output_dir, name), os.path.join(partial, name))
        for name in (CONFIG_FILENAME, SPM_MODEL_FILENAME):
            shutil.copyfile(run_dir.file(name), os.path.join(partial, name))
        checkpoint_manager(checkpoint, partial, 1).save(
            checkpoint_number=checkpoint_step(paths[-1])
        )
        write_atomically(
            os.path.join(partial, AVERAGED_FILENAME),
            json.dumps(
                {
                    "select": select,
                    "count": count,
                    "checkpoints": [os.path.basename(p) for p in paths],
                },
                indent=1,
            ),
        )
    saved = latest_checkpoint(output_dir)
    logging.info("averaged %s into %s", ", ".join(paths), saved)
    return saved


def average_of_last(model_dir, count):
    """(average directory, checkpoint paths) of the last `count`
    checkpoints of the run in `model_dir`, written to MODEL_DIR/average
    unless it is current."""
    paths = newest_checkpoints(model_dir, count)
    output = os.path.join(model_dir, AVERAGE_DIRNAME)
    exists = tf.io.gfile.exists(output)
    if exists:
        averaged = averaged_checkpoints(output)
        if averaged is None:
            raise ConfigError(
                f"{output} exists and is not an average of the last "
                "checkpoints (no averaged.json saying so, or files "
                "averages do not hold); move it away"
            )
        if averaged["checkpoints"] == [os.path.basename(p) for p in paths]:
            return output, paths
        logging.info(
            "replacing %s, the average of %s",
            output,
            ", ".join(map(str, averaged["checkpoints"])),
        )
    average_checkpoints(model_dir, output, count, replace=exists)
    return output, paths


def _eval_dirs(directory):
    """The directories t2t-eval wrote in `directory` (eval, eval_bf16)."""
    if not tf.io.gfile.isdir(directory):
        return []
    return [
        name.rstrip("/")
        for name in tf.io.gfile.listdir(directory)
        if is_eval_dirname(name.rstrip("/"))
    ]


def averaged_checkpoints(directory):
    """What `directory` averages, if `average_checkpoints(select="last")`
    wrote it and it holds nothing else but t2t-eval's scores of it: its
    AVERAGED_FILENAME's object; None for anything else."""
    names = {name.rstrip("/") for name in tf.io.gfile.listdir(directory)}
    names -= set(_eval_dirs(directory))
    average_files = {
        CONFIG_FILENAME,
        SPM_MODEL_FILENAME,
        CHECKPOINT_LIST_FILENAME,
        AVERAGED_FILENAME,
    }
    if AVERAGED_FILENAME not in names or not all(
        name in average_files or name.startswith(CHECKPOINT_NAME + "-")
        for name in names
    ):
        return None
    averaged = read_json_object(os.path.join(directory, AVERAGED_FILENAME))
    if averaged.get("select") != "last" or not isinstance(
        averaged.get("checkpoints"), list
    ):
        return None
    return averaged
