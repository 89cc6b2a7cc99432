"""Sentences processed in batches of similar length and their results put
back in input order: the loop every translator (and `Scorer`) runs, and
`BatchingTranslator`, the base of the translators the tools use
(translators.py, ct2.py).

A batch holds sentences of similar word count + EOS, which is close enough
to the subword count to size batches and needs no tokenizer: padding
costs little, and a batch of long sentences holds fewer of them.
"""

import tensorflow as tf
from absl import logging

from t2t_repro.progress import Progress


def batches_by_length(lengths, batch_tokens, max_sentences, sizes=None, max_bytes=None):
    """Index lists of items of similar length, longest first, each holding
    at most `max_sentences` items and `batch_tokens` tokens of its longest
    item's length (or a single item), and, given `sizes` (each item's
    bytes), at most `max_bytes` bytes (an export's max_request_bytes,
    which refuses a larger request).

    >>> list(batches_by_length([3, 9, 4, 8], batch_tokens=20, max_sentences=8))
    [[1, 3], [2, 0]]
    >>> list(batches_by_length([3, 9, 4, 8], 20, 8, sizes=[5] * 4, max_bytes=5))
    [[1], [3], [2], [0]]
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batch, width, size = [], 0, 0
    for index in order:
        if batch and (
            (len(batch) + 1) * width > batch_tokens
            or len(batch) == max_sentences
            or (max_bytes is not None and size + sizes[index] > max_bytes)
        ):
            yield batch
            batch, size = [], 0
        if not batch:
            width = lengths[index]
        batch.append(index)
        if max_bytes is not None:
            size += sizes[index]
    if batch:
        yield batch


def utf8_size(text):
    """The UTF-8 bytes of `text` (str or bytes), as an export counts them."""
    return len(text.encode() if isinstance(text, str) else text)


def in_order_by_length(
    lengths, batch_tokens, max_sentences, process, progress=None, **byte_limit
):
    """(results, truncated) of `process(indices)` run on batches of items
    of similar `lengths` (`batches_by_length`, which `byte_limit`, its
    `sizes` and `max_bytes`, go to), which returns one result
    per index and how many of its items were truncated: the results in
    index order and the total truncated. Advances `progress` (a
    `Progress`) per batch."""
    results = [None] * len(lengths)
    truncated = 0
    for batch in batches_by_length(lengths, batch_tokens, max_sentences, **byte_limit):
        batch_results, batch_truncated = process(batch)
        for index, result in zip(batch, batch_results):
            results[index] = result
        truncated += batch_truncated
        if progress is not None:
            progress.update(len(batch))
    return results, truncated


def count_true(flags):
    """How many of a bool tensor's elements are True, as an int."""
    return int(tf.reduce_sum(tf.cast(flags, tf.int32)))


def n_best_in_order(
    translate_batch, sentences, batch_tokens, max_sentences, progress, max_bytes=None
):
    """(results, truncated) of `sentences` (a list of str) translated in
    batches of similar length, of at most `max_bytes` bytes (None: any),
    by `translate_batch`, which takes a `tf.string` batch and returns
    (translations, scores) `[batch, k]` and truncated `[batch]` tensors:
    per sentence, in order, its k (translation, score) pairs, and how many
    inputs were truncated."""

    def process(batch):
        texts, scores, truncated = translate_batch(
            tf.constant([sentences[i] for i in batch], tf.string)
        )
        return (
            [
                [
                    (text.decode("utf-8"), float(score))
                    for text, score in zip(row_texts, row_scores)
                ]
                for row_texts, row_scores in zip(texts.numpy(), scores.numpy())
            ],
            count_true(truncated),
        )

    return in_order_by_length(
        [len(s.split()) + 1 for s in sentences],
        batch_tokens,
        max_sentences,
        process,
        progress,
        sizes=None if max_bytes is None else [utf8_size(s) for s in sentences],
        max_bytes=max_bytes,
    )


def signature_n_best(translate, sentences, beam_size, alpha, n_best):
    """(translations, scores) `[batch, n_best]` and truncated `[batch]`
    tensors of a `tf.string` batch from a `translate` signature (see
    `TranslationGraph`), of a graph in memory or of an export."""
    outputs = translate(
        inputs=sentences,
        beam_size=tf.constant(beam_size, tf.int32),
        alpha=tf.constant(alpha, tf.float32),
    )
    return (
        outputs["translations"][:, :n_best],
        outputs["scores"][:, :n_best],
        outputs["truncated"],
    )


def warn_truncated(
    count, total, what="inputs", consequence="their translations cover only the start"
):
    if count:
        logging.warning(
            "%d of %d %s had more subword tokens than the "
            "model's max_length and were truncated (%s)",
            count,
            total,
            what,
            consequence,
        )


class BatchingTranslator:
    """Translates a list of sentences in batches of similar length with
    the decoder of `decoding` (`DecodingOptions`) and returns the results
    in input order. Subclasses translate one batch."""

    # The most UTF-8 bytes of one input, and of one batch's inputs, a
    # translator takes (an export's limits); None: any.
    max_sentence_bytes = None
    max_request_bytes = None

    def __init__(self, decoding):
        self.decoding = decoding

    def _translate_batch(self, sentences):
        """(translations, scores, truncated) tensors of a `tf.string`
        batch (see `TranslationGraph`)."""
        raise NotImplementedError

    def _n_best_batch(self, sentences, n_best):
        """(translations, scores) `[batch, n_best]` and truncated `[batch]`
        tensors of a `tf.string` batch; not every translator has them
        (CTranslate2Translator has not)."""
        raise NotImplementedError

    def _max_batch_sentences(self):
        return self.decoding.max_batch_sentences

    def translate_n_best(self, sentences, n_best=1, progress=None):
        """(results, truncated) of `sentences` (a list of str): per
        sentence, in order, its `n_best` (at most the beam size) best
        (translation, score) pairs, best first, a score being
        log P(translation) / length_penalty; and how many inputs were
        longer than the model's max_length and cut (keeping EOS). With
        `n_best` 1, the decoder of `DecodingOptions` (XLA, greedy for beam
        size 1) runs. Advances `progress`, a `Progress`, per batch."""

        def translate_batch(inputs):
            if n_best > 1:
                return self._n_best_batch(inputs, n_best)
            texts, scores, truncated = self._translate_batch(inputs)
            return texts[:, tf.newaxis], scores[:, tf.newaxis], truncated

        return n_best_in_order(
            translate_batch,
            sentences,
            self.decoding.batch_tokens,
            self._max_batch_sentences(),
            progress,
            self.max_request_bytes,
        )

    def translate_with_scores(self, sentences, progress=False):
        """(translations, scores) of `sentences` (a list of str), in order.

        A score is log P(translation) / length_penalty. Inputs longer than
        the model's max_length are cut (keeping EOS); how many is logged.
        """
        results, truncated = self.translate_n_best(
            sentences, progress=Progress(len(sentences)) if progress else None
        )
        warn_truncated(truncated, len(sentences))
        best = [n_best[0] for n_best in results]
        return [text for text, _ in best], [score for _, score in best]

    def translate(self, sentences, progress=False):
        """Translations of `sentences` (a list of str), in the same order."""
        return self.translate_with_scores(sentences, progress)[0]
