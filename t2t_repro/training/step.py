"""The compiled training step: accumulated micro-batches on every replica,
one token-normalised update, none when the loss or gradients are not
finite."""

import dataclasses

import keras
import tensorflow as tf
from absl import logging

from t2t_repro import kernels
from t2t_repro.config import TrainingOptions
from t2t_repro.data import pipeline
from t2t_repro.model import Transformer
from t2t_repro.training.losses import (
    consistency_loss_sum,
    smoothed_cross_entropy_stats,
)

_SUM = tf.distribute.ReduceOp.SUM


@dataclasses.dataclass(eq=False)
class TrainStep:
    """Builds the compiled step of a `Trainer` (`Trainer.compile_step`).

    A step reads `accum_steps` micro-batches per replica, sums their
    label-smoothed loss gradients (with `rdrop_weight`, each micro-batch
    twice, plus R-Drop's consistency term), divides by the number of real
    target tokens over all replicas and micro-batches, and applies one update
    with `optimizer` (built for `model` in `strategy`'s scope): the result
    does not depend on the replica count. It adds 1 to `global_step` and
    the real tokens read to `tokens_seen`, whether or not it updates.

    Args:
        options: the run's `TrainingOptions` (`accum_steps`,
            `label_smoothing`, `rdrop_weight`, `mixed_precision`,
            `jit_compile`, `cpu_kernels`).
        local_replicas: this worker's replicas; the step's batches are
            ordered micro-batch by micro-batch, each with one batch per
            local replica.
    """

    model: Transformer
    optimizer: keras.optimizers.Optimizer
    strategy: tf.distribute.Strategy
    options: TrainingOptions
    local_replicas: int
    global_step: tf.Variable
    tokens_seen: tf.Variable

    def __post_init__(self):
        # 1 on a worker that was asked to stop. Read by every replica of
        # every step and summed with the step's totals, so that all
        # workers learn of one worker's signal at the same step. This
        # process's own value: the host sets it without a collective.
        self.stop_vote = tf.Variable(0.0, trainable=False, name="stop_vote")
        config = self.model.config
        if self.options.rdrop_weight and not (
            config.dropout
            or config.attention_dropout
            or config.relu_dropout
            or config.source_word_dropout
            or config.layer_dropout
        ):
            logging.warning(
                "--rdrop_weight=%g without dropout: both passes predict "
                "alike, so the term is 0 and each step computes twice its "
                "tokens for nothing",
                self.options.rdrop_weight,
            )

    def compile(self, element_spec):
        """The step as a `tf.function` of one tuple of
        `accum_steps * local_replicas` batches of `element_spec`; it
        returns the step's totals summed over replicas: `loss_sum`,
        `target_tokens`, `correct`, `real_tokens`, `padded_tokens`,
        `grad_norm`, `nonfinite` (1 if the update was skipped) and
        `stop_votes` (`stop_vote` summed over replicas: above 0 when a
        worker was asked to stop)."""
        micro_batch_gradients = self._micro_batch_gradients
        if self.options.jit_compile:
            micro_batch_gradients = tf.function(
                micro_batch_gradients, jit_compile=True, autograph=False
            )

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
            autograph=False,
            input_signature=[
                tuple([element_spec] * self.options.accum_steps * self.local_replicas)
            ],
        )

    def _micro_batch_gradients(self, source, target_input, target_output):
        variables = self.model.trainable_variables
        # The C++ kernels are CPU kernels, which XLA cannot compile.
        use_kernels = (
            self.options.cpu_kernels == "auto"
            and not self.options.jit_compile
            and all(
                tf.DeviceSpec.from_string(device).device_type == "CPU"
                for device in self.strategy.extended.worker_devices
            )
        )
        rdrop_weight = self.options.rdrop_weight
        if rdrop_weight:
            # Each sentence twice in one batch: two dropout masks.
            source, target_input, target_output = (
                tf.concat([t, t], axis=0) for t in (source, target_input, target_output)
            )
        with tf.GradientTape() as tape, kernels.enabled(use_kernels):
            logits = self.model(
                (source, target_input), training=True, float32_logits=False
            )
            loss_sum, count, correct = smoothed_cross_entropy_stats(
                target_output, logits, self.options.label_smoothing
            )
            objective = loss_sum
            if rdrop_weight:
                labels, _ = tf.split(target_output, 2)
                objective += rdrop_weight * consistency_loss_sum(
                    labels, *tf.split(logits, 2)
                )
            # Identity unless the optimizer is fp16's LossScaleOptimizer.
            scaled = self.optimizer.scale_loss(objective)
        gradients = [tf.convert_to_tensor(g) for g in tape.gradient(scaled, variables)]
        return gradients, loss_sum, count, correct

    def _replica_step(self, batches, micro_batch_gradients):
        context = tf.distribute.get_replica_context()
        # This replica's micro-batches: its own batch of each.
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
        assert gradients is not None, "accum_steps >= 1 micro-batches were read"
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
        totals["stop_votes"] = tf.identity(self.stop_vote)
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
