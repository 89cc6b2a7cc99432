"""The training loop: distributed, accumulating, checkpointed, logged."""

import contextlib
import dataclasses
import os
import shutil
import signal
import time

import keras
import tensorflow as tf
from absl import logging
from tensorboard.plugins.hparams import api as hparams_api

from t2t_repro.best_checkpoints import BestCheckpoints
from t2t_repro.checkpoints import (
    RunDir,
    checkpoint_step,
    holds,
    model_checkpoint,
    remove_unfinished_checkpoint,
)
from t2t_repro.config import ConfigError
from t2t_repro.data import pipeline
from t2t_repro.files import file_error_cause, sha256_of
from t2t_repro.model import Transformer
from t2t_repro.training import TrainingError, distribution
from t2t_repro.training.losses import smoothed_cross_entropy_stats
from t2t_repro.training.metrics import IntervalMetrics, ProgressBar, write_metrics
from t2t_repro.training.precision import POLICIES, resolve_precision
from t2t_repro.training.schedule import TransformerSchedule, paper_adam

_SUM = tf.distribute.ReduceOp.SUM


@contextlib.contextmanager
def _global_dtype_policy(policy):
    """Layers built inside take `policy`; the process default is restored
    after, so models built later (decoders, tools, tests) are unaffected."""
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(policy)
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)


def data_identity(sources):
    """{split: [identity of each of its files or TFDS split]} of `sources`
    ({split: Corpus or None}; None gives None), for training.json to tell
    whether a resumed run reads the data it started on. A file's identity
    is its path, size and SHA-256, which costs a read of it (once a start);
    a TFDS split's, the builder's name, the split and its version."""
    if sources is None:
        return None
    identities = {}
    for split, corpus in sources.items():
        if corpus is None:
            continue
        # The sources in Corpus.pairs's order of precedence.
        paths = [
            path
            for path in (corpus.trees_path, corpus.source_path, corpus.target_path)
            if path
        ]
        if paths:
            identities[split] = [
                {
                    "path": path,
                    "size": tf.io.gfile.stat(path).length,
                    "sha256": sha256_of(path),
                }
                for path in paths
            ]
        else:
            import tensorflow_datasets as tfds

            builder = tfds.builder(corpus.tfds_name, data_dir=corpus.tfds_data_dir)
            identities[split] = [
                {
                    "tfds": corpus.tfds_name,
                    "split": corpus.tfds_split,
                    "version": str(builder.version),
                }
            ]
    return identities


@tf.function
def _advance(iterator, count):
    for _ in tf.range(count):
        iterator.get_next()


