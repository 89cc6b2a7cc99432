"""Keras' Dense with a bias gradient summed in float32."""

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="t2t_repro")
class Dense(keras.layers.Dense):
    """`keras.layers.Dense` (same weights, same checkpoint) whose bias
    gradient is a float32 sum in every compute dtype.

    Keras adds the bias with `tf.nn.bias_add`, whose gradient kernel on a
    CPU (BiasAddGrad) accumulates a bfloat16 gradient in bfloat16: summed
    over 8,192 rows of unit-scale values, its result was off by up to 80%
    of the true sum (tests/layers/test_dense.py), so a bf16 run trained
    its biases on a corrupted gradient. Here the forward pass is the same
    ops, and the bias gradient is a matmul of a row of ones with the
    gradient, which sums in float32. LoRA, quantization and the other
    options of Keras' Dense run Keras' code.

    Shapes: `[..., input_width]` -> `[..., units]`.

    Example:
    >>> dense = Dense(3, kernel_initializer="ones", bias_initializer="ones")
    >>> dense(tf.ones([1, 2])).numpy().tolist()
    [[3.0, 3.0, 3.0]]
    """

    def call(self, inputs, training=None):
        if self.bias is None or self.lora_enabled or self.quantization_mode is not None:
            return super().call(inputs, training=training)
        outputs = _bias_add(
            keras.ops.matmul(inputs, self.kernel), tf.convert_to_tensor(self.bias)
        )
        if self.activation is not None:
            outputs = self.activation(outputs)
        return outputs


@tf.custom_gradient
def _bias_add(x, bias):
    """x + bias over x's last axis; the bias gradient summed in float32."""

    def backward(upstream):
        rows = tf.reshape(upstream, [-1, upstream.shape[-1]])
        # A row of ones times the gradient: matmuls accumulate bf16
        # products in float32, and on a CPU this is faster than
        # BiasAddGrad or reduce_sum (scripts/ablate_train_ops.py).
        ones = tf.ones([1, tf.shape(rows)[0]], rows.dtype)
        return upstream, tf.matmul(ones, rows)[0]

    return tf.nn.bias_add(x, bias), backward
