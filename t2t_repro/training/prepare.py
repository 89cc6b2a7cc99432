"""A training run prepared once, for t2t-train and Python callers alike:
the run directory locked (`hold_run_lock`) and its files written
(`write_run_files`), then the `Trainer`'s parts built, restored from the
newest intact checkpoint, and handed to it with the lock."""

import contextlib
import dataclasses
import hashlib
import os

import keras
import tensorflow as tf
from absl import logging

from t2t_repro.best_checkpoints import BestCheckpoints
from t2t_repro.checkpoints import (
    checkpoint_manager,
    checkpoint_step,
    checkpoint_to_resume,
    model_checkpoint,
)
from t2t_repro.config import PRECISIONS, ConfigError, flag_name
from t2t_repro.data.vocabulary import make_tokenizer
from t2t_repro.model import Transformer, global_policy
from t2t_repro.run_dir import (
    AVERAGED_FILENAME,
    SCORES_FILENAME,
    WORKER_CHECKPOINTS_PREFIX,
    RunDir,
    check_vocabulary_fits,
)
from t2t_repro.run_lock import training_lock
from t2t_repro.training import distribution
from t2t_repro.training.input_state import InputState, data_identity, record_start
from t2t_repro.training.precision import POLICIES, resolve_precision
from t2t_repro.training.schedule import TransformerSchedule, paper_adam
from t2t_repro.training.trainer import Trainer


def hold_run_lock(model_dir, strategy):
    """An `ExitStack` holding `model_dir`'s `training_lock` on the chief
    (other workers hold nothing). The run's only lock: t2t-train takes it
    before it learns the vocabulary, `prepare_run` otherwise; closing the
    stack lets go of it, and `prepare_run` hands it to the `Trainer`,
    which lets go of it when its training ends. First refuses a
    `model_dir` that is not a run (`check_not_a_copy_of_a_run`)."""
    check_not_a_copy_of_a_run(model_dir)
    held = contextlib.ExitStack()
    if distribution.is_chief(strategy):
        held.enter_context(training_lock(model_dir))
    return held


def check_not_a_copy_of_a_run(model_dir):
    """ConfigError if `model_dir` holds checkpoints a tool copied out of a
    run (an average, a run's best/ directory): training there would start
    again at step 0 and rotate them away."""
    for name, what in (
        (AVERAGED_FILENAME, "an average of a run's checkpoints"),
        (SCORES_FILENAME, "a run's best checkpoints"),
    ):
        if tf.io.gfile.exists(os.path.join(model_dir, name)):
            raise ConfigError(
                f"{model_dir}: {what} ({name}), not a training run: training "
                "there would replace them; give the run's own --model_dir, or "
                "a new one with --init_from=ONE/OF/THEM/ckpt-STEP to train on "
                "from it"
            )


