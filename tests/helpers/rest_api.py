"""TF Serving's REST :predict conversion, ported from its documentation
(tensorflow_serving/g3doc/api_rest.md) and the code the model server runs
between HTTP and a signature (tensorflow_serving/util/json_tensor.cc):
a JSON body to the signature's named input tensors, its named outputs to
the JSON response. tests/test_rest_api.py checks the port against the
examples of TF Serving's own tests (json_tensor_test.cc) and documentation.

Requests: {"instances": [...]} (row format), a non-empty list with one
item per batch row: the value of the one named input, or an object naming
every input; or {"inputs": ...} (columnar), the value of the one input or
an object naming every input. "signature_name" is optional. A DT_STRING
value is a JSON string, or {"b64": "..."} for bytes; a float a number
(NaN and Infinity too) that the type holds without loss; an integer an
integer; nested lists are rectangular tensors.

Responses: {"predictions": [...]} to a row request, one item per batch
row, a value for one output and an object of all outputs for several;
{"outputs": ...} to a columnar one, the value of the one output or an
object of all. Strings are JSON strings, or {"b64": "..."} from an
output whose name ends in "_bytes"; floats are written with six
significant digits if those read back as the same value, else with
max_digits10 (9 for float32, 17 for double), a whole number with ".0";
NaN, Infinity, -Infinity. The model server indents the response over
several lines, its keys in no fixed order (a protobuf map's); this port
writes it on one line, keys sorted.

    python rest_api.py EXPORT_DIR '{"instances": ["A dog runs."]}'

prints the response body a model server would send.
"""

import base64
import binascii
import json
import math
import sys

import numpy as np
import tensorflow as tf


class RestError(ValueError):
    """A body the model server refuses (InvalidArgument, HTTP 400)."""


def _text(value):
    return json.dumps(value, ensure_ascii=False)


def _json_type(value):
    if value is None:
        return "Null"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, dict):
        return "Object"
    if isinstance(value, list):
        return "Array"
    return "String" if isinstance(value, str) else "Number"


def _is_b64(value):
    return (
        isinstance(value, dict)
        and list(value) == ["b64"]
        and isinstance(value["b64"], str)
    )


def _integer_within(value, low, high):
    return (
        isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
    )


def _lossless(value, float_type):
    """json_tensor.cc's IsLosslessDecimal: an integer (as rapidjson reads
    one: up to 64 bits) within the type's run of exact integers, any other
    number within its range."""
    if _integer_within(value, -(2**63), 2**64 - 1):
        return abs(value) <= 2 ** (np.finfo(float_type).nmant + 1) - 1
    return not math.isfinite(value) or abs(value) <= float(np.finfo(float_type).max)


_INTEGER_RANGES = {
    tf.int8: (-(2**31), 2**31 - 1),  # all read as int32, as TF Serving does
    tf.int16: (-(2**31), 2**31 - 1),
    tf.int32: (-(2**31), 2**31 - 1),
    tf.uint8: (-(2**31), 2**31 - 1),
    tf.int64: (-(2**63), 2**63 - 1),
    tf.uint32: (0, 2**32 - 1),
    tf.uint64: (0, 2**64 - 1),
}


def _type_error(value, dtype):
    return RestError(
        f"JSON Value: {_text(value)} Type: {_json_type(value)} is not of "
        f"expected type: {dtype.name}"
    )


def _scalar(value, dtype):
    """One JSON leaf as a value of `dtype` (json_tensor.cc's
    AddValueToTensor)."""
    mismatch = _type_error(value, dtype)
    if dtype in (tf.float32, tf.float64):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise mismatch
        if not _lossless(value, dtype.as_numpy_dtype):
            raise RestError(
                f"Cannot convert JSON value: {_text(value)} to {dtype.name} "
                "without loss of precision."
            )
        return float(value)
    if dtype in _INTEGER_RANGES:
        if not _integer_within(value, *_INTEGER_RANGES[dtype]):
            raise mismatch
        return value
    if dtype == tf.string:
        if not isinstance(value, str):
            raise mismatch
        return value.encode("utf-8", "surrogatepass")
    if dtype == tf.bool:
        if not isinstance(value, bool):
            raise mismatch
        return value
    raise RestError(f"Conversion of JSON Value: {_text(value)} to type: {dtype.name}")


def _dense_shape(value):
    """The shape a JSON value claims, read down its first elements."""
    shape = []
    while isinstance(value, list):
        shape.append(len(value))
        if not value:
            break
        value = value[0]
    return shape


