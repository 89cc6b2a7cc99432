"""Label-smoothed cross-entropy and accuracy over real target tokens."""

import tensorflow as tf

from t2t_repro.config import PAD_ID


def _log_partition_label_mean(labels, logits):
    """Per position: log sum_k exp(z_k), the label's logit z_label and the
    mean logit, from which both losses below follow without materialising
    log-probabilities: -log p_label = logsumexp(z) - z_label, and with the
    smoothed target -sum_k q_k log p_k = logsumexp(z) - (1 - eps) z_label
    - eps mean(z)."""
    return (tf.reduce_logsumexp(logits, axis=-1),
            tf.gather(logits, labels, batch_dims=2),
            tf.reduce_mean(logits, axis=-1))


# XLA fuses these passes over the [batch, length, vocab] logits; unfused,
# loss and argmax cost more than the vocabulary projection itself on an
# earlier machine's fp32 step (README, "Speed": 3.4 -> 2.6 s/step). It
# compiles once per batch shape, which training amortises and one
# evaluation does not (see `evaluation_stats`).
@tf.function(jit_compile=True)
def _per_token_loss_and_hit(labels, logits, smoothing):
    log_partition, label_logit, mean_logit = _log_partition_label_mean(
        labels, logits)
    loss = (log_partition - (1.0 - smoothing) * label_logit
            - smoothing * mean_logit)
    hit = tf.equal(tf.argmax(logits, axis=-1, output_type=labels.dtype),
                   labels)
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
        logits: float `[batch, length, vocab]`.
        smoothing: epsilon_ls (0.1 in the paper).

    Returns:
        (loss_sum, token_count, correct_count), float32 scalars; a token
        is correct when the argmax of its logits is the label.
    """
    loss, hit = _per_token_loss_and_hit(labels, tf.cast(logits, tf.float32),
                                        tf.cast(smoothing, tf.float32))
    weights = tf.cast(tf.not_equal(labels, PAD_ID), tf.float32)
    return (tf.reduce_sum(loss * weights), tf.reduce_sum(weights),
            tf.reduce_sum(tf.cast(hit, tf.float32) * weights))


def smoothed_cross_entropy(labels, logits, smoothing):
    """Mean label-smoothed cross-entropy per real target token."""
    loss_sum, count, _ = smoothed_cross_entropy_stats(labels, logits,
                                                      smoothing)
    return loss_sum / tf.maximum(count, 1.0)


def evaluation_stats(labels, logits, smoothing):
    """(summed label-smoothed cross-entropy, summed negative log-likelihood,
    real-token count), float32 scalars, in one pass over the logits. Not
    XLA-compiled: a dev evaluation meets each batch shape once, and
    compiling them (about 5 s for Multi30k's dev set) cost more than the
    fused passes save."""
    log_partition, label_logit, mean_logit = _log_partition_label_mean(
        labels, tf.cast(logits, tf.float32))
    weights = tf.cast(tf.not_equal(labels, PAD_ID), tf.float32)
    negative_log_likelihood = log_partition - label_logit
    smoothed = negative_log_likelihood + smoothing * (label_logit -
                                                      mean_logit)
    return (tf.reduce_sum(smoothed * weights),
            tf.reduce_sum(negative_log_likelihood * weights),
            tf.reduce_sum(weights))