def prepare_run(
    model_config,
    options,
    strategy,
    vocab_proto,
    train_pairs=None,
    evaluator=None,
    data_sources=None,
    lock=None,
    task_facts=None,
):
    """A `Trainer` of `model_config` on `options.model_dir`, resumed from
    its newest intact checkpoint if it has one (a corrupt newer one is set
    aside).

    On the chief, writes the run's files (spm.model, then, once every
    task of a multi-worker run agrees, `write_run_files`) under the run's
    lock, which the trainer lets go of when its training ends (or
    this function, if it fails).

    Args:
        vocab_proto: the run's serialized SentencePiece model.
        train_pairs: a tf.data.Dataset of (source, target) strings, or
            None for a trainer whose caller feeds its compiled step.
        evaluator: a `DevEvaluator`, or None.
        data_sources: {"train": Corpus, "dev": Corpus or None}, where the
            pairs come from: training.json records their identity, and a
            resume on changed data is refused unless
            `allow_option_changes`.
        lock: the run's `hold_run_lock`, if the caller took it already;
            else this function takes it.
        task_facts: {name: JSON-able value} that every task of a
            multi-worker run must share beyond the model, options and
            data (e.g. the checkpoint --init_from starts from).
    """
    run_dir = RunDir(options.model_dir)
    is_chief = distribution.is_chief(strategy)
    held = lock if lock is not None else hold_run_lock(run_dir.path, strategy)
    with held:
        # "auto" becomes the precision this run trains in (and records).
        requested_precision = options.mixed_precision
        options = dataclasses.replace(
            options,
            mixed_precision=resolve_precision(
                options.mixed_precision, options.model_dir
            ),
        )
        if is_chief:
            # The other workers of a new run wait for it before they reach
            # the comparison below.
            run_dir.save_vocabulary(vocab_proto)
        # Every worker resumes from the chief's checkpoint (the shared
        # model_dir), or workers would resume at different steps with
        # different weights; the chief sets the corrupt ones aside before
        # its manager reads the checkpoint list.
        restored = checkpoint_to_resume(run_dir.path, is_chief=is_chief)
        data = data_identity(data_sources)
        options = agreed_with_the_other_tasks(
            strategy,
            model_config,
            vocab_proto,
            options,
            requested_precision,
            data,
            checkpoint_step(restored) if restored else 0,
            task_facts,
        )
        data_order_changed = []
        if is_chief:
            data_order_changed = write_run_files(
                run_dir,
                model_config,
                options,
                distribution.input_context(strategy),
                data,
            )
        keras.utils.set_random_seed(options.seed)
        check_vocabulary_fits(
            model_config,
            vocab_proto,
            "the SentencePiece vocabulary",
            "the model config",
        )
        training_tokenizer = make_tokenizer(
            vocab_proto, sampling=options.subword_sampling
        )
        model, optimizer, schedule = model_and_optimizer(
            model_config, options, strategy
        )
        checkpoint = training_checkpoint(model, optimizer)
        input_state = None
        if train_pairs is not None:
            input_state = InputState(
                train_pairs,
                training_tokenizer,
                options,
                model_config.max_length,
                distribution.input_context(strategy),
                checkpoint,
                is_chief,
                # Only the chief knows whether the order changed; other
                # workers replay whenever changes are allowed (replaying the
                # same pipeline gives the same state, so the workers stay
                # consistent).
                restorable=not (
                    data_order_changed
                    or (options.allow_option_changes and not is_chief)
                ),
            )
        manager = checkpoint_manager(
            checkpoint,
            run_dir.path
            if is_chief
            else run_dir.file(
                f"{WORKER_CHECKPOINTS_PREFIX}{strategy.cluster_resolver.task_id}"
            ),
            options.keep_checkpoints,
        )
        # Every task starts from the chief's dev history and records its
        # own evaluations of the same weights, so that early stopping
        # stops all at one step; only the chief writes it and keeps
        # checkpoints. Read before the restore, so that a damaged record
        # is named before anything else can fail.
        best = BestCheckpoints(
            run_dir.path,
            options.keep_best,
            model_checkpoint(model),
            read_only=not is_chief,
        )
        step = 0
        if restored:
            checkpoint.restore(restored)
            step = int(checkpoint.global_step.numpy())
            logging.info("resumed from %s at step %d", restored, step)
            if input_state is not None:
                input_state.restore(restored, step)
        best.forget_after(step)
        return Trainer(
            model=model,
            optimizer=optimizer,
            schedule=schedule,
            manager=manager,
            strategy=strategy,
            options=options,
            best=best,
            input_state=input_state,
            evaluator=evaluator,
            lock=held.pop_all(),
        )


# The precision a task resolved --mixed_precision to, as an index in
# PRECISIONS: gathered, not compared.
_CHOSEN = "the precision chosen"


