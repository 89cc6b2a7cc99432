"""Fine-tuning: a new run that starts from another run's weights.

The new run takes the source run's config.json and spm.model (the same
model and vocabulary: the weights fit them and no other; `prepare_run`
writes them into the new run) and its checkpoint's weights, and trains
with an optimizer and a learning-rate schedule of its own from step 0.
The source run is only read.
"""

import os

import keras
import tensorflow as tf
from absl import logging

from t2t_repro.checkpoints import latest_checkpoint, model_checkpoint
from t2t_repro.config import ConfigError
from t2t_repro.files import sha256_of
from t2t_repro.run_dir import BEST_DIRNAME, CONFIG_FILENAME, RunDir


def source_of(init_from):
    """(RunDir, checkpoint path) of `init_from`: a run directory (its
    latest checkpoint) or a checkpoint, RUN/ckpt-N or RUN/best/ckpt-N."""
    if tf.io.gfile.exists(init_from + ".index"):
        directory = os.path.dirname(init_from)
        # A run's best/ holds no config.json; a run named "best" does.
        if os.path.basename(directory) == BEST_DIRNAME and not tf.io.gfile.exists(
            os.path.join(directory, CONFIG_FILENAME)
        ):
            directory = os.path.dirname(directory)
        return RunDir(directory), init_from
    checkpoint = latest_checkpoint(init_from)
    if checkpoint is None:
        raise FileNotFoundError(
            f"{init_from}: no checkpoint found (give a run directory or RUN/ckpt-STEP)"
        )
    return RunDir(init_from), checkpoint


def checkpoint_identity(checkpoint):
    """What tells `checkpoint` apart from another at any path: the SHA-256
    of its .index, which holds every tensor's checksum."""
    return sha256_of(checkpoint + ".index")


# Where a checkpoint keeps Adam's moments: an fp16 run's optimizer is
# Keras' LossScaleOptimizer, which holds Adam as its inner optimizer.
_MOMENTS_PREFIXES = {
    "optimizer/inner_optimizer/_variables/": "loss-scaled",
    "optimizer/_variables/": "plain",
}


def _optimizer_kind(init_from, checkpoint):
    """The optimizer whose Adam moments `checkpoint` (what `init_from`
    names) holds: "plain", "loss-scaled" (fp16), or None if it holds none."""
    try:
        names = [name for name, _ in tf.train.list_variables(checkpoint)]
    except tf.errors.OpError as error:
        first_line = str(error).strip().splitlines()[0]
        raise ConfigError(f"--init_from={init_from}: {first_line}") from None
    for prefix, kind in _MOMENTS_PREFIXES.items():
        if any(name.startswith(prefix) for name in names):
            return kind
    return None


def check_has_optimizer_slots(init_from, checkpoint):
    """ConfigError unless `checkpoint` (what `init_from` names) holds Adam
    moments: a best/ or averaged checkpoint holds the weights only.
    Returns whose they are (`_optimizer_kind`)."""
    kind = _optimizer_kind(init_from, checkpoint)
    if kind is None:
        raise ConfigError(
            f"--init_from={init_from}: {checkpoint} holds weights only (a best/ "
            "or averaged checkpoint has no Adam moments): drop "
            "--init_optimizer_slots, or name a checkpoint of the run itself, "
            "RUN/ckpt-N"
        )
    return kind


def initialize(trainer, checkpoint, optimizer_slots=False):
    """Gives `trainer`'s model the weights of `checkpoint` and, with
    `optimizer_slots`, its optimizer the checkpoint's Adam moments; the
    step, and so the learning-rate schedule, stay at 0."""
    if optimizer_slots:
        kind = check_has_optimizer_slots(checkpoint, checkpoint)
        loss_scaled = isinstance(trainer.optimizer, keras.optimizers.LossScaleOptimizer)
        this_kind = "loss-scaled" if loss_scaled else "plain"
        if kind != this_kind:
            trained = {"loss-scaled": "in fp16", "plain": "in fp32 or bf16"}
            raise ConfigError(
                f"--init_optimizer_slots: {checkpoint} was trained {trained[kind]} "
                f"and this run trains {trained[this_kind]}: "
                "fp16's loss-scaled optimizer keeps its moments apart; give "
                "the source's --mixed_precision, or drop --init_optimizer_slots"
            )
    try:
        model_checkpoint(trainer.model).restore(
            checkpoint
        ).expect_partial().assert_existing_objects_matched()
        if optimizer_slots:
            tf.train.Checkpoint(optimizer=trainer.optimizer).restore(
                checkpoint
            ).expect_partial().assert_existing_objects_matched()
            trainer.optimizer.iterations.assign(0)
    except (AssertionError, ValueError, tf.errors.OpError) as error:
        first_line = str(error).strip().splitlines()[0]
        raise ConfigError(f"--init_from={checkpoint}: {first_line}") from None
    logging.info(
        "initialized from %s (%s)",
        checkpoint,
        "weights and Adam moments" if optimizer_slots else "weights; a fresh optimizer",
    )
