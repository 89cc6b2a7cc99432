"""One translation graph, strings in and strings out, for every caller.

`TranslationGraph` tokenizes with tensorflow-text, pads to a training
bucket's length, decodes and detokenizes, all in TensorFlow: the SavedModel
serves exactly this module (serving.py), and `Translator` runs the same one
in-process (t2t-eval, t2t-translate, dev BLEU, t2t-attention).
`SavedModelTranslator` runs an exported one. Both translators share the
loop that batches sentences by length and restores their order.
"""

import sys

import tensorflow as tf
from absl import logging

from t2t_repro.config import PAD_ID, DecodingOptions
from t2t_repro.data.pipeline import bucket_boundaries
from t2t_repro.data.vocabulary import tokenize_sources
from t2t_repro.decoding.decoders import (best_translation_fn,
                                         n_best_translations)


class TranslationGraph(tf.Module):
    """Strings in, strings out, everything in one graph.

    Signatures (see `signatures`):
        serving_default: `inputs` tf.string `[batch]` -> `translations`
            tf.string `[batch]`, `scores` float32 `[batch]` (log P / length
            penalty), `truncated` bool `[batch]` (the input had more than
            max_length subword tokens and was cut; also printed to the
            server's log), with `decoding`'s beam size and alpha.
        translate: `inputs` `[batch]`, `beam_size` int32 scalar, `alpha`
            float32 scalar -> `translations` `[batch, beam_size]`, `scores`
            `[batch, beam_size]`, n-best, best first, and `truncated`
            `[batch]`. Never XLA-compiled: its shapes depend on the
            request's beam size.
    Both refuse (InvalidArgument) a batch of more than
    `decoding.max_batch_sentences` inputs: a request's memory is bounded.

    Args:
        model: a trained `Transformer`.
        tokenizer: the run's tensorflow-text SentencePiece tokenizer.
        decoding: `DecodingOptions` of serving_default's decoder (beam 1 =
            greedy); with `jit_compile`, a SavedModel needs TF Serving's
            `--xla_cpu_compilation_enabled=true`.
    """

    def __init__(self, model, tokenizer, decoding):
        super().__init__(name="translation")
        # Only the model's variables are tracked, not the Keras model: saving
        # it would trace Keras' default float32 signature, which cannot call
        # a model of token ids. Keras 3 variables are not tf.Variables; the
        # backing ones are, and get names the TF1 loader (TF Serving,
        # saved_model_cli) restores.
        self.model_variables = [v.value for v in model.variables]
        self.max_length = model.config.max_length
        self.tokenizer = tokenizer
        self.boundaries = tf.constant(bucket_boundaries(self.max_length),
                                      tf.int32)
        # A variable, so that SavedModelTranslator can read it back.
        self.max_batch_sentences = tf.Variable(
            decoding.max_batch_sentences, trainable=False,
            name="max_batch_sentences")
        # `(ids [batch, length], scores [batch])` of bucket-padded ids.
        self.decode_ids = tf.function(best_translation_fn(model, decoding))
        self._n_best = tf.function(
            lambda ids, k, a: n_best_translations(model, ids, k, a,
                                                  decoding))

    def source_ids(self, inputs):
        """(ids, truncated) of a request: tokenized and padded to a training
        bucket's length (an XLA decoder then compiles a few shapes, not one
        per input length), and which inputs were cut to max_length."""
        tf.debugging.assert_less_equal(
            tf.size(inputs), self.max_batch_sentences,
            message="too many sentences in one request; split it")
        ids, truncated = tokenize_sources(self.tokenizer, inputs,
                                          self.max_length)
        width = tf.shape(ids)[1]
        bucket = tf.gather(self.boundaries, tf.reduce_min(
            tf.where(self.boundaries >= width)))
        return tf.pad(ids, [[0, 0], [0, bucket - width]],
                      constant_values=PAD_ID), truncated

    def _detokenize(self, ids):
        return self.tokenizer.detokenize(
            tf.RaggedTensor.from_tensor(ids, padding=PAD_ID))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string,
                                                name="inputs")])
    def serve(self, inputs):
        source, truncated = self.source_ids(inputs)
        cut = tf.reduce_sum(tf.cast(truncated, tf.int32))
        if cut > 0:
            tf.print("t2t_repro:", cut, "of", tf.size(inputs), "inputs had "
                     "more than", self.max_length, "subword tokens and were "
                     "truncated", output_stream=sys.stderr)
        ids, scores = self.decode_ids(source)
        return {"translations": self._detokenize(ids), "scores": scores,
                "truncated": truncated}

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
            source, truncated = self.source_ids(inputs)
            ids, scores = self._n_best(source, beam_size, alpha)
        batch = tf.shape(ids)[0]
        texts = self._detokenize(tf.reshape(ids, [batch * beam_size, -1]))
        return {"translations": tf.reshape(texts, [batch, beam_size]),
                "scores": scores, "truncated": truncated}

    def signatures(self):
        return {"serving_default": self.serve, "translate": self.translate}