def agreed_with_the_other_tasks(
    strategy, model_config, vocab_proto, options, requested, data, step, task_facts
):
    """`options`, with the chief's precision where --mixed_precision=auto
    (`requested`) chose on each task; on a multi-worker run, a ConfigError
    on every task if the tasks differ in what they must share. The chief
    alone checks the run's files, and the strategy copies only initial
    weights, so tasks with other flags, data, a fine-tuning start or a
    restored step (a --model_dir not shared) would train apart, or fail
    as they build the model."""
    if distribution.input_context(strategy).num_input_pipelines <= 1:
        return options
    facts = {
        "the vocabulary": hashlib.sha256(vocab_proto).hexdigest(),
        # Identities without the paths, which may differ between machines.
        "the data files": {
            split: [{k: v for k, v in f.items() if k != "path"} for f in files]
            for split, files in (data or {}).items()
        },
        **{
            f"--{flag_name(field)}": getattr(model_config, field.name)
            for field in dataclasses.fields(model_config)
        },
        **{
            f"--{flag_name(field)}": getattr(options, field.name)
            for field in dataclasses.fields(options)
            if field.name not in ("model_dir", "mixed_precision")
        },
        "--mixed_precision": requested,
        **(task_facts or {}),
    }
    numbers = {name: distribution.fingerprint(value) for name, value in facts.items()}
    numbers["the restored step"] = step
    numbers[_CHOSEN] = PRECISIONS.index(options.mixed_precision)
    columns = distribution.gathered_from_tasks(strategy, numbers)
    differing = [
        name
        for name, column in columns.items()
        if name != _CHOSEN and len(set(column)) > 1
    ]
    if differing:
        shown = [
            f"{name}={facts[name]}"
            for name in differing
            if isinstance(facts.get(name), (int, float, str, bool))
        ]
        if "the restored step" in differing:
            steps = ", ".join(map(str, columns["the restored step"]))
            shown.append(f"restored steps {steps}, the chief's first")
        raise ConfigError(
            f"the tasks of this run differ in {', '.join(differing)} (this task "
            f"is {'; '.join([distribution.task_name(strategy), *shown])}): "
            "start every task with the same flags, data files and devices, "
            "and one --model_dir they all share"
        )
    # --mixed_precision=auto measured each task's device: the chief's choice
    # stands for all.
    return dataclasses.replace(options, mixed_precision=PRECISIONS[columns[_CHOSEN][0]])


def write_run_files(run_dir, model_config, options, input_context, data):
    """Writes the run's config.json and training.json (the only writer of
    each), or checks them against the ones a resumed run has (before any
    restore, so that a changed config is named, not reported as a variable
    shape mismatch). Returns the names of the data-order options and data
    that changed (`record_start`)."""
    run_dir.save_config(model_config)
    return record_start(
        run_dir, options, input_context, options.allow_option_changes, data
    )


def model_and_optimizer(model_config, options, strategy):
    """(model, optimizer, learning-rate schedule) of a new run, built in
    `strategy`'s scope, the model in `options.mixed_precision`."""
    with strategy.scope():
        with global_policy(POLICIES[options.mixed_precision]):
            model = Transformer(model_config, name="transformer")
        schedule = TransformerSchedule(
            model_config.d_model,
            options.warmup_steps,
            options.learning_rate_scale,
            options.cooldown_steps,
            options.train_steps,
        )
        optimizer = paper_adam(schedule, options.weight_decay)
        if options.mixed_precision == "fp16":
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        # Keras 3 optimizers must be built inside the scope before the
        # first compiled step.
        optimizer.build(model.trainable_variables)
    return model, optimizer, schedule


def training_checkpoint(model, optimizer):
    """The `tf.train.Checkpoint` a training run saves: the model, the
    optimizer and new step counters (`Trainer`)."""
    return model_checkpoint(
        model,
        optimizer=optimizer,
        global_step=tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step"),
        train_seconds=tf.Variable(
            0.0, dtype=tf.float64, trainable=False, name="train_seconds"
        ),
        tokens_seen=tf.Variable(0, dtype=tf.int64, trainable=False, name="tokens_seen"),
    )
