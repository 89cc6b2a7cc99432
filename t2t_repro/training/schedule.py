"""The paper's learning-rate schedule (section 5.3)."""

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="t2t_repro")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lr = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5).

    Linear warm-up for `warmup_steps`, then decay with the inverse square
    root of the step; the peak, scale * (d_model * warmup)^-0.5, is at
    step = warmup_steps. Keras passes the optimizer's iteration count, which
    starts at 0, so the schedule is evaluated at step + 1: the first update
    uses a small positive rate instead of 0.

    With `cooldown_steps` > 0 (not in the paper) the rate is also
    multiplied by (total_steps - step + 1) / cooldown_steps over the last
    `cooldown_steps` updates, a linear cool-down to ~0 at `total_steps`:
    a short run then ends at a low-loss point instead of where the inverse
    square root leaves it ("warmup-stable-decay", Hägele et al. 2024).

    Example:
    >>> schedule = TransformerSchedule(d_model=512, warmup_steps=4000)
    >>> float(schedule(3999))  # the 4000th update: the peak
    0.000698...
    >>> cooled = TransformerSchedule(512, 4000, cooldown_steps=1000,
    ...                              total_steps=10000)
    >>> round(float(cooled(9499)) / float(schedule(9499)), 3)  # 500 left
    0.501
    """

    def __init__(
        self, d_model, warmup_steps=4000, scale=1.0, cooldown_steps=0, total_steps=None
    ):
        if d_model <= 0 or warmup_steps <= 0 or scale <= 0:
            raise ValueError(
                f"d_model ({d_model}), warmup_steps ({warmup_steps}) and "
                f"scale ({scale}) must be positive"
            )
        if cooldown_steps and not 0 < cooldown_steps <= (total_steps or 0):
            raise ValueError(
                f"cooldown_steps ({cooldown_steps}) must be in "
                f"[1, total_steps ({total_steps})]"
            )
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale
        self.cooldown_steps = cooldown_steps
        self.total_steps = total_steps

    def __call__(self, step):
        step = tf.cast(step, tf.float32) + 1.0
        rate = (
            self.scale
            * self.d_model**-0.5
            * tf.minimum(tf.math.rsqrt(step), step * self.warmup_steps**-1.5)
        )
        if self.cooldown_steps:
            rate *= tf.clip_by_value(
                (self.total_steps - step + 1.0) / self.cooldown_steps, 0.0, 1.0
            )
        return rate

    def get_config(self):
        return {
            "d_model": self.d_model,
            "warmup_steps": self.warmup_steps,
            "scale": self.scale,
            "cooldown_steps": self.cooldown_steps,
            "total_steps": self.total_steps,
        }


# Variables (by Keras name) that decoupled weight decay leaves alone: decay
# pulls toward 0, which is no prior for offsets, LayerNorm gains or the
# shared embedding (scaled by sqrt(d_model) to unit size).
_NOT_DECAYED = ["bias", "gamma", "beta", "embeddings"]


@keras.saving.register_keras_serializable(package="t2t_repro")
class FusedAdam(keras.optimizers.Adam):
    """Keras' Adam, each variable updated by TensorFlow's fused ApplyAdam
    kernel: the same update, m += (g - m)(1 - beta_1), v += (g^2 - v)
    (1 - beta_2), w -= lr sqrt(1 - beta_2^t) / (1 - beta_1^t) m / (sqrt(v)
    + epsilon), in one multi-threaded pass over w, m and v instead of
    Keras' eleven elementwise ops, each a pass over memory. Its variables
    (and so checkpoints) are Keras Adam's. With a `weight_decay`, the
    variables of `_NOT_DECAYED` are excluded from it, also in an optimizer
    made from its config (Keras' get_config does not keep exclusions)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.weight_decay:
            self.exclude_from_weight_decay(var_names=_NOT_DECAYED)

    def update_step(self, gradient, variable, learning_rate):
        if self.amsgrad:
            return super().update_step(gradient, variable, learning_rate)
        dtype = variable.dtype
        index = self._get_variable_index(variable)
        step = tf.cast(self.iterations + 1, dtype)
        beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        tf.raw_ops.ResourceApplyAdam(
            var=_handle(variable),
            m=_handle(self._momentums[index]),
            v=_handle(self._velocities[index]),
            beta1_power=tf.pow(beta_1, step),
            beta2_power=tf.pow(beta_2, step),
            lr=tf.cast(learning_rate, dtype),
            beta1=beta_1,
            beta2=beta_2,
            epsilon=tf.cast(self.epsilon, dtype),
            grad=tf.cast(gradient, dtype),
        )


def _handle(variable):
    """The resource handle of a Keras or TensorFlow variable (inside a
    tf.distribute update, that of this device's copy)."""
    if isinstance(variable, keras.Variable):
        variable = variable.value
    return variable.handle


def paper_adam(schedule, weight_decay=0.0):
    """Adam with the paper's beta_1 = 0.9, beta_2 = 0.98, epsilon = 1e-9.

    With `weight_decay` > 0 it is AdamW (Loshchilov & Hutter): each update
    also subtracts learning_rate * weight_decay * w from the weight
    matrices.
    """
    return FusedAdam(
        learning_rate=schedule,
        beta_1=0.9,
        beta_2=0.98,
        epsilon=1e-9,
        weight_decay=weight_decay or None,
    )
