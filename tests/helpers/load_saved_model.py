"""Translates with a SavedModel in a process that never imports t2t_repro.

    python load_saved_model.py tf2|tf1 EXPORT_PATH < sentences.json

tf2 uses tf.saved_model.load; tf1 restores it the way TF Serving's C++
loader does: variables by name into a tf.compat.v1 Session, then feeds and
fetches the serving_default tensors. Prints JSON: translations, scores and
the t2t_repro modules that got imported (must be none).
"""

import json
import sys

import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the SentencePiece ops


def load_tf2(path, sentences):
    serve = tf.saved_model.load(path).signatures["serving_default"]
    outputs = serve(inputs=tf.constant(sentences, tf.string, shape=[len(sentences)]))
    return {key: value.numpy() for key, value in outputs.items()}


def load_tf1(path, sentences):
    with tf.compat.v1.Session(graph=tf.Graph()) as session:
        meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
        signature = meta_graph.signature_def["serving_default"]
        fetches = {key: info.name for key, info in signature.outputs.items()}
        return session.run(fetches, {signature.inputs["inputs"].name: sentences})


def main(mode, path):
    sentences = json.load(sys.stdin)
    outputs = {"tf1": load_tf1, "tf2": load_tf2}[mode](path, sentences)
    print(
        json.dumps(
            {
                "translations": [t.decode("utf-8") for t in outputs["translations"]],
                "scores": [float(s) for s in outputs["scores"]],
                "truncated": [bool(t) for t in outputs["truncated"]],
                "t2t_modules": sorted(
                    m for m in sys.modules if m.startswith("t2t_repro")
                ),
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
