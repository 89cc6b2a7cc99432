"""The Transformer's Keras layers, one per module, each checked against a
NumPy reference and serializable with `get_config`: scaled dot-product and
multi-head attention (with a key/value cache for decoding), sinusoidal or
learned positions, the position-wise feed-forward network, encoder and
decoder layers (post-norm as in the paper, or pre-norm), the shared
embedding tied to the output projection, the masks (masks.py), and
Keras' Dense, Dropout and LayerNormalization with cheaper or more exact
training passes."""

# The layer classes, re-exported (`import X as X`: PEP 484's explicit
# re-export, which linters and type checkers honour).
from t2t_repro.layers.decoder_layer import DecoderLayer as DecoderLayer
from t2t_repro.layers.dense import Dense as Dense
from t2t_repro.layers.dropout import Dropout as Dropout
from t2t_repro.layers.encoder_layer import EncoderLayer as EncoderLayer
from t2t_repro.layers.layer_normalization import (
    LayerNormalization as LayerNormalization,
)
from t2t_repro.layers.learned_position_encoding import (
    LearnedPositionEncoding as LearnedPositionEncoding,
)
from t2t_repro.layers.multi_head_attention import (
    MultiHeadAttention as MultiHeadAttention,
)
from t2t_repro.layers.position_wise_feed_forward import (
    PositionWiseFeedForward as PositionWiseFeedForward,
)
from t2t_repro.layers.scaled_dot_product_attention import (
    ScaledDotProductAttention as ScaledDotProductAttention,
)
from t2t_repro.layers.shared_embedding import SharedEmbedding as SharedEmbedding
from t2t_repro.layers.sinusoidal_position_encoding import (
    SinusoidalPositionEncoding as SinusoidalPositionEncoding,
)