def progress_line(done, total):
    print(f"\rtranslated {done}/{total}", end="" if done < total else "\n",
          file=sys.stderr, flush=True)


def batches_by_length(lengths, batch_tokens, max_sentences):
    """Index lists of items of similar length, longest first, each holding
    at most `max_sentences` items and `batch_tokens` tokens of its longest
    item's length (or a single item)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batch, width = [], 0
    for index in order:
        if batch and ((len(batch) + 1) * width > batch_tokens or
                      len(batch) == max_sentences):
            yield batch
            batch = []
        if not batch:
            width = lengths[index]
        batch.append(index)
    if batch:
        yield batch


class _BatchingTranslator:
    """Translates a list of sentences in batches of similar length (by
    word count + EOS, close enough to the subword count to size batches)
    and returns the results in input order."""

    def __init__(self, decoding):
        self.decoding = decoding

    def _translate_batch(self, sentences):
        """(translations, scores, truncated) tensors of a `tf.string`
        batch (see `TranslationGraph`)."""
        raise NotImplementedError

    def _max_batch_sentences(self):
        return self.decoding.max_batch_sentences

    def translate_with_scores(self, sentences, progress=False):
        """(translations, scores) of `sentences` (a list of str), in order.

        A score is log P(translation) / length_penalty. Inputs longer than
        the model's max_length are cut (keeping EOS); how many is logged.
        """
        lengths = [len(s.split()) + 1 for s in sentences]
        translations = [None] * len(sentences)
        scores = [None] * len(sentences)
        done = truncated = 0
        for batch in batches_by_length(lengths, self.decoding.batch_tokens,
                                       self._max_batch_sentences()):
            texts, batch_scores, batch_truncated = self._translate_batch(
                tf.constant([sentences[i] for i in batch], tf.string))
            for index, text, score in zip(batch, texts.numpy(),
                                          batch_scores.numpy()):
                translations[index] = text.decode("utf-8")
                scores[index] = float(score)
            truncated += int(tf.reduce_sum(tf.cast(batch_truncated,
                                                   tf.int32)))
            done += len(batch)
            if progress:
                progress_line(done, len(sentences))
        if truncated:
            logging.warning("%d of %d inputs had more subword tokens than "
                            "the model's max_length and were truncated "
                            "(their translations cover only the start)",
                            truncated, len(sentences))
        return translations, scores

    def translate(self, sentences, progress=False):
        """Translations of `sentences` (a list of str), in the same order."""
        return self.translate_with_scores(sentences, progress)[0]


class Translator(_BatchingTranslator):
    """Translates with a model in this process, through `TranslationGraph`.

    Args:
        model: a `Transformer`.
        tokenizer: the run's `tensorflow_text.SentencepieceTokenizer`.
        decoding: `DecodingOptions` (beam size, alpha, batch size, XLA).

    Usage, with a trained run (see `checkpoints.RunDir.load_model`)::

        model, proto, _ = RunDir("runs/multi30k").load_model()
        Translator(model, make_tokenizer(proto)).translate(["A dog runs."])
        # -> ['Ein Hund rennt.']
    """

    def __init__(self, model, tokenizer, decoding=DecodingOptions()):
        super().__init__(decoding)
        self.model = model
        self.tokenizer = tokenizer
        self.graph = TranslationGraph(model, tokenizer, decoding)

    def _translate_batch(self, sentences):
        outputs = self.graph.serve(sentences)
        return (outputs["translations"], outputs["scores"],
                outputs["truncated"])


class SavedModelTranslator(_BatchingTranslator):
    """Translates with an exported SavedModel's `translate` signature."""

    def __init__(self, path, decoding=DecodingOptions()):
        import tensorflow_text  # noqa: F401  registers the SentencePiece ops

        super().__init__(decoding)
        if not tf.saved_model.contains_saved_model(path):
            raise FileNotFoundError(f"{path}: no SavedModel there (no "
                                    "saved_model.pb)")
        loaded = tf.saved_model.load(path)
        self._signature = loaded.signatures["translate"]
        # Exports older than the request cap have none.
        cap = getattr(loaded, "max_batch_sentences", None)
        self._export_cap = None if cap is None else int(cap.numpy())

    def _max_batch_sentences(self):
        return min(filter(None, [self.decoding.max_batch_sentences,
                                 self._export_cap]))

    def _translate_batch(self, sentences):
        outputs = self._signature(
            inputs=sentences, beam_size=tf.constant(self.decoding.beam_size),
            alpha=tf.constant(self.decoding.alpha, tf.float32))
        # Exports older than the `truncated` output: nothing reported.
        truncated = outputs.get("truncated", tf.zeros([0], tf.bool))
        return (outputs["translations"][:, 0], outputs["scores"][:, 0],
                truncated)
