"""Tensor shapes that keep the sizes known at trace time out of the graph."""

import tensorflow as tf


def dims(x):
    """`x`'s shape as a list: Python ints where the static shape knows a
    size, scalar tensors where only the running graph does.

    A size read from `tf.shape(x)[i]` adds a slice and three constants to
    the graph at every use, and the decoding graph reshapes in every layer
    of every step: nodes that tracing and Grappler process at each tool's
    start. Sizes such as the heads and their depth are known while
    tracing.

    >>> dims(tf.zeros([2, 3]))
    [2, 3]
    """
    static = list(x.shape)
    if None not in static:
        return static
    dynamic = tf.unstack(tf.shape(x), num=len(static))
    return [d if s is None else s for s, d in zip(static, dynamic)]
