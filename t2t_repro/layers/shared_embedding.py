"""Token embedding shared by encoder, decoder and the output projection."""

import keras
import tensorflow as tf

from t2t_repro.layers.dense_2d import dense_2d


@keras.saving.register_keras_serializable(package="t2t_repro")
class SharedEmbedding(keras.layers.Layer):
    """One `[vocab_size, d_model]` matrix E used three ways (section 3.4).

    `call(ids)` looks tokens up and multiplies by sqrt(d_model);
    `project(x)` is the tied pre-softmax linear transformation x E^T.

    Shapes:
        call: ids `[batch, length]` int -> `[batch, length, d_model]`
        project: `[batch, length, d_model]` -> logits
            `[batch, length, vocab_size]`, float32 unless
            `float32_logits=False` (then the dtype of x, which spares a
            bf16 training step a float32 copy of its largest tensor: the
            loss casts inside its fused pass)

    Args:
        vocab_size: size of the shared subword vocabulary.
        d_model: embedding width.

    Example:
    >>> embedding = SharedEmbedding(vocab_size=100, d_model=16)
    >>> x = embedding(tf.constant([[5, 7, 0]]))
    >>> embedding.project(x).shape
    TensorShape([1, 3, 100])
    """

    def __init__(self, vocab_size, d_model, **kwargs):
        super().__init__(**kwargs)
        # As Keras' Embedding: the table is read in its own dtype, so a
        # lookup casts the rows it gathers, not the whole table.
        self.autocast = False
        self.vocab_size = vocab_size
        self.d_model = d_model

    def build(self, ids_shape=None):
        # d_model^-0.5 keeps sqrt(d_model) * E at unit scale, as in t2t.
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.vocab_size, self.d_model),
            initializer=keras.initializers.RandomNormal(stddev=self.d_model**-0.5),
        )
        self.built = True

    def call(self, ids):
        rows = tf.cast(
            tf.gather(tf.convert_to_tensor(self.embeddings), ids), self.compute_dtype
        )
        return rows * tf.cast(self.d_model**0.5, self.compute_dtype)

    def project(self, x, float32_logits=True):
        table = tf.cast(tf.convert_to_tensor(self.embeddings), x.dtype)
        logits = dense_2d(lambda rows: tf.matmul(rows, table, transpose_b=True), x)
        return tf.cast(logits, tf.float32) if float32_logits else logits

    def get_config(self):
        config = super().get_config()
        config.update({"vocab_size": self.vocab_size, "d_model": self.d_model})
        return config
