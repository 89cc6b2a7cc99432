"""Batched translation of sentences with a compiled decoder."""

import sys

import numpy as np
import tensorflow as tf

from t2t_repro.config import PAD_ID
from t2t_repro.data.pipeline import bucket_boundaries
from t2t_repro.decoding.greedy import greedy_decode


class Translator:
    """Tokenizes, batches by length, decodes in a graph, detokenizes.

    Batches are padded to the training buckets' lengths so that an XLA
    decoder compiles a handful of shapes; outputs come back in input order.

    Args:
        model: a `Transformer`.
        tokenizer: the run's `tensorflow_text.SentencepieceTokenizer`.
        decode_fn: `fn(model, source_ids) -> (ids [batch, length], ...)`.
        batch_tokens: source tokens per decoding batch.
        jit_compile: compile the decoder with XLA.
    """

    def __init__(self, model, tokenizer, decode_fn=greedy_decode,
                 batch_tokens=4096, jit_compile=False):
        self.model = model
        self.tokenizer = tokenizer
        self.batch_tokens = batch_tokens
        self.boundaries = bucket_boundaries(model.config.max_length)
        self._decode = tf.function(
            lambda ids: decode_fn(model, ids)[0], jit_compile=jit_compile,
            input_signature=[tf.TensorSpec([None, None], tf.int32)])

    def _source_ids(self, sentences):
        ids = self.tokenizer.tokenize(tf.constant(sentences, tf.string))
        max_length = self.model.config.max_length
        # Over-long inputs keep their first max_length - 1 pieces and EOS.
        return [np.concatenate([row[:max_length - 1], row[-1:]])
                if len(row) > max_length else row
                for row in ids.to_list()]

    def _batches(self, source_ids):
        """Index lists of sentences of similar length, longest first."""
        order = sorted(range(len(source_ids)),
                       key=lambda i: -len(source_ids[i]))
        batch, width = [], 0
        for index in order:
            if batch and (len(batch) + 1) * width > self.batch_tokens:
                yield batch
                batch = []
            if not batch:
                width = self._padded_length(len(source_ids[index]))
            batch.append(index)
        if batch:
            yield batch

    def _padded_length(self, length):
        return next(b for b in self.boundaries if b >= length)

    def translate(self, sentences, progress=False):
        """Translations of `sentences` (a list of str), in the same order."""
        if not sentences:
            return []
        source_ids = self._source_ids(list(sentences))
        results = [None] * len(sentences)
        done = 0
        for batch in self._batches(source_ids):
            width = self._padded_length(max(len(source_ids[i])
                                            for i in batch))
            padded = np.full([len(batch), width], PAD_ID, np.int32)
            for row, index in enumerate(batch):
                padded[row, :len(source_ids[index])] = source_ids[index]
            output = self._decode(tf.constant(padded))
            ragged = tf.RaggedTensor.from_tensor(output, padding=PAD_ID)
            texts = self.tokenizer.detokenize(ragged).numpy()
            for index, text in zip(batch, texts):
                results[index] = text.decode("utf-8")
            done += len(batch)
            if progress:
                print(f"\rtranslated {done}/{len(sentences)}", end="",
                      file=sys.stderr, flush=True)
        if progress:
            print(file=sys.stderr)
        return results
