"""Attention masks, and the finite "minus infinity" masked logits and
impossible decoder scores use."""

import tensorflow as tf

from t2t_repro.config import PAD_ID

# Finite rather than -inf: exp() of it underflows to exactly 0, a fully
# masked row gives finite (zeroed) outputs and gradients instead of NaN,
# XLA and `0 * score` stay NaN-free, and the log-probability of any
# sequence a decoder produces is far above it.
NEG_INF = -1e9


def padding_mask(ids):
    """`[batch, length]` ids -> boolean `[batch, 1, 1, length]`, True = token."""
    return tf.not_equal(ids, PAD_ID)[:, tf.newaxis, tf.newaxis, :]


def sequence_lengths(ids):
    """int32 `[batch]`: the non-PAD tokens of each row of `ids`."""
    return tf.reduce_sum(tf.cast(ids != PAD_ID, tf.int32), axis=-1)


def causal_mask(length):
    """Boolean `[1, 1, length, length]`: position i sees positions <= i."""
    allowed = tf.linalg.band_part(tf.ones([length, length], tf.bool), -1, 0)
    return allowed[tf.newaxis, tf.newaxis]


def positions_up_to(index, length):
    """Boolean `[1, 1, 1, length]`: a cached decoder step at position
    `index` sees positions <= index."""
    return (tf.range(length) <= index)[tf.newaxis, tf.newaxis, tf.newaxis, :]
