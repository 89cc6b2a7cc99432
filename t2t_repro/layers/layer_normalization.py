"""LayerNorm over the last axis with a hand-written gradient."""

import keras
import tensorflow as tf

from t2t_repro import kernels


@keras.saving.register_keras_serializable(package="t2t_repro")
class LayerNormalization(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization` (same weights, same checkpoint)
    whose backward pass is the closed form

        dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat)),  g = dy * gamma

    with the forward pass's normalised x_hat and rstd kept, where autodiff
    of Keras' forward differentiates each of its ops (moments, rsqrt, the
    affine terms) in turn: fewer passes over the activations. In float32
    whatever the compute dtype, as Keras' layer. Only the layer this
    package builds (last axis, with scale and center) takes this path;
    any other configuration (or float64 inputs) runs Keras' code. Inside
    `t2t_repro.kernels.enabled(True)` (the training step), float32 and
    bfloat16 inputs run the same function as one C++ kernel each way.

    Shapes: `[..., width]` -> the same.

    Example:
    >>> norm = LayerNormalization(epsilon=1e-6)
    >>> norm(tf.constant([[1.0, 3.0]]))[0].numpy().round(4).tolist()
    [-1.0, 1.0]
    """

    def call(self, inputs):
        if (
            self.axis not in ([-1], [len(inputs.shape) - 1])
            or not (self.center and self.scale)
            or self.rms_scaling
            or inputs.dtype == tf.float64
        ):
            return super().call(inputs)
        gamma = tf.convert_to_tensor(self.gamma)
        beta = tf.convert_to_tensor(self.beta)
        if kernels.applies_to(inputs.dtype):
            normalized = kernels.layer_norm(
                inputs,
                tf.cast(gamma, tf.float32),
                tf.cast(beta, tf.float32),
                self.epsilon,
            )
        else:
            normalized = layer_norm(inputs, gamma, beta, self.epsilon)
        return tf.cast(normalized, self.compute_dtype)


def layer_norm(x, gamma, beta, epsilon):
    """LayerNorm of x `[..., width]` over its last axis, in float32
    whatever the dtypes of x and the weights, with the closed-form
    gradient of `LayerNormalization`: the layer's computation for code
    that holds its own weights (scripts/ablate_train_ops.py times it)."""

    @tf.custom_gradient
    def forward(x, gamma, beta):
        x32 = tf.cast(x, tf.float32)
        gamma32 = tf.cast(gamma, tf.float32)
        mean, variance = tf.nn.moments(x32, axes=[-1], keepdims=True)
        rstd = tf.math.rsqrt(variance + epsilon)
        x_hat = (x32 - mean) * rstd

        def backward(dy):
            dy = tf.cast(dy, tf.float32)
            g = dy * gamma32
            dx = rstd * (
                g
                - tf.reduce_mean(g, -1, keepdims=True)
                - x_hat * tf.reduce_mean(g * x_hat, -1, keepdims=True)
            )
            rows = list(range(len(x.shape) - 1))
            return (
                tf.cast(dx, x.dtype),
                tf.cast(tf.reduce_sum(dy * x_hat, rows), gamma.dtype),
                tf.cast(tf.reduce_sum(dy, rows), beta.dtype),
            )

        return x_hat * gamma32 + tf.cast(beta, tf.float32), backward

    return forward(x, gamma, beta)
