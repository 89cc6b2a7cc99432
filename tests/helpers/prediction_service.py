"""A stand-in for TF Serving's gRPC PredictionService.Predict over one
loaded export, for testing gRPC clients: what the model server does
between the wire and a signature (tensorflow_serving/servables/
tensorflow/predict_util.cc), in Python. The request's model name must be
the served one (else NOT_FOUND, as the server answers a model it does not
serve); an empty signature name is `serving_default`; the inputs must be
exactly the signature's, each converted with `tf.make_ndarray`; the
outputs are those `output_filter` names (each once, each the
signature's), or all when it names none, each answered with
`tf.make_tensor_proto`. A signature's InvalidArgument (a request over
the export's limits) is the call's INVALID_ARGUMENT. Stricter than the
server in one way: a tensor of the wrong dtype or rank is refused before
the signature runs (the server feeds it to its session, which fails).
"""

import contextlib
from concurrent import futures

import grpc
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc


class _PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
    def __init__(self, model_name, export):
        self._model_name = model_name
        self._export = export

    def Predict(self, request, context):
        if request.model_spec.name != self._model_name:
            context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"Servable not found for request: Latest({request.model_spec.name})",
            )
        name = request.model_spec.signature_name or "serving_default"
        if name not in self._export.signatures:
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f'Serving signature key "{name}" not found.',
            )
        signature = self._export.signatures[name]
        expected = set(signature.structured_input_signature[1])
        if set(request.inputs) != expected:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"input names {sorted(request.inputs)} are not the signature's "
                f"{sorted(expected)}",
            )
        inputs = {
            key: tf.constant(tf.make_ndarray(tensor))
            for key, tensor in request.inputs.items()
        }
        try:
            outputs = signature(**inputs)
        except (tf.errors.InvalidArgumentError, TypeError, ValueError) as error:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        wanted = list(request.output_filter) or list(outputs)
        if len(set(wanted)) != len(wanted) or not set(wanted) <= set(outputs):
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"output_filter {wanted} names an output twice or one the "
                f"signature does not have ({sorted(outputs)})",
            )
        response = predict_pb2.PredictResponse()
        response.model_spec.CopyFrom(request.model_spec)
        response.model_spec.signature_name = name
        for key in wanted:
            response.outputs[key].CopyFrom(tf.make_tensor_proto(outputs[key].numpy()))
        return response


@contextlib.contextmanager
def serving(model_name, export_path):
    """Serves the export at `export_path` as `model_name` on a free local
    port; yields the address ("127.0.0.1:PORT")."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
        _PredictionService(model_name, tf.saved_model.load(export_path)), server
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(grace=None)
