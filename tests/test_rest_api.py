"""The port of TF Serving's REST :predict conversion (helpers/rest_api.py)
against TF Serving's own examples, not against anything of ours: the
cases of its tests (tensorflow_serving/util/json_tensor_test.cc: request
bodies to tensors, tensors to responses, and what it refuses) and the
:predict call of its REST API documentation (g3doc/api_rest.md).
test_serving.py checks the REST responses in docs/serving.md against
this port."""

import json
import math

import numpy as np
import pytest
import tensorflow as tf

from helpers.rest_api import RestError, predict, request_tensors, response_text


def _request(body, dtypes, signature_name="serving_default"):
    return request_tensors(body, {signature_name: dtypes})


def _assert_tensors_equal(tensors, expected):
    assert sorted(tensors) == sorted(expected)
    for name, (dtype, values) in expected.items():
        array = np.array(values, dtype=object if dtype == tf.string else None)
        assert tensors[name].shape == array.shape, name
        if dtype == tf.string:
            assert tensors[name].tolist() == array.tolist(), name
        else:
            assert tensors[name].dtype == dtype.as_numpy_dtype, name
            np.testing.assert_array_equal(
                tensors[name], array.astype(dtype.as_numpy_dtype)
            )


# (input dtypes, body, format, {name: (dtype, values)}) of
# json_tensor_test.cc's accepted requests.
ACCEPTED = [
    (  # SingleUnnamedTensor
        {"default": tf.int32},
        '{"instances": [[1,2],[3,4],[5,6]]}',
        "row",
        {"default": (tf.int32, [[1, 2], [3, 4], [5, 6]])},
    ),
    (  # MixedInputForFloatTensor
        {"default": tf.float32},
        '{"instances": [1, 2.0, 3, 4, 5.003, 0.007, 0.0]}',
        "row",
        {"default": (tf.float32, [1, 2.0, 3, 4, 5.003, 0.007, 0.0])},
    ),
    (  # MixedInputForDoubleTensor
        {"default": tf.float64},
        '{"instances": [1.0, 2, 3, 4, 0.662, 0, 0.0]}',
        "row",
        {"default": (tf.float64, [1.0, 2, 3, 4, 0.662, 0, 0.0])},
    ),
    (  # SingleUnnamedTensorBase64Scalars
        {"default": tf.string},
        '{"instances": [ { "b64" : "aGVsbG8=" }, { "b64": "d29ybGQ=" } ]}',
        "row",
        {"default": (tf.string, [b"hello", b"world"])},
    ),
    (  # SingleUnnamedTensorBase64Lists
        {"default": tf.string},
        '{"instances": [ [{ "b64" : "aGVsbG8=" }], [{ "b64": "d29ybGQ=" }] ]}',
        "row",
        {"default": (tf.string, [[b"hello"], [b"world"]])},
    ),
    (  # SingleNamedTensorBase64
        {"default": tf.string},
        '{"instances": [{"default": [[{"b64": "aGVsbG8="}], [{"b64": "d29ybGQ="}]]}]}',
        "row",
        {"default": (tf.string, [[[b"hello"], [b"world"]]])},
    ),
    (  # MultipleNamedTensor
        {
            "int_tensor": tf.int32,
            "str_tensor": tf.string,
            "float_tensor": tf.float32,
            "dbl_tensor": tf.float64,
        },
        """{"instances": [
            {"int_tensor": [[1,2],[3,4],[5,6]], "str_tensor": ["foo", "bar"],
             "float_tensor": [1.0, NaN], "dbl_tensor": [NaN]},
            {"int_tensor": [[7,8],[9,0],[1,2]], "str_tensor": ["baz", "bat"],
             "float_tensor": [2.0, Infinity], "dbl_tensor": [2.0]}]}""",
        "row",
        {
            "int_tensor": (
                tf.int32,
                [[[1, 2], [3, 4], [5, 6]], [[7, 8], [9, 0], [1, 2]]],
            ),
            "str_tensor": (tf.string, [[b"foo", b"bar"], [b"baz", b"bat"]]),
            "float_tensor": (tf.float32, [[1.0, math.nan], [2.0, math.inf]]),
            "dbl_tensor": (tf.float64, [[math.nan], [2.0]]),
        },
    ),
    (  # SingleUnnamedTensorColumnarFormat
        {"int_tensor": tf.int32},
        '{"inputs": {"int_tensor": [[[1,2],[3,4],[5,6]]]}}',
        "columnar",
        {"int_tensor": (tf.int32, [[[1, 2], [3, 4], [5, 6]]])},
    ),
    (  # ... with the input's name left out
        {"int_tensor": tf.int32},
        '{"inputs": [[[1,2],[3,4],[5,6]]]}',
        "columnar",
        {"int_tensor": (tf.int32, [[[1, 2], [3, 4], [5, 6]]])},
    ),
    (  # MultipleNamedTensorColumnarFormat
        {"int_tensor": tf.int32, "str_tensor": tf.string, "bin_tensor": tf.string},
        """{"inputs": {"int_tensor": [[[1,2],[3,4],[5,6]]],
            "str_tensor": ["foo", "bar"], "bin_tensor": { "b64" : "aGVsbG8=" }}}""",
        "columnar",
        {
            "int_tensor": (tf.int32, [[[1, 2], [3, 4], [5, 6]]]),
            "str_tensor": (tf.string, [b"foo", b"bar"]),
            "bin_tensor": (tf.string, b"hello"),
        },
    ),
]