class Trainer:
    """Trains a `Transformer` under a `tf.distribute` strategy.

    Each step reads `accum_steps` micro-batches per replica, sums their
    label-smoothed loss gradients, divides by the number of real target
    tokens over all replicas and micro-batches, and applies one Adam update:
    the result does not depend on the replica count. Each worker reads one
    plain tf.data pipeline (tf.distribute's own iterators cannot be saved)
    and hands each of its replicas its own batches. Checkpoints hold the
    model and optimizer and the chief's input iterator (its shuffle buffer
    included); every other worker saves its iterator beside them under
    `input/worker-K/`. So a resume continues each data stream where it
    stopped, at a cost that does not grow with the step. With checkpoints
    that predate this, or after `allow_option_changes`, the deterministic
    pipeline is rebuilt and skips the batches already consumed. Either way
    a resumed run follows the same trajectory as an uninterrupted one.

    A step whose loss or gradient norm is not finite applies no update;
    `max_nonfinite` such steps in a row stop training with a
    `TrainingError`, and weights that are not finite are never saved.

    `data_sources` ({"train": Corpus, "dev": Corpus or None}) are where the
    pairs come from: training.json records their identity (see
    `data_identity`), and a resume on changed data is refused unless
    `allow_option_changes`. A corrupt newest checkpoint is set aside and
    the run resumes from the newest intact one.
    """

    def __init__(
        self,
        model_config,
        options,
        strategy,
        vocab_proto,
        train_pairs,
        evaluator=None,
        data_sources=None,
    ):
        self.config = model_config
        # "auto" becomes the precision this run trains in (and records).
        options = dataclasses.replace(
            options,
            mixed_precision=resolve_precision(
                options.mixed_precision, options.model_dir
            ),
        )
        self.options = options
        self.strategy = strategy
        self.train_pairs = train_pairs
        # A `DevEvaluator` run every `eval_every` steps, or None.
        self.evaluator = evaluator
        self.is_chief = distribution.is_chief(strategy)
        self.run_dir = RunDir(options.model_dir)
        # The signal that interrupted training, if one did.
        self.interrupted_by = None
        data_order_changed = []
        if self.is_chief:
            # Held until `train` returns.
            self.run_dir.lock_for_training()
            try:
                # Before any restore, so a changed config is named, not
                # reported as a variable shape mismatch.
                self.run_dir.save_config(model_config)
                self.run_dir.save_vocabulary(vocab_proto)
                data_order_changed = self.run_dir.save_training_options(
                    options,
                    strategy.num_replicas_in_sync,
                    options.allow_option_changes,
                    data_identity(data_sources),
                )
            except Exception:
                self.run_dir.release_training_lock()
                raise
        keras.utils.set_random_seed(options.seed)
        from t2t_repro.data.vocabulary import make_tokenizer, vocab_size_of

        pieces = vocab_size_of(vocab_proto)
        if model_config.vocab_size != pieces:
            raise ConfigError(
                f"model vocab_size={model_config.vocab_size} but the "
                f"SentencePiece vocabulary has {pieces} pieces: the "
                "decoder would emit ids the vocabulary cannot detokenize"
            )
        self.tokenizer = make_tokenizer(vocab_proto)
        self._training_tokenizer = make_tokenizer(
            vocab_proto, sampling=options.subword_sampling
        )
        with strategy.scope():
            with _global_dtype_policy(POLICIES[options.mixed_precision]):
                self.model = Transformer(model_config, name="transformer")
            self.schedule = TransformerSchedule(
                model_config.d_model,
                options.warmup_steps,
                options.learning_rate_scale,
                options.cooldown_steps,
                options.train_steps,
            )
            self.optimizer = paper_adam(self.schedule, options.weight_decay)
            if options.mixed_precision == "fp16":
                self.optimizer = keras.optimizers.LossScaleOptimizer(self.optimizer)
            # Keras 3 optimizers must be built inside the scope before the
            # first compiled step (see shared/NOTES.md).
            self.optimizer.build(self.model.trainable_variables)
        # Counts steps taken, including fp16 steps the loss scaler skipped
        # (they consumed data but not `optimizer.iterations`).
        self.global_step = tf.Variable(
            0, dtype=tf.int64, trainable=False, name="global_step"
        )
        # Wall-clock seconds spent training and real (non-pad) source +
        # target tokens trained on, over all sessions of the run.
        self.train_seconds = tf.Variable(
            0.0, dtype=tf.float64, trainable=False, name="train_seconds"
        )
        self.tokens_seen = tf.Variable(
            0, dtype=tf.int64, trainable=False, name="tokens_seen"
        )
        self.checkpoint = model_checkpoint(
            self.model,
            optimizer=self.optimizer,
            global_step=self.global_step,
            train_seconds=self.train_seconds,
            tokens_seen=self.tokens_seen,
        )
        self._input_context = distribution.input_context(strategy)
        # Each step reads accum_steps batches for each of this worker's
        # replicas, in that order.
        self.local_replicas = (
            strategy.num_replicas_in_sync // self._input_context.num_input_pipelines
        )
        # This worker's plain tf.data iterator, or None without
        # `train_pairs` (its caller then feeds batches to the compiled step).
        self.input_iterator = None
        # Where the iterator's state is saved: the model checkpoint on the
        # chief, its own checkpoints on another worker.
        input_checkpoint = self.checkpoint
        self._input_manager = None
        if train_pairs is not None:
            self.input_iterator = iter(self._dataset_fn(self._input_context))
            if not self.is_chief:
                input_checkpoint = tf.train.Checkpoint()
                self._input_manager = self.run_dir.input_checkpoint_manager(
                    input_checkpoint,
                    options.keep_checkpoints,
                    self._input_context.input_pipeline_id,
                )
            # A changed pipeline cannot take the old one's state. Only the
            # chief knows whether the order changed; other workers replay
            # whenever changes are allowed (replaying the same pipeline
            # gives the same state, so the workers stay consistent).
            if not (
                data_order_changed
                or (options.allow_option_changes and not self.is_chief)
            ):
                input_checkpoint.input = self.input_iterator
        # Every worker resumes from the chief's checkpoint (the shared
        # model_dir), or workers would resume at different steps with
        # different weights; the chief sets the corrupt ones aside before
        # its manager reads the checkpoint list.
        restored = self.run_dir.checkpoint_to_resume(set_aside=self.is_chief)
        # A non-chief worker's manager saves where nobody reads.
        self.manager = self.run_dir.checkpoint_manager(
            self.checkpoint,
            options.keep_checkpoints,
            worker=None if self.is_chief else strategy.cluster_resolver.task_id,
        )
        # Every worker keeps the dev history (early stopping must agree);
        # only the chief keeps checkpoints. Read before the restore, so that
        # a damaged record is named before anything else can fail.
        self.best = BestCheckpoints(
            self.run_dir.path if self.is_chief else self.manager.directory + "_dev",
            options.keep_best if self.is_chief else 0,
            model_checkpoint(self.model),
        )
        if restored:
            self.checkpoint.restore(restored)
            logging.info("resumed from %s at step %d", restored, self.step)
        if restored and self.input_iterator is not None:
            self._restore_input(restored, input_checkpoint)
        self.best.forget_after(self.step)
        self._train_writer = self._writer("train")
        self._dev_writer = self._writer("dev")

    @property
    def step(self):
        return int(self.global_step.numpy())

    def _writer(self, name):
        if not self.is_chief:
            return tf.summary.create_noop_writer()
        return tf.summary.create_file_writer(self.run_dir.file(name))

    # Input -------------------------------------------------------------

    def _restore_input(self, restored, input_checkpoint):
        """Brings the input iterator to where the run `restored` from
        stopped: from its saved state, or by replaying the pipeline."""
        saved = restored
        if self._input_manager is not None:
            saved = os.path.join(
                self._input_manager.directory, os.path.basename(restored)
            )
            if not tf.io.gfile.exists(saved + ".index"):
                saved = None
        if saved and hasattr(input_checkpoint, "input") and holds(saved, "input"):
            if input_checkpoint is not self.checkpoint:
                input_checkpoint.restore(saved).assert_existing_objects_matched()
            return
        logging.info(
            "%s holds no input state: skipping the %d batches already consumed",
            saved or restored,
            self._consumed(),
        )
        # Read and dropped in a graph loop rather than by Dataset.skip,
        # which would make this pipeline's saved state unreadable by the
        # next resume's (skip-free) one.
        _advance(self.input_iterator, self._consumed())
        input_checkpoint.input = self.input_iterator

    def _consumed(self):
        """Batches this worker's input pipeline has yielded up to this
        step."""
        return self.step * self.options.accum_steps * self.local_replicas

    def _dataset_fn(self, input_context):
        """One input pipeline's batches, from the start of the stream."""
        pairs = self.train_pairs
        if input_context.num_input_pipelines > 1:
            pairs = pairs.shard(
                input_context.num_input_pipelines, input_context.input_pipeline_id
            )
        return pipeline.training_batches(
            pairs,
            self._training_tokenizer,
            batch_tokens=max(
                1, self.options.batch_tokens // input_context.num_replicas_in_sync
            ),
            max_length=self.config.max_length,
            overlong=self.options.overlong,
            shuffle_buffer=self.options.shuffle_buffer,
            seed=self.options.seed,
        )

    # Compiled step -----------------------------------------------------

    def _micro_batch_gradients(self, source, target_input, target_output):
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            logits = self.model(
                (source, target_input), training=True, float32_logits=False
            )
            loss_sum, count, correct = smoothed_cross_entropy_stats(
                target_output, logits, self.options.label_smoothing
            )
            # Identity unless the optimizer is fp16's LossScaleOptimizer.
            scaled = self.optimizer.scale_loss(loss_sum)
        gradients = [tf.convert_to_tensor(g) for g in tape.gradient(scaled, variables)]
        return gradients, loss_sum, count, correct

    def _replica_step(self, batches, micro_batch_gradients):
        context = tf.distribute.get_replica_context()
        # This worker's batches are ordered micro-batch by micro-batch, each
        # with one batch per local replica; this replica takes its own.
        local_replica = (
            tf.get_static_value(context.replica_id_in_sync_group) % self.local_replicas
        )
        micro_batches = batches[local_replica :: self.local_replicas]
        gradients = None
        totals = {
            "loss_sum": 0.0,
            "target_tokens": 0.0,
            "correct": 0.0,
            "real_tokens": 0.0,
            "padded_tokens": 0.0,
        }
        for (source, target_input), target_output in micro_batches:
            grads, loss_sum, count, correct = micro_batch_gradients(
                source, target_input, target_output
            )
            gradients = (
                grads
                if gradients is None
                else [a + b for a, b in zip(gradients, grads)]
            )
            totals["loss_sum"] += loss_sum
            totals["target_tokens"] += count
            totals["correct"] += correct
            real, padded = pipeline.real_and_padded_tokens(source, target_output)
            totals["real_tokens"] += real
            totals["padded_tokens"] += padded
        global_tokens = context.all_reduce(_SUM, totals["target_tokens"])
        replicas = tf.cast(context.num_replicas_in_sync, tf.float32)
        # The optimizer sums gradients over replicas again, and these are
        # summed already (so that the norm below is the global one), hence
        # the division by the replica count too, in the same pass (exactly
        # as dividing twice when the count is a power of two).
        gradients = context.all_reduce(
            _SUM, [g / (tf.maximum(global_tokens, 1.0) * replicas) for g in gradients]
        )
        # Before the update, which may change the fp16 loss scale.
        totals["grad_norm"] = tf.linalg.global_norm(
            gradients
        ) / self.optimizer.scale_loss(1.0)
        # All-reduced values, so every replica takes the same decision.
        finite = tf.math.is_finite(context.all_reduce(_SUM, totals["loss_sum"]))
        if self.options.mixed_precision != "fp16":
            # (fp16's LossScaleOptimizer skips overflowing gradients and
            # lowers its scale by itself.)
            finite &= tf.math.is_finite(totals["grad_norm"])
        self._apply_if(finite, gradients)
        # Summed over replicas by the step: 1 per skipped step.
        totals["nonfinite"] = (1.0 - tf.cast(finite, tf.float32)) / replicas
        return totals

    def _apply_if(self, finite, gradients):
        """Applies `gradients` if `finite` (identical on every replica).

        The update calls merge_call, which a cond in replica context cannot
        contain, so (as in Keras' LossScaleOptimizer) the cond runs in
        cross-replica context.
        """
        variables = self.model.trainable_variables

        def apply(replica_gradients):
            self.optimizer.apply_gradients(zip(replica_gradients, variables))

        def skip():
            pass

        def cross_replica(strategy, finite, gradients):
            finite = strategy.experimental_local_results(finite)[0]
            tf.cond(
                finite,
                lambda: strategy.extended.call_for_each_replica(
                    apply, args=(gradients,)
                ),
                skip,
            )

        tf.distribute.get_replica_context().merge_call(
            cross_replica, args=(finite, gradients)
        )

    def _compile_step(self, element_spec):
        micro_batch_gradients = self._micro_batch_gradients
        if self.options.jit_compile:
            micro_batch_gradients = tf.function(micro_batch_gradients, jit_compile=True)

        def step(batches):
            per_replica = self.strategy.run(
                self._replica_step, args=(batches, micro_batch_gradients)
            )
            self.global_step.assign_add(1)
            totals = {
                name: self.strategy.reduce(_SUM, value, axis=None)
                for name, value in per_replica.items()
            }
            self.tokens_seen.assign_add(tf.cast(totals["real_tokens"], tf.int64))
            return totals

        return tf.function(
            step,
            input_signature=[
                tuple([element_spec] * self.options.accum_steps * self.local_replicas)
            ],
        )

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
        """Trains to `train_steps`; returns the final step. Releases the
        run directory's lock (another trainer may take it over) when it
        returns or raises."""
        if self.is_chief:
            self.run_dir.lock_for_training()
        try:
            return self._train()
        finally:
            self.run_dir.release_training_lock()

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
        iterator = self.input_iterator
        batches_per_step = self.options.accum_steps * self.local_replicas
        # Kept, so that tests can count its traces (one per run).
        self.train_step = train_step = self._compile_step(iterator.element_spec)
        self._write_hparams()
        previous = {
            sig: signal.signal(sig, self._request_stop)
            for sig in (signal.SIGTERM, signal.SIGINT)
        }
        interval = IntervalMetrics()
        nonfinite_in_a_row = 0
        self._session_start = time.perf_counter()
        self._session_start_seconds = float(self.train_seconds.numpy())
        progress = ProgressBar(options.train_steps, self.step)
        try:
            while self.step < options.train_steps and self.interrupted_by is None:
                outputs = train_step(
                    tuple(next(iterator) for _ in range(batches_per_step))
                )
                interval.add(outputs)
                progress.advance()
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

    @tf.function
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
            if self._input_manager is not None:
                # Before the model checkpoint, which a resume starts from.
                self._input_manager.save(checkpoint_number=self.step)
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
            shutil.rmtree(self.manager.directory, ignore_errors=True)

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
            **dataclasses.asdict(self.config),
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
        scores = self.evaluator(self.model, self.step, self._dev_writer)
        self._update_train_seconds()
        self.best.record(
            self.step,
            round(scores["bleu"], 2),
            round(float(self.train_seconds.numpy()) / 60, 2),
        )
        return scores