def _fill(value, level, shape, dtype, values):
    """Appends the leaves of `value` at `level` of a tensor of `shape`
    to `values`, checking the nesting (json_tensor.cc's
    FillTensorProto)."""
    if not isinstance(value, list):
        if level != len(shape):
            raise RestError(
                f"JSON Value: {_text(value)} found at incorrect level: "
                f"{level + 1} in the JSON DOM. Expected at level: {len(shape)}"
            )
        if isinstance(value, dict):
            if dtype != tf.string:
                raise _type_error(value, dtype)
            values.append(_decoded_b64(value))
        else:
            values.append(_scalar(value, dtype))
        return
    if level >= len(shape):
        raise RestError(
            f"Encountered list at unexpected level: {level} expected < {len(shape)}"
        )
    if len(value) != shape[level]:
        raise RestError(
            f"Encountered list at unexpected size: {len(value)} at level: "
            f"{level} expected size: {shape[level]}"
        )
    for item in value:
        _fill(item, level + 1, shape, dtype, values)


def _decoded_b64(value):
    if not _is_b64(value):
        raise RestError(
            f"JSON Value: {_text(value)} not formatted correctly for base64 data"
        )
    try:
        return base64.b64decode(value["b64"], validate=True)
    except binascii.Error as error:
        raise RestError("Unable to base64 decode") from error


def _tensor_values(value, dtype):
    """(shape, flat values) of one JSON tensor."""
    shape = _dense_shape(value)
    values: list = []
    _fill(value, 0, shape, dtype, values)
    return shape, values


def _array(shape, values, dtype):
    numpy_type = object if dtype == tf.string else dtype.as_numpy_dtype
    array = np.empty(len(values), numpy_type)
    array[:] = values
    return array.reshape(shape)


def _row_tensors(instances, dtypes):
    if not isinstance(instances, list):
        raise RestError("Excepting 'instances' to be an list/array")
    if not instances:
        raise RestError("No values in 'instances' array")
    objects = isinstance(instances[0], dict) and not _is_b64(instances[0])
    if not objects and len(dtypes) > 1:
        raise RestError(
            "instances is a plain list, but expecting list of objects as "
            "multiple input tensors required as per tensorinfo_map"
        )
    shapes: dict[str, list[int]] = {}
    columns: dict[str, list] = {name: [] for name in dtypes}

    def add(item, name, where):
        """json_tensor.cc's AddInstanceItem: every row of an input has
        the first row's size and shape."""
        try:
            if name not in dtypes:
                raise RestError(f"JSON object: does not have named input: {name}")
            shape, values = _tensor_values(item, dtypes[name])
            if name in shapes and len(values) != math.prod(shapes[name]):
                raise RestError(
                    f"Expecting tensor size: {math.prod(shapes[name])} but "
                    f"got: {len(values)}"
                )
            if shapes.setdefault(name, shape) != shape:
                raise RestError(
                    f"Expecting shape {_shape_text(shapes[name])} but got: "
                    f"{_shape_text(shape)}"
                )
        except RestError as error:
            raise RestError(
                f"Failed to process element: {where} of 'instances' list. "
                f"Error: {error}"
            ) from error
        columns[name].extend(values)

    for number, item in enumerate(instances):
        is_object = isinstance(item, dict) and not _is_b64(item)
        if objects and not is_object:
            raise RestError(
                f"Expecting object but got list at item {number} of input list"
            )
        if not objects and is_object:
            raise RestError(
                f"Expecting value/list but got object at item {number} of input list"
            )
        if not objects:
            add(item, next(iter(dtypes)), number)
            continue
        for name, value in item.items():
            add(value, name, f"{number} key: {name}")
        if set(item) != set(dtypes):
            raise RestError(
                f"Failed to process element: {number} of 'instances' list. "
                f"JSON object: {_text(item)} keys must be equal to: "
                + ",".join(sorted(dtypes))
            )
    return {
        name: _array([len(instances), *shapes[name]], columns[name], dtypes[name])
        for name in dtypes
    }


def _shape_text(shape):
    return "[" + ",".join(str(size) for size in shape) + "]"


def _columnar_tensors(inputs, dtypes):
    if not isinstance(inputs, dict) or _is_b64(inputs):
        if len(dtypes) > 1:
            raise RestError(
                "inputs is a plain value/list, but expecting an object as "
                "multiple input tensors required as per tensorinfo_map"
            )
        inputs = {next(iter(dtypes)): inputs}
    tensors = {}
    for name, dtype in dtypes.items():
        if name not in inputs:
            raise RestError(f"Missing named input: {name} in 'inputs' object.")
        shape, values = _tensor_values(inputs[name], dtype)
        tensors[name] = _array(shape, values, dtype)
    return tensors


