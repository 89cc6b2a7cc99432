"""TF Serving's REST :predict contract, for a signature of named tensors:
the JSON body is turned into a PredictRequest (tensors made with
tf.make_tensor_proto, as the model server fills them), the signature runs
on the request's tensors, and its outputs are written back as the server
writes them (see TF Serving's REST API documentation): the row format,
{"instances": [...]} -> {"predictions": [...]}, and the columnar one,
{"inputs": ...} -> {"outputs": ...}.

    python rest_api.py EXPORT_DIR '{"instances": ["A dog runs."]}'

prints the response body a model server would send.
"""

import json
import sys

import numpy as np
import tensorflow as tf


def predict_request(body, input_names):
    """A PredictRequest from a :predict JSON body (str)."""
    from tensorflow_serving.apis import model_pb2, predict_pb2

    body = json.loads(body)
    if ("instances" in body) == ("inputs" in body):
        raise ValueError("a body has exactly one of 'instances' and 'inputs'")
    if "instances" in body:
        instances = body["instances"]
        if len(input_names) == 1 and not all(isinstance(i, dict) for i in instances):
            columns = {input_names[0]: instances}
        else:
            columns = {name: [i[name] for i in instances] for name in input_names}
    else:
        inputs = body["inputs"]
        columns = inputs if isinstance(inputs, dict) else {input_names[0]: inputs}
    request = predict_pb2.PredictRequest(
        model_spec=model_pb2.ModelSpec(
            signature_name=body.get("signature_name", "serving_default")
        )
    )
    for name, values in columns.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(values))
    return request


def _json_value(array):
    array = np.asarray(array)
    if array.dtype.kind in "OS":  # DT_STRING
        return np.vectorize(lambda b: b.decode("utf-8"), otypes=[object])(
            array.astype(object)
        ).tolist()
    return array.tolist()


def predict(signature, body):
    """The response body (a dict) of `signature` to a :predict JSON body."""
    request = predict_request(body, sorted(signature.structured_input_signature[1]))
    outputs = signature(
        **{
            name: tf.constant(tf.make_ndarray(proto))
            for name, proto in request.inputs.items()
        }
    )
    # As the server: through the response's TensorProtos.
    arrays = {
        name: tf.make_ndarray(tf.make_tensor_proto(value.numpy()))
        for name, value in outputs.items()
    }
    if "instances" in json.loads(body):
        rows = len(next(iter(arrays.values())))
        return {
            "predictions": [
                {name: _json_value(array[i]) for name, array in sorted(arrays.items())}
                for i in range(rows)
            ]
        }
    return {
        "outputs": {name: _json_value(array) for name, array in sorted(arrays.items())}
    }


if __name__ == "__main__":
    import tensorflow_text  # noqa: F401  registers the SentencePiece ops

    serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
    print(json.dumps(predict(serve, sys.argv[2]), ensure_ascii=False))
