"""What every layer of the package must do, checked the same way for each
(in the spirit of keras-hub's `run_layer_test`)."""

import keras
import numpy as np


def _first(output):
    return output[0] if isinstance(output, (tuple, list)) else output


def check_layer_contract(layer, inputs, expected_shape, trainable_weights):
    """Calls `layer(*inputs)` and checks: the output shape; the number of
    trainable weights; that inference is deterministic; that a layer made
    from `get_config()` (and one revived by Keras serialization) has the
    same config and, given the same weights, the same output; and that
    built under the mixed_bfloat16 policy its weights stay float32 and it
    computes in bfloat16."""
    output = _first(layer(*inputs))
    assert tuple(output.shape) == tuple(expected_shape)
    assert len(layer.trainable_weights) == trainable_weights
    np.testing.assert_array_equal(output, _first(layer(*inputs)))

    config = layer.get_config()
    for clone in (
        type(layer).from_config(config),
        keras.saving.deserialize_keras_object(
            keras.saving.serialize_keras_object(layer)
        ),
    ):
        assert type(clone) is type(layer)
        assert clone.get_config() == config
        clone(*inputs)
        clone.set_weights(layer.get_weights())
        np.testing.assert_array_equal(_first(clone(*inputs)), output)

    # As the Trainer builds its model: under the global policy, so that
    # sublayers get it too.
    config.pop("dtype")
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        mixed = type(layer).from_config(config)
        mixed_output = _first(mixed(*inputs))
    finally:
        keras.mixed_precision.set_global_policy(previous)
    assert {w.dtype for w in mixed.weights} <= {"float32", "int64", "uint32", "int32"}
    assert mixed_output.dtype == "bfloat16", mixed_output.dtype