def request_tensors(body, signature_inputs):
    """(format, signature name, {input name: numpy array}) of a :predict
    JSON body (str) to a model whose signatures take `signature_inputs`
    ({signature name: {input name: tf.DType}}); format is "row" or
    "columnar". Raises RestError where the model server refuses the body,
    with its message."""
    if not body:
        raise RestError("JSON Parse error: The document is empty")
    try:
        document = json.loads(body)
    except json.JSONDecodeError as error:
        raise RestError(f"JSON Parse error: {error}") from error
    if not isinstance(document, dict):
        raise RestError(f"JSON Value: {_text(document)} Is not object")
    signature_name = document.get("signature_name", "serving_default")
    if not isinstance(signature_name, str):
        raise RestError(
            f"JSON Value: {_text(document)} not formatted correctly. "
            "'signature_name' key must be a string value."
        )
    if signature_name not in signature_inputs:
        raise RestError(
            f'Serving signature name: "{signature_name}" not found in signature def'
        )
    dtypes = signature_inputs[signature_name]
    if "instances" in document and "inputs" in document:
        raise RestError(
            f"JSON Value: {_text(document)} Not formatted correctly expecting "
            "only one of 'inputs' or 'instances' keys to exist "
        )
    if "instances" in document:
        return "row", signature_name, _row_tensors(document["instances"], dtypes)
    if "inputs" in document:
        return "columnar", signature_name, _columnar_tensors(document["inputs"], dtypes)
    raise RestError("Missing 'inputs' or 'instances' key")


# std::numeric_limits<T>::max_digits10.
_MAX_DIGITS = {np.float32: 9, np.float64: 17}


def float_text(value):
    """An np.float32 or np.float64 as the model server writes it
    (json_tensor.cc's WriteDecimal)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "-Infinity" if value < 0 else "Infinity"
    float_type = type(value)
    text = "%g" % value  # absl::StrCat's six significant digits
    if float_type(text) != value:
        text = "%.*g" % (_MAX_DIGITS[float_type], value)
    if "." not in text and "e" not in text:
        text += ".0"
    return text


_INTEGER_TYPES = (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32, np.uint64)


def _value_text(array, as_bytes):
    """A tensor's JSON, nested lists of its values (json_tensor.cc's
    AddTensorValues)."""
    if array.ndim:
        return (
            "["
            + ", ".join(_value_text(array[i, ...], as_bytes) for i in range(len(array)))
            + "]"
        )
    value = array[()]
    if array.dtype in (np.float16, np.float32):
        return float_text(np.float32(value))
    if array.dtype == np.float64:
        return float_text(np.float64(value))
    if array.dtype.type in _INTEGER_TYPES:
        return str(int(value))
    if array.dtype == np.bool_:
        return "true" if value else "false"
    if isinstance(value, bytes):
        if as_bytes:
            return _text({"b64": base64.b64encode(value).decode("ascii")})
        return _text(value.decode("utf-8"))
    raise RestError(
        f"Failed to write JSON value for tensor type: {tf.as_dtype(array.dtype).name}"
    )


def response_text(outputs, request_format):
    """The JSON response (str, on one line) to a `request_format` ("row"
    or "columnar") request whose signature returned `outputs` ({name:
    numpy array}, strings as bytes)."""
    if not outputs:
        raise RestError("Cannot convert empty tensor map to JSON")
    arrays = {name: np.asarray(outputs[name]) for name in sorted(outputs)}

    def field(name, array):
        text = _value_text(array, name.endswith("_bytes"))
        return text if len(arrays) == 1 else f"{_text(name)}: {text}"

    def joined(fields):
        return fields[0] if len(arrays) == 1 else "{" + ", ".join(fields) + "}"

    if request_format == "columnar":
        fields = [field(name, array) for name, array in arrays.items()]
        return '{"outputs": ' + joined(fields) + "}"
    batch = None
    for name, array in arrays.items():
        if not array.ndim:
            raise RestError(f"Tensor name: {name} has no shape information ")
        if batch is not None and len(array) != batch:
            raise RestError(
                f"Tensor name: {name} has inconsistent batch size: "
                f"{len(array)} expecting: {batch}"
            )
        batch = len(array)
    rows = [
        joined([field(name, array[row, ...]) for name, array in arrays.items()])
        for row in range(batch or 0)
    ]
    return '{"predictions": [' + ", ".join(rows) + "]}"


def predict(loaded, body):
    """The model server's response body (str) to a :predict JSON `body`
    sent to `loaded`, a `tf.saved_model.load`ed export."""
    specs = {
        name: signature.structured_input_signature[1]
        for name, signature in loaded.signatures.items()
    }
    request_format, signature_name, inputs = request_tensors(
        body,
        {
            name: {key: spec.dtype for key, spec in sorted(inputs.items())}
            for name, inputs in specs.items()
        },
    )
    outputs = loaded.signatures[signature_name](
        **{
            name: tf.constant(array, specs[signature_name][name].dtype)
            for name, array in inputs.items()
        }
    )
    return response_text(
        {name: value.numpy() for name, value in outputs.items()}, request_format
    )


if __name__ == "__main__":
    import tensorflow_text  # noqa: F401  registers the SentencePiece ops

    print(predict(tf.saved_model.load(sys.argv[1]), sys.argv[2]))
