"""Position-wise feed-forward network (section 3.3)."""

import keras

from t2t_repro.layers.dense import Dense
from t2t_repro.layers.dense_2d import dense_2d
from t2t_repro.layers.dropout import Dropout


@keras.saving.register_keras_serializable(package="t2t_repro")
class PositionWiseFeedForward(keras.layers.Layer):
    """FFN(x) = max(0, x W1 + b1) W2 + b2, applied at every position.

    Shapes:
        inputs: `[batch, length, d_model]`
        returns: `[batch, length, d_model]`

    Args:
        d_model: input and output width.
        d_ff: inner width (2048 in the base model).
        dropout: dropout on the ReLU activations (tensor2tensor's
            relu_dropout); 0 reproduces the paper's formula exactly.

    Example:
    >>> ffn = PositionWiseFeedForward(d_model=512, d_ff=2048)
    >>> ffn(keras.ops.zeros([2, 10, 512])).shape
    TensorShape([2, 10, 512])
    """

    def __init__(self, d_model, d_ff, dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.d_model = d_model
        self.d_ff = d_ff
        self.dropout = dropout
        self.inner = Dense(d_ff, activation="relu", name="inner")
        self.inner_dropout = Dropout(dropout)
        self.outer = Dense(d_model, name="outer")

    def build(self, inputs_shape):
        self.inner.build(inputs_shape)
        self.outer.build(inputs_shape[:-1] + (self.d_ff,))
        self.built = True

    def call(self, inputs, training=None):
        hidden = self.inner_dropout(dense_2d(self.inner, inputs), training=training)
        return dense_2d(self.outer, hidden)

    def get_config(self):
        config = super().get_config()
        config.update(
            {"d_model": self.d_model, "d_ff": self.d_ff, "dropout": self.dropout}
        )
        return config
