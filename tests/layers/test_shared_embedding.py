"""SharedEmbedding: scaled lookups and the output projection tied to them."""

import numpy as np
import tensorflow as tf

from helpers.layer_contract import check_layer_contract
from t2t_repro import layers


def test_shared_embedding_scales_and_ties_projection():
    embedding = layers.SharedEmbedding(vocab_size=11, d_model=4)
    ids = tf.constant([[1, 5, 0]])
    vectors = embedding(ids).numpy()
    table = embedding.embeddings.numpy()
    np.testing.assert_allclose(vectors[0], table[[1, 5, 0]] * 2.0, atol=1e-6)
    logits = embedding.project(tf.constant(vectors)).numpy()
    np.testing.assert_allclose(logits[0], vectors[0] @ table.T, atol=1e-5)


def test_layer_contract():
    check_layer_contract(
        layers.SharedEmbedding(vocab_size=20, d_model=8),
        (np.array([[3, 5, 0]]),),
        (1, 3, 8),
        1,
    )
