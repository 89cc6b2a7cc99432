"""`dims`: the sizes known while tracing as ints, the others as tensors."""

import tensorflow as tf

from t2t_repro.layers.shapes import dims


def test_known_sizes_are_ints_and_unknown_ones_follow_the_running_graph():
    seen = []

    @tf.function(input_signature=[tf.TensorSpec([None, 3, None], tf.float32)])
    def sizes(x):
        shape = dims(x)
        seen.append(shape)
        return tf.stack(shape)

    assert sizes(tf.zeros([2, 3, 5])).numpy().tolist() == [2, 3, 5]
    assert sizes(tf.zeros([4, 3, 1])).numpy().tolist() == [4, 3, 1]
    (traced,) = seen  # one trace serves every batch and length
    assert traced[1] == 3 and isinstance(traced[1], int)
    assert all(tf.is_tensor(size) for size in (traced[0], traced[2]))
