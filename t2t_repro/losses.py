"""Label-smoothed cross-entropy and accuracy over real target tokens."""

import tensorflow as tf

from t2t_repro.config import PAD_ID


def smoothed_cross_entropy_sum(labels, logits, smoothing):
    """Summed label-smoothed cross-entropy and the count of real tokens.

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
        (loss_sum, token_count), float32 scalars.
    """
    logits = tf.cast(logits, tf.float32)
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    label_log_prob = tf.gather(log_probs, labels, batch_dims=2)
    per_token = -((1.0 - smoothing) * label_log_prob +
                  smoothing * tf.reduce_mean(log_probs, axis=-1))
    weights = tf.cast(tf.not_equal(labels, PAD_ID), tf.float32)
    return tf.reduce_sum(per_token * weights), tf.reduce_sum(weights)


def correct_token_count(labels, logits):
    """Number of real (non-pad) positions whose argmax is the label."""
    predictions = tf.argmax(logits, axis=-1, output_type=labels.dtype)
    correct = tf.logical_and(tf.equal(predictions, labels),
                             tf.not_equal(labels, PAD_ID))
    return tf.reduce_sum(tf.cast(correct, tf.float32))


def smoothed_cross_entropy(labels, logits, smoothing):
    """Mean label-smoothed cross-entropy per real target token."""
    loss_sum, count = smoothed_cross_entropy_sum(labels, logits, smoothing)
    return loss_sum / tf.maximum(count, 1.0)
