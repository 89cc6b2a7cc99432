"""Batched translation of sentences with a compiled decoder."""

import sys

import numpy as np
import tensorflow as tf

from t2t_repro.config import PAD_ID, DecodingOptions
from t2t_repro.data.pipeline import bucket_boundaries
from t2t_repro.data.vocabulary import tokenize_sources
from t2t_repro.decoding.decoders import best_translation_fn


def progress_line(done, total):
    print(f"\rtranslated {done}/{total}", end="" if done < total else "\n",
          file=sys.stderr, flush=True)


def batches_by_length(lengths, batch_tokens, padded_length=lambda n: n):
    """Index lists of items of similar length, longest first, each holding
    at most `batch_tokens` padded tokens (or a single item)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batch, width = [], 0
    for index in order:
        if batch and (len(batch) + 1) * width > batch_tokens:
            yield batch
            batch = []
        if not batch:
            width = padded_length(lengths[index])
        batch.append(index)
    if batch:
        yield batch


class Translator:
    """Tokenizes, batches by length, decodes in a graph, detokenizes.

    Batches are padded to the training buckets' lengths so that an XLA
    decoder compiles a handful of shapes; outputs come back in input order.

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
        self.model = model
        self.tokenizer = tokenizer
        self.batch_tokens = decoding.batch_tokens
        self.boundaries = bucket_boundaries(model.config.max_length)
        decode = best_translation_fn(decoding.beam_size, decoding.alpha)
        # `(ids [batch, length], scores [batch])` of padded source ids.
        self.decode_ids = tf.function(
            lambda ids: decode(model, ids), jit_compile=decoding.jit_compile,
            input_signature=[tf.TensorSpec([None, None], tf.int32)])

    def _padded_length(self, length):
        return next(b for b in self.boundaries if b >= length)

    def translate_with_scores(self, sentences, progress=False):
        """(translations, scores) of `sentences` (a list of str), in order.

        A score is log P(translation) / length_penalty.
        """
        if not sentences:
            return [], []
        source_ids = tokenize_sources(
            self.tokenizer, tf.constant(list(sentences), tf.string),
            self.model.config.max_length).numpy()
        lengths = np.sum(source_ids != PAD_ID, axis=1)
        translations = [None] * len(sentences)
        scores = [None] * len(sentences)
        done = 0
        for batch in batches_by_length(lengths, self.batch_tokens,
                                           self._padded_length):
            width = self._padded_length(lengths[batch[0]])
            padded = np.full([len(batch), width], PAD_ID, np.int32)
            kept = min(width, source_ids.shape[1])
            padded[:, :kept] = source_ids[batch, :kept]
            output, batch_scores = self.decode_ids(tf.constant(padded))
            texts = self.tokenizer.detokenize(
                tf.RaggedTensor.from_tensor(output, padding=PAD_ID)).numpy()
            for index, text, score in zip(batch, texts, batch_scores.numpy()):
                translations[index] = text.decode("utf-8")
                scores[index] = float(score)
            done += len(batch)
            if progress:
                progress_line(done, len(sentences))
        return translations, scores

    def translate(self, sentences, progress=False):
        """Translations of `sentences` (a list of str), in the same order."""
        return self.translate_with_scores(sentences, progress)[0]
