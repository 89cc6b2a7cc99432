"""Exporting a run as a SavedModel for TF Serving: the translation graph
of inference.py, strings in and strings out, in TF Serving's layout."""

import os

import tensorflow as tf
from absl import logging

from t2t_repro.checkpoints import RunDir, checkpoint_step
from t2t_repro.config import DecodingOptions
from t2t_repro.data.vocabulary import make_tokenizer
from t2t_repro.inference import TranslationGraph

# serving_default is not XLA-compiled unless asked: TF Serving runs XLA
# only with --xla_cpu_compilation_enabled=true.
SERVING_DECODING = DecodingOptions(jit_compile=False)


def export_saved_model(model_dir, export_dir, version=None, checkpoint=None,
                       decoding=SERVING_DECODING):
    """Writes `export_dir/<version>/` and returns its path."""
    model, proto, checkpoint = RunDir(model_dir).load_model(checkpoint)
    if version is None:
        version = checkpoint_step(checkpoint)
    path = os.path.join(export_dir, str(version))
    if tf.io.gfile.exists(path):
        raise FileExistsError(f"{path} exists; TF Serving versions are "
                              "immutable, give another --version")
    module = TranslationGraph(model, make_tokenizer(proto), decoding)
    # TF Serving polls export_dir and loads any new numeric directory: write
    # under a name it ignores, then rename, so it never sees half a model.
    partial = os.path.join(export_dir, f".{version}.partial")
    if tf.io.gfile.exists(partial):
        tf.io.gfile.rmtree(partial)
    tf.saved_model.save(module, partial, signatures=module.signatures())
    tf.io.gfile.rename(partial, path)
    logging.info("exported %s (beam %d, alpha %g%s) to %s", checkpoint,
                 decoding.beam_size, decoding.alpha,
                 ", XLA" if decoding.jit_compile else "", path)
    return path
