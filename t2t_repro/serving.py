"""A `tf.Module` that translates strings: what the SavedModel serves."""

import os

import tensorflow as tf
from absl import logging

from t2t_repro.config import PAD_ID, DecodingOptions
from t2t_repro.data.pipeline import bucket_boundaries
from t2t_repro.data.vocabulary import make_tokenizer, tokenize_sources
from t2t_repro.decoding.decoders import (best_translation_fn,
                                        n_best_translations)
from t2t_repro.checkpoints import RunDir, checkpoint_step

# serving_default is not XLA-compiled unless asked: TF Serving runs XLA
# only with --xla_cpu_compilation_enabled=true.
SERVING_DECODING = DecodingOptions(jit_compile=False)


class TranslationModule(tf.Module):
    """Strings in, strings out, everything in one graph.

    Signatures (see `signatures`):
        serving_default: `inputs` tf.string `[batch]` -> `translations`
            tf.string `[batch]`, `scores` float32 `[batch]` (log P / length
            penalty), with the export's beam size and alpha.
        translate: `inputs` `[batch]`, `beam_size` int32 scalar, `alpha`
            float32 scalar -> `translations` `[batch, beam_size]`, `scores`
            `[batch, beam_size]`, n-best, best first. Never XLA-compiled:
            its shapes depend on the request's beam size.

    Args:
        model: a trained `Transformer`.
        vocab_proto: the run's serialized SentencePiece model.
        decoding: `DecodingOptions` of serving_default's decoder (beam 1 =
            greedy); with `jit_compile`, TF Serving needs
            `--xla_cpu_compilation_enabled=true`.
    """

    def __init__(self, model, vocab_proto, decoding=SERVING_DECODING):
        super().__init__(name="translation")
        # Only the model's variables are tracked, not the Keras model: saving
        # it would trace Keras' default float32 signature, which cannot call
        # a model of token ids. Keras 3 variables are not tf.Variables; the
        # backing ones are, and get names the TF1 loader (TF Serving,
        # saved_model_cli) restores.
        self.model_variables = [v.value for v in model.variables]
        self.max_length = model.config.max_length
        self.tokenizer = make_tokenizer(vocab_proto)
        self.boundaries = tf.constant(bucket_boundaries(self.max_length),
                                      tf.int32)
        best = best_translation_fn(decoding.beam_size, decoding.alpha)
        self._best = tf.function(lambda ids: best(model, ids),
                                 jit_compile=decoding.jit_compile)
        self._n_best = tf.function(
            lambda ids, k, a: n_best_translations(model, ids, k, a))

    def _source_ids(self, inputs):
        """Tokenized and padded to a training bucket's length: an XLA
        decoder then compiles a few shapes, not one per input length."""
        ids = tokenize_sources(self.tokenizer, inputs, self.max_length)
        width = tf.shape(ids)[1]
        bucket = tf.gather(self.boundaries, tf.reduce_min(
            tf.where(self.boundaries >= width)))
        return tf.pad(ids, [[0, 0], [0, bucket - width]],
                      constant_values=PAD_ID)

    def _detokenize(self, ids):
        return self.tokenizer.detokenize(
            tf.RaggedTensor.from_tensor(ids, padding=PAD_ID))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string,
                                                name="inputs")])
    def serve(self, inputs):
        ids, scores = self._best(self._source_ids(inputs))
        return {"translations": self._detokenize(ids), "scores": scores}

    @tf.function(input_signature=[
        tf.TensorSpec([None], tf.string, name="inputs"),
        tf.TensorSpec([], tf.int32, name="beam_size"),
        tf.TensorSpec([], tf.float32, name="alpha")])
    def translate(self, inputs, beam_size, alpha):
        with tf.control_dependencies([
                tf.debugging.assert_positive(
                    beam_size, message="beam_size must be >= 1"),
                tf.debugging.assert_non_negative(
                    alpha, message="alpha must be >= 0")]):
            ids, scores = self._n_best(self._source_ids(inputs), beam_size,
                                       alpha)
        batch = tf.shape(ids)[0]
        texts = self._detokenize(tf.reshape(ids, [batch * beam_size, -1]))
        return {"translations": tf.reshape(texts, [batch, beam_size]),
                "scores": scores}

    def signatures(self):
        return {"serving_default": self.serve, "translate": self.translate}


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
    module = TranslationModule(model, proto, decoding)
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
