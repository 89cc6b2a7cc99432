"""The training loop: a `Trainer` is handed its model, optimizer,
checkpoint manager, input and evaluator (`prepare_run` builds them for a
run directory) and trains them to `train_steps`: checkpointed, logged,
stoppable by a signal, evaluated on the dev set. Over 300 lines because
the loop's stop, save, evaluation and failure paths share its state (the
step, the stop vote, the checkpoint manager); what a step computes is
`step.py`, what it reads `input_state.py`."""

import contextlib
import dataclasses
import os
import signal
import time
from typing import TYPE_CHECKING

import keras
import tensorflow as tf
from absl import logging
from tensorboard.plugins.hparams import api as hparams_api

from t2t_repro.best_checkpoints import BestCheckpoints
from t2t_repro.checkpoints import checkpoint_step, remove_unfinished_checkpoint
from t2t_repro.config import TrainingOptions
from t2t_repro.files import file_error_cause
from t2t_repro.model import Transformer
from t2t_repro.progress import Progress
from t2t_repro.run_dir import DEV_EVENTS_DIRNAME, TRAIN_EVENTS_DIRNAME
from t2t_repro.training import TrainingError, distribution
from t2t_repro.training.input_state import InputState
from t2t_repro.training.metrics import IntervalMetrics, write_metrics
from t2t_repro.training.schedule import TransformerSchedule
from t2t_repro.training.step import TrainStep

if TYPE_CHECKING:  # (the evaluator imports the scorers and plots)
    from t2t_repro.training.evaluator import DevEvaluator