@pytest.mark.parametrize("dtypes, body, request_format, expected", ACCEPTED)
def test_accepted_requests_give_tf_servings_tensors(
    dtypes, body, request_format, expected
):
    got_format, signature_name, tensors = _request(body, dtypes)
    assert (got_format, signature_name) == (request_format, "serving_default")
    _assert_tensors_equal(tensors, expected)


def test_a_request_names_its_signature():
    # SingleUnnamedTensorWithSignature
    _, signature_name, tensors = _request(
        '{"signature_name": "predict_images", "instances": [[1,2]]}',
        {"default": tf.int32},
        signature_name="predict_images",
    )
    assert signature_name == "predict_images"
    _assert_tensors_equal(tensors, {"default": (tf.int32, [[1, 2]])})


TWO_INPUTS = {"int_tensor": tf.int32, "str_tensor": tf.string}

# (input dtypes, body, part of the error) of json_tensor_test.cc's
# refused requests.
REFUSED = [
    ({"default": tf.int32}, "", "document is empty"),
    (
        {"default": tf.int32},
        '{"signature_name": 5, "instances": [[1,2],[3,4],[5,6,7]]}',
        "must be a string value",
    ),
    (
        {"default": tf.int32},
        '{"instances": [[1,2],[3,4],[5,6,7]], "inputs": [[1,2],[3,4],[5,6,7]]}',
        "Not formatted correctly",
    ),
    (
        {"default": tf.int32},
        '{"instances": [[1,2],[3,4],[5,6,7]]}',
        "Expecting tensor size",
    ),
    ({"default": tf.int32}, '{"instances": [[1,2],[3,4],[[5,6]]]}', "Expecting shape"),
    ({"default": tf.int32}, '{"instances": [1, [1]]}', "Expecting shape"),
    (
        {"default": tf.int32},
        '{"instances": [[1,2],["a", "b"]]}',
        "not of expected type",
    ),
    # absl::Substitute writes the largest double with six digits.
    ({"default": tf.float32}, '{"instances": [1.79769e+308]}', "loss of precision"),
    ({"default": tf.float32}, '{"instances": [16777217]}', "loss of precision"),
    ({"default": tf.float64}, '{"instances": [9007199254740993]}', "loss of precision"),
    (
        TWO_INPUTS,
        """{"instances": [
            {"int_tensor": [[1,2],[3,4],[5,6]], "str_tensor": ["foo", "bar"]},
            {"int_tensor": [[[7,8],[9,0],[1,2]]], "str_tensor": ["baz", "bat"]}]}""",
        "Expecting shape",
    ),
    (
        TWO_INPUTS,
        """{"instances": [
            {"int_tensor": [[1,2],[3,4],[5,6],[7,8]], "str_tensor": ["foo", "bar"]},
            {"int_tensor": [[7,8],[9,0],[1,2]], "str_tensor": ["baz", "bat"]}]}""",
        "Expecting tensor size",
    ),
    (
        TWO_INPUTS,
        """{"instances": [
            {"int_tensor": [[1,2],[3,4],[5,6]], "str_tensor": ["foo", "bar"]},
            [1, 20, 30],
            {"int_tensor": [[[7,8],[9,0],[1,2]]], "str_tensor": ["baz", "bat"]}]}""",
        "Expecting object but got list",
    ),
    (
        {"str_tensor": tf.string},
        '{"instances": [["baz", "bar"], {"str_tensor": ["baz", "bat"]}]}',
        "Expecting value/list but got object",
    ),
]


@pytest.mark.parametrize("dtypes, body, message", REFUSED)
def test_refused_requests_are_refused_with_tf_servings_message(dtypes, body, message):
    with pytest.raises(RestError, match=message):
        _request(body, dtypes)


def _as_strings(text):
    """A JSON document with its numbers kept as written (json_tensor_test's
    CompareJsonAllValuesAsStrings)."""
    return json.loads(text, parse_float=str, parse_int=str, parse_constant=str)


INT_TENSOR = np.array([[[1, 2], [3, 4], [5, 6]], [[7, 8], [9, 0], [1, 2]]], np.int32)
HELLO_WORLD = np.array([[b"hello", b"world"], [b"tf", b"serving"]], object)


