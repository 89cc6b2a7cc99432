"""Fine-tuning: a new run that starts from another run's weights.

The new run takes the source run's config.json and spm.model (the same
model and vocabulary: the weights fit them and no other; `prepare_run`
writes them into the new run) and its checkpoint's weights, and trains
with an optimizer and a learning-rate schedule of its own from step 0.
The source run is only read.
"""

import os

import tensorflow as tf
from absl import logging

from t2t_repro.checkpoints import latest_checkpoint, model_checkpoint
from t2t_repro.config import ConfigError
from t2t_repro.files import sha256_of
from t2t_repro.run_dir import BEST_DIRNAME, RunDir


def source_of(init_from):
    """(RunDir, checkpoint path) of `init_from`: a run directory (its
    latest checkpoint) or a checkpoint, RUN/ckpt-N or RUN/best/ckpt-N."""
    if tf.io.gfile.exists(init_from + ".index"):
        directory = os.path.dirname(init_from)
        if os.path.basename(directory) == BEST_DIRNAME:
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


def check_has_optimizer_slots(init_from, checkpoint):
    """ConfigError unless `checkpoint` (what `init_from` names) holds Adam
    moments: a best/ or averaged checkpoint holds the weights only."""
    if not any(
        name.startswith("optimizer/_variables/")
        for name, _ in tf.train.list_variables(checkpoint)
    ):
        raise ConfigError(
            f"--init_from={init_from}: {checkpoint} holds weights only (a best/ "
            "or averaged checkpoint has no Adam moments): drop "
            "--init_optimizer_slots, or name a checkpoint of the run itself, "
            "RUN/ckpt-N"
        )


def initialize(trainer, checkpoint, optimizer_slots=False):
    """Gives `trainer`'s model the weights of `checkpoint` and, with
    `optimizer_slots`, its optimizer the checkpoint's Adam moments; the
    step, and so the learning-rate schedule, stay at 0."""
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
