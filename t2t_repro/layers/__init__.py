"""The Transformer's Keras layers, one per module, each checked against a
NumPy reference and serializable with `get_config`: scaled dot-product and
multi-head attention (with a key/value cache for decoding), sinusoidal or
learned positions, the position-wise feed-forward network, encoder and
decoder layers (post-norm as in the paper, or pre-norm), the shared
embedding tied to the output projection, the masks (masks.py), and
Keras' Dropout and LayerNormalization with cheaper training passes."""

from t2t_repro.layers.decoder_layer import DecoderLayer
from t2t_repro.layers.dropout import Dropout
from t2t_repro.layers.encoder_layer import EncoderLayer
from t2t_repro.layers.layer_normalization import LayerNormalization
from t2t_repro.layers.learned_position_encoding import LearnedPositionEncoding
from t2t_repro.layers.multi_head_attention import MultiHeadAttention
from t2t_repro.layers.position_wise_feed_forward import PositionWiseFeedForward
from t2t_repro.layers.scaled_dot_product_attention import (
    ScaledDotProductAttention,
)
from t2t_repro.layers.shared_embedding import SharedEmbedding
from t2t_repro.layers.sinusoidal_position_encoding import (
    SinusoidalPositionEncoding,
)

__all__ = [
    "DecoderLayer",
    "Dropout",
    "EncoderLayer",
    "LayerNormalization",
    "LearnedPositionEncoding",
    "MultiHeadAttention",
    "PositionWiseFeedForward",
    "ScaledDotProductAttention",
    "SharedEmbedding",
    "SinusoidalPositionEncoding",
]