# (outputs, format, expected response) of json_tensor_test.cc's
# FromJson* cases.
RESPONSES = [
    (  # SingleTensor
        {"int_tensor": INT_TENSOR},
        "row",
        '{"predictions": [[[1, 2], [3, 4], [5, 6]], [[7, 8], [9, 0], [1, 2]]]}',
    ),
    (
        {"int_tensor": INT_TENSOR},
        "columnar",
        '{"outputs": [[[1, 2], [3, 4], [5, 6]], [[7, 8], [9, 0], [1, 2]]]}',
    ),
    (  # SingleScalarTensor
        {"int_tensor": np.arange(1, 6, dtype=np.int32)},
        "row",
        '{ "predictions": [1, 2, 3, 4, 5] }',
    ),
    (
        {"int_tensor": np.arange(1, 6, dtype=np.int32)},
        "columnar",
        '{ "outputs": [1, 2, 3, 4, 5] }',
    ),
    (  # SingleBytesTensor
        {"str_tensor_bytes": HELLO_WORLD},
        "row",
        """{"predictions": [[{"b64": "aGVsbG8="}, {"b64": "d29ybGQ="}],
            [{"b64": "dGY="}, {"b64": "c2VydmluZw=="}]]}""",
    ),
    (  # SingleFloatTensorSixDigitPrecision
        {
            "float_tensor": np.array(
                [[9000000, 999999, 0.50000], [0.0003, 0.00003, 555557.5]], np.float32
            )
        },
        "row",
        '{"predictions": [[9e+06, 999999.0, 0.5], [0.0003, 3e-05, 555557.5]]}',
    ),
    (  # SingleFloatTensorNonFinite
        {"float_tensor": np.array([[np.nan, np.inf], [3, -np.inf]], np.float32)},
        "row",
        '{"predictions": [[NaN, Infinity], [3.0, -Infinity]]}',
    ),
]

MULTIPLE_OUTPUTS = {
    "int_tensor": INT_TENSOR,
    "str_tensor": np.array([[b"foo", b"bar"], [b"baz", b"bat"]], object),
    "float_tensor": np.array([[1.0], [2.0]], np.float32),
    "double_scalar_tensor": np.array([8.0, 9.0], np.float64),
    "str_tensor_bytes": HELLO_WORLD,
}
RESPONSES += [
    (  # MultipleNamedTensors
        MULTIPLE_OUTPUTS,
        "row",
        """{"predictions": [
          {"double_scalar_tensor": 8.0, "float_tensor": [1.0],
           "int_tensor": [[1, 2], [3, 4], [5, 6]], "str_tensor": ["foo", "bar"],
           "str_tensor_bytes": [ {"b64": "aGVsbG8="}, {"b64": "d29ybGQ="} ]},
          {"double_scalar_tensor": 9.0, "float_tensor": [2.0],
           "int_tensor": [[7, 8], [9, 0], [1, 2]], "str_tensor": ["baz", "bat"],
           "str_tensor_bytes": [ {"b64": "dGY="}, {"b64": "c2VydmluZw=="} ]}]}""",
    ),
    (
        MULTIPLE_OUTPUTS,
        "columnar",
        """{"outputs": {
          "double_scalar_tensor": [8.0, 9.0],
          "float_tensor": [[1.0], [2.0]],
          "int_tensor": [[[1, 2], [3, 4], [5, 6]], [[7, 8], [9, 0], [1, 2]]],
          "str_tensor": [["foo", "bar"], ["baz", "bat"]],
          "str_tensor_bytes": [[{"b64": "aGVsbG8="}, {"b64": "d29ybGQ="}],
                               [{"b64": "dGY="}, {"b64": "c2VydmluZw=="}]]}}""",
    ),
]


@pytest.mark.parametrize("outputs, request_format, expected", RESPONSES)
def test_responses_are_written_as_tf_serving_writes_them(
    outputs, request_format, expected
):
    # Compared number by number as written: 0.5 and 0.500000 differ.
    assert _as_strings(response_text(outputs, request_format)) == _as_strings(expected)


def test_tf_servings_refusals_of_outputs():
    # FromJsonSingleTensorErrors, FromJsonMultipleNamedTensorsErrors
    with pytest.raises(RestError, match="empty tensor map"):
        response_text({}, "row")
    with pytest.raises(RestError, match="tensor type: complex64"):
        response_text({"tensor": np.array([1.0, 2.0], np.complex64)}, "row")
    with pytest.raises(RestError, match="no shape information"):
        response_text({"tensor": np.array(1, np.int32)}, "row")
    with pytest.raises(RestError, match="inconsistent batch size"):
        response_text(
            {
                "int_tensor": np.arange(6, dtype=np.int32).reshape(2, 3),
                "str_tensor": np.array([[b"foo", b"bar", b"baz"]], object),
            },
            "row",
        )


class _HalfPlusThree(tf.Module):
    """TF Serving's saved_model_half_plus_three test model: y = x / 2 + 3."""

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
    def serve(self, x):
        return {"y": x * 0.5 + 3.0}


def test_the_rest_documentations_predict_call(tmp_path):
    module = _HalfPlusThree()
    tf.saved_model.save(
        module, str(tmp_path), signatures={"serving_default": module.serve}
    )
    response = predict(
        tf.saved_model.load(str(tmp_path)), '{"instances": [1.0,2.0,5.0]}'
    )
    # The response api_rest.md shows (the server indents it).
    assert _as_strings(response) == _as_strings(
        """{
    "predictions": [3.5, 4.0, 5.5]
}"""
    )