@dataclasses.dataclass(eq=False)
class Trainer:
    """Trains `model` under a `tf.distribute` strategy (see `TrainStep` for
    what a step computes).

    A step whose loss or gradient norm is not finite applies no update;
    `max_nonfinite` such steps in a row stop training with a
    `TrainingError`, and weights that are not finite are never saved. A
    SIGTERM or SIGINT checkpoints and stops (`interrupted_by`); a second
    one exits at once. With several workers, a signal to any one of them
    stops them all after the same step, each saving its part of that
    step's checkpoint (`stopped_by_peer` on the others).

    Args:
        model: a `Transformer`, built in `strategy`'s scope.
        optimizer: its optimizer, built for its trainable variables in that
            scope.
        schedule: the optimizer's learning-rate schedule (logged).
        manager: the `tf.train.CheckpointManager` of the run's checkpoints,
            whose checkpoint holds the model, the optimizer and the step
            counters `global_step`, `train_seconds` and `tokens_seen`
            (`prepare.training_checkpoint`); on a non-chief worker, one
            that saves where nobody reads, since every worker must take
            part in saving.
        strategy: the `tf.distribute` strategy.
        options: the run's `TrainingOptions`.
        best: the run's `BestCheckpoints`, which records each dev BLEU.
        input_state: this worker's `InputState`, or None for a trainer
            whose caller feeds batches to `compile_step`'s step.
        evaluator: a `DevEvaluator` run every `eval_every` steps, or None.
        lock: what `train` lets go of when it returns or raises (the run
            directory's lock: `prepare.hold_run_lock`).
    """

    model: Transformer
    optimizer: keras.optimizers.Optimizer
    schedule: TransformerSchedule
    manager: tf.train.CheckpointManager
    strategy: tf.distribute.Strategy
    options: TrainingOptions
    best: BestCheckpoints
    input_state: InputState | None = None
    evaluator: "DevEvaluator | None" = None
    lock: contextlib.AbstractContextManager = dataclasses.field(
        default_factory=contextlib.nullcontext
    )

    def __post_init__(self):
        self.is_chief = distribution.is_chief(self.strategy)
        checkpoint = self.manager.checkpoint
        # Steps taken, including fp16 steps the loss scaler skipped (they
        # consumed data but not `optimizer.iterations`); wall-clock seconds
        # spent training and real (non-pad) source + target tokens trained
        # on, over all sessions of the run.
        self.global_step = checkpoint.global_step
        self.train_seconds = checkpoint.train_seconds
        self.tokens_seen = checkpoint.tokens_seen
        context = distribution.input_context(self.strategy)
        # A step reads accum_steps batches for each of this worker's
        # replicas, in that order.
        self.local_replicas = (
            self.strategy.num_replicas_in_sync // context.num_input_pipelines
        )
        self.workers = context.num_input_pipelines
        # The signal that interrupted training, if one did (another
        # worker's SIGTERM, if `stopped_by_peer`).
        self.interrupted_by: int | None = None
        self.stopped_by_peer = False
        self._train_writer = self._writer(TRAIN_EVENTS_DIRNAME)
        self._dev_writer = self._writer(DEV_EVENTS_DIRNAME)

    @property
    def step(self):
        return int(self.global_step.numpy())

    def _writer(self, name):
        if not self.is_chief:
            return tf.summary.create_noop_writer()
        return tf.summary.create_file_writer(os.path.join(self.options.model_dir, name))

    def compile_step(self, element_spec):
        """The compiled training step (`TrainStep.compile`) for batches of
        `element_spec`: called with a tuple of
        `accum_steps * local_replicas` batches, it updates the model once
        and returns the step's totals. `train` calls it on the input's
        batches; benchmarks and tests feed it batches of their own."""
        step = TrainStep(
            self.model,
            self.optimizer,
            self.strategy,
            self.options,
            self.local_replicas,
            self.global_step,
            self.tokens_seen,
        )
        self._stop_vote = step.stop_vote
        return step.compile(element_spec)

    # Loop --------------------------------------------------------------

    def _request_stop(self, signum, frame):
        del frame
        if self.interrupted_by is not None:
            # A second signal: the user will not wait for the checkpoint.
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
        # Recorded before the log call: a second signal arriving during it
        # must find the first.
        self.interrupted_by = signum
        logging.warning(
            "signal %d: checkpointing and stopping (send it again to exit at once)",
            signum,
        )

    def train(self):
        """Trains to `train_steps`; returns the final step. Lets go of
        `lock` (another trainer may take the run over) when it returns or
        raises."""
        with self.lock:
            try:
                return self._train()
            except distribution.LOST_PEER_ERRORS as error:
                if self.workers == 1:
                    raise
                latest = tf.train.latest_checkpoint(self.options.model_dir)
                resume = (
                    f"the latest checkpoint is {latest}: run the same command "
                    "on every worker to resume from it"
                    if latest
                    else "no checkpoint was saved yet"
                )
                raise TrainingError(
                    f"step {self.step}: a collective operation with the other "
                    f"workers failed ({type(error).__name__}); a worker "
                    f"stopped, died or cannot be reached; {resume}"
                ) from None

    def _train(self):
        options = self.options
        if self.step >= options.train_steps:
            logging.info("already at step %d >= train_steps", self.step)
            return self.step
        if self.best.stopped_early_at is not None:
            logging.info(
                "stopped early at step %d (no dev BLEU gain in %d evaluations)",
                self.best.stopped_early_at,
                options.patience,
            )
            return self.step
        input_state = self.input_state
        if input_state is None:
            raise ValueError(
                "this trainer was prepared without train_pairs: feed its "
                "compile_step's step instead"
            )
        # Kept, so that tests can count its traces (one per run).
        self.train_step = train_step = self.compile_step(
            input_state.iterator.element_spec
        )
        self._write_hparams()
        previous = {
            sig: signal.signal(sig, self._request_stop)
            for sig in (signal.SIGTERM, signal.SIGINT)
        }
        interval = IntervalMetrics()
        nonfinite_in_a_row = 0
        self._session_start = time.perf_counter()
        self._session_start_seconds = float(self.train_seconds.numpy())
        # Off a terminal the log lines say how far the run got.
        progress = Progress(
            options.train_steps, "trained", "steps", self.step, interval=None
        )
        try:
            while self.step < options.train_steps:
                if self.interrupted_by is not None:
                    if self.workers == 1:
                        break
                    # The others stop after this step too (see below).
                    self._stop_vote.assign(1.0)
                outputs = train_step(input_state.next_batches())
                stop_votes = float(outputs.pop("stop_votes"))
                interval.add(outputs)
                progress.update()
                step = self.step
                nonfinite_in_a_row = (
                    nonfinite_in_a_row + 1 if outputs["nonfinite"] > 0 else 0
                )
                if nonfinite_in_a_row:
                    logging.warning(
                        "step %d: loss or gradient norm not finite; update skipped",
                        step,
                    )
                if nonfinite_in_a_row >= options.max_nonfinite:
                    self._log_interval(interval)
                    raise TrainingError(
                        f"step {step}: the loss or gradient norm was not "
                        f"finite for {nonfinite_in_a_row} steps in a row "
                        "(their updates were skipped); the last good "
                        f"checkpoint is {self.manager.latest_checkpoint}. "
                        "Check the data or lower --learning_rate_scale, "
                        "then run the same command to resume from it."
                    )
                if step % options.log_every == 0:
                    self._log_interval(interval)
                    interval = IntervalMetrics()
                if step % options.checkpoint_every == 0:
                    self._save()
                if self.evaluator and step % options.eval_every == 0:
                    self.evaluate()
                    if self._patience_exhausted():
                        break
                if stop_votes > 0:
                    if self.interrupted_by is None:
                        # A preemption signals one worker: the others
                        # report the stop the same way.
                        self.interrupted_by = signal.SIGTERM
                        self.stopped_by_peer = True
                        logging.warning(
                            "another worker was signalled: checkpointing "
                            "and stopping at step %d",
                            step,
                        )
                    break
        finally:
            progress.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if len(interval):
            self._log_interval(interval)
        self._save()
        return self.step

    def _patience_exhausted(self):
        waited = self.best.evaluations_since_best()
        if not self.options.patience or waited < self.options.patience:
            return False
        logging.info(
            "early stopping at step %d: no dev BLEU gain in %d evaluations",
            self.step,
            waited,
        )
        self.best.stop_early(self.step)
        return True

    def _update_train_seconds(self):
        if hasattr(self, "_session_start"):
            self.train_seconds.assign(
                self._session_start_seconds + time.perf_counter() - self._session_start
            )

    # Without AutoGraph, which has nothing to convert here and, tracing at
    # the first save, would read this file's source again: a checkout
    # edited or upgraded since the run started gave it another function's
    # lines, and a false "not finite".
    @tf.function(autograph=False)
    def _weights_are_finite(self):
        return tf.reduce_all(
            [
                tf.reduce_all(tf.math.is_finite(w))
                for w in self.model.weights
                if tf.as_dtype(w.dtype).is_floating
            ]
        )

    def _save(self):
        self._update_train_seconds()
        latest = self.manager.latest_checkpoint
        if latest and checkpoint_step(latest) == self.step:
            return
        if not self._weights_are_finite():
            # Never rotate a good checkpoint out for a broken one.
            raise TrainingError(
                f"step {self.step}: the weights are not finite, so they were "
                f"not saved; the last good checkpoint is {latest}"
            )
        try:
            if self.input_state is not None:
                self.input_state.save(self.step)
            path = self.manager.save(checkpoint_number=self.step)
        except (
            OSError,
            tf.errors.ResourceExhaustedError,
            tf.errors.UnknownError,
            tf.errors.DataLossError,
        ) as error:
            # A full disk, or a file-size limit: the unfinished checkpoint
            # is not listed in the manager's state, so removing it loses
            # nothing, and a rerun resumes from the last complete one.
            remove_unfinished_checkpoint(self.manager.directory, self.step)
            raise TrainingError(
                f"{self.manager.directory}: saving step {self.step} failed "
                f"({file_error_cause(error)}); the last complete checkpoint is "
                f"{latest or 'none'}, which a rerun resumes from"
            ) from None
        if self.is_chief:
            logging.info("saved %s", path)
        else:
            # tf.io.gfile, not shutil: on gs:// too. A copy left behind
            # costs disk space only, not the run.
            try:
                tf.io.gfile.rmtree(self.manager.directory)
            except tf.errors.OpError as error:
                logging.warning(
                    "%s: not deleted (%s)", self.manager.directory, error.message
                )

    def _log_interval(self, interval):
        learning_rate = float(self.schedule(self.optimizer.iterations - 1))
        write_metrics(
            interval.summary(learning_rate),
            self.step,
            self.options.train_steps,
            self._train_writer,
        )

    def _write_hparams(self):
        if not self.is_chief:
            return
        values = {
            **dataclasses.asdict(self.model.config),
            **{
                k: v
                for k, v in dataclasses.asdict(self.options).items()
                if k != "model_dir"
            },
        }
        with self._train_writer.as_default(step=self.step):
            hparams_api.hparams(
                {
                    k: v
                    for k, v in values.items()
                    if isinstance(v, (bool, int, float, str))
                }
            )

    # Evaluation --------------------------------------------------------

    def evaluate(self):
        """Runs the evaluator and records its dev BLEU in `self.best`
        (which keeps the best checkpoints)."""
        if self.evaluator is None:
            raise ValueError("this trainer was prepared without an evaluator")
        scores = self.evaluator(self.model, self.step, self._dev_writer)
        self._update_train_seconds()
        self.best.record(
            self.step,
            round(scores["bleu"], 2),
            round(float(self.train_seconds.numpy()) / 60, 2),
        )
        return scores
