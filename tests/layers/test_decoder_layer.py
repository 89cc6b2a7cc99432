"""DecoderLayer: the contract every layer meets."""

from helpers.layer_contract import check_layer_contract
from t2t_repro import layers


def test_layer_contract(sequence, memory):
    check_layer_contract(
        layers.DecoderLayer(d_model=8, num_heads=2, d_ff=16, dropout=0.3),
        (sequence, memory),
        (2, 6, 8),
        26,
    )
