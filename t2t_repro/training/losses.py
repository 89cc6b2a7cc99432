"""Label-smoothed cross-entropy and accuracy over real target tokens: the
sums the Trainer accumulates, and the same loss as a Keras loss object for
`model.compile`."""

import keras
import tensorflow as tf

from t2t_repro import kernels
from t2t_repro.config import PAD_ID, TrainingOptions


def _log_partition_label_mean(labels, logits):
    """Per position: log sum_k exp(z_k), the label's logit z_label and the
    mean logit, from which both losses below follow without materialising
    log-probabilities: -log p_label = logsumexp(z) - z_label, and with the
    smoothed target -sum_k q_k log p_k = logsumexp(z) - (1 - eps) z_label
    - eps mean(z)."""
    return (
        tf.reduce_logsumexp(logits, axis=-1),
        tf.gather(logits, labels, batch_dims=2),
        tf.reduce_mean(logits, axis=-1),
    )


# XLA fuses these passes over the [batch, length, vocab] logits; unfused,
# loss and argmax can cost more than the vocabulary projection itself. It
# compiles once per batch shape, which training amortises and one
# evaluation does not (see `evaluation_stats`).
@tf.function(jit_compile=True, autograph=False)
def _per_token_loss_and_hit(labels, logits, smoothing):
    # Cast here, not before: a bf16 model's logits (and their gradient)
    # then never exist in float32 outside this fused pass.
    logits = tf.cast(logits, tf.float32)
    log_partition, label_logit, mean_logit = _log_partition_label_mean(labels, logits)
    loss = log_partition - (1.0 - smoothing) * label_logit - smoothing * mean_logit
    hit = tf.equal(tf.argmax(logits, axis=-1, output_type=labels.dtype), labels)
    return loss, hit


def smoothed_cross_entropy_stats(labels, logits, smoothing):
    """Summed label-smoothed cross-entropy, real-token and correct counts.

    The smoothed target puts 1 - smoothing on the label and spreads
    `smoothing` uniformly over the whole vocabulary (Szegedy et al., as in
    the paper, section 5.4). Positions whose label is PAD_ID contribute
    nothing. Sums rather than means so that callers can normalise by the
    number of real tokens over all replicas and accumulation steps.

    Args:
        labels: int `[batch, length]`.
        logits: float `[batch, length, vocab]`, any float dtype (the
            loss is computed in float32).
        smoothing: epsilon_ls (0.1 in the paper).

    Returns:
        (loss_sum, token_count, correct_count), float32 scalars; a token
        is correct when the argmax of its logits is the label. Inside
        `t2t_repro.kernels.enabled(True)` (the training step) one C++
        kernel each way computes the same.
    """
    if kernels.applies_to(logits.dtype):
        loss, hit = kernels.smoothed_cross_entropy(labels, logits, smoothing)
    else:
        loss, hit = _per_token_loss_and_hit(
            labels, logits, tf.cast(smoothing, tf.float32)
        )
    weights = tf.cast(tf.not_equal(labels, PAD_ID), tf.float32)
    return (
        tf.reduce_sum(loss * weights),
        tf.reduce_sum(weights),
        tf.reduce_sum(tf.cast(hit, tf.float32) * weights),
    )


@tf.function(jit_compile=True, autograph=False)
def _symmetric_kl(logits_a, logits_b):
    log_p = tf.nn.log_softmax(tf.cast(logits_a, tf.float32))
    log_q = tf.nn.log_softmax(tf.cast(logits_b, tf.float32))
    # KL(p||q) + KL(q||p) in one pass.
    return tf.reduce_sum((tf.exp(log_p) - tf.exp(log_q)) * (log_p - log_q), axis=-1)


def consistency_loss_sum(labels, logits_a, logits_b):
    """R-Drop's regulariser (Liang et al., 2021, as in its fairseq code):
    the mean of KL(p||q) and KL(q||p) between the two predictions
    `logits_a` and `logits_b` (float `[batch, length, vocab]`, of one batch
    under two dropout masks), summed over the real tokens of `labels`
    (int `[batch, length]`); float32 scalar."""
    weights = tf.cast(tf.not_equal(labels, PAD_ID), tf.float32)
    return 0.5 * tf.reduce_sum(_symmetric_kl(logits_a, logits_b) * weights)


@keras.saving.register_keras_serializable(package="t2t_repro")
class LabelSmoothedCrossEntropy(keras.losses.Loss):
    """The paper's training loss as a Keras loss, for `model.compile`.

    `loss(target_ids, logits)` is the label-smoothed cross-entropy of
    `smoothed_cross_entropy_stats` summed over the batch and divided by the
    number of real (non-PAD) target tokens in it. Under a tf.distribute
    strategy the count is the global batch's, summed over the replicas:
    Keras sums the replicas' gradients, so an update is that of the global
    batch's mean per token whatever the replica count, as in the Trainer.

    Args:
        smoothing: epsilon_ls (the paper: 0.1).

    Example:
    >>> loss = LabelSmoothedCrossEntropy(smoothing=0.0)
    >>> logits = tf.math.log([[[0.1, 0.2, 0.7], [0.5, 0.25, 0.25]]])
    >>> round(float(loss(tf.constant([[2, 0]]), logits)), 4)  # 0 is PAD
    0.3567
    """

    def __init__(
        self,
        smoothing=TrainingOptions.label_smoothing,
        name="label_smoothed_cross_entropy",
        **kwargs,
    ):
        super().__init__(name=name, **kwargs)
        self.smoothing = smoothing

    def __call__(self, y_true, y_pred, sample_weight=None):
        if sample_weight is not None:
            # Keras would scale this scalar per sentence and average.
            raise ValueError(
                "LabelSmoothedCrossEntropy weighs tokens by "
                "their labels (PAD_ID: 0); it takes no "
                "sample_weight"
            )
        return super().__call__(y_true, y_pred)

    def call(self, y_true, y_pred):
        # Keras hands y_true over in the loss's float dtype; ids below
        # 2^24 convert back exactly.
        loss_sum, count, _ = smoothed_cross_entropy_stats(
            tf.cast(y_true, tf.int32), y_pred, self.smoothing
        )
        context = tf.distribute.get_replica_context()
        # None in cross-replica context, which holds the whole batch.
        if context is not None:
            count = context.all_reduce(tf.distribute.ReduceOp.SUM, count)
        # A scalar, which Keras' reduction returns unchanged.
        return loss_sum / tf.maximum(count, 1.0)

    def get_config(self):
        return {**super().get_config(), "smoothing": self.smoothing}


def evaluation_stats(labels, logits, smoothing):
    """(summed label-smoothed cross-entropy, summed negative log-likelihood,
    real-token count), float32 scalars, in one pass over the logits. Not
    XLA-compiled: a dev evaluation meets each batch shape once, so
    compiling every shape costs more than the fused passes save."""
    log_partition, label_logit, mean_logit = _log_partition_label_mean(
        labels, tf.cast(logits, tf.float32)
    )
    weights = tf.cast(tf.not_equal(labels, PAD_ID), tf.float32)
    negative_log_likelihood = log_partition - label_logit
    smoothed = negative_log_likelihood + smoothing * (label_logit - mean_logit)
    return (
        tf.reduce_sum(smoothed * weights),
        tf.reduce_sum(negative_log_likelihood * weights),
        tf.reduce_sum(weights),
    )
