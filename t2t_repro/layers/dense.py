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
    of the true sum (`scripts/ablate_train_ops.py` prints the error), so
    a bf16 run trained every bias on noise. Here the same forward pass
    (so Grappler still fuses MatMul, BiasAdd and ReLU into one oneDNN op)
    has a gradient whose bias part is `reduce_sum`, which sums bfloat16 in
    float32. LoRA, quantization and the other options of Keras' Dense run
    Keras' code.

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
        rows = list(range(len(upstream.shape) - 1))
        # Sum (unlike BiasAddGrad) accumulates bfloat16 in float32.
        return upstream, tf.reduce_sum(upstream, rows)

    return tf.nn.bias_add(x, bias), backward
