"""`Scorer`: how likely a model finds given translations (t2t-score), in
batches of similar length through a `TranslationGraph`'s `score`
signature, of a model in this process or of an export."""

from typing import NamedTuple

import tensorflow as tf

from t2t_repro.config import DecodingOptions
from t2t_repro.inference.batching import count_true, in_order_by_length, utf8_size
from t2t_repro.inference.exports import (
    check_export_limits,
    load_export,
    request_byte_limit,
)
from t2t_repro.inference.graph import TranslationGraph


class PairScore(NamedTuple):
    """How likely a model finds a given translation (see
    `TranslationGraph.score`)."""

    log_prob: float  # log P(target | source), EOS included
    target_tokens: int  # subword tokens of the target, EOS included
    per_token: float  # log_prob / target_tokens
    score: float  # log_prob / ((5 + target_tokens) / 6) ** alpha


class Scorer:
    """Scores (source, target) pairs in batches of similar length, in
    order, through a `TranslationGraph`'s `score` function.

    Args:
        graph: a `TranslationGraph`, or one loaded from a SavedModel.
        decoding: `DecodingOptions`: alpha and batch sizes. A batch holds
            at most `batch_tokens` tokens of its longest side (by word
            count + EOS, as translation batches).
    """

    def __init__(self, graph, decoding=DecodingOptions()):
        self.graph = graph
        self.decoding = decoding
        self.max_batch_sentences = min(
            decoding.max_batch_sentences, int(graph.max_batch_sentences.numpy())
        )
        # Of sources and targets together.
        self.max_request_bytes = request_byte_limit(graph)

    @classmethod
    def from_model(cls, model, tokenizer, decoding=DecodingOptions()):
        return cls(TranslationGraph(model, tokenizer, decoding), decoding)

    @classmethod
    def from_saved_model(cls, path, decoding=DecodingOptions()):
        loaded = load_export(path)
        check_export_limits(loaded, path, decoding.alpha)
        return cls(loaded, decoding)

    def score(self, sources, targets, progress=None):
        """(results, truncated): a `PairScore` per pair of `sources` and
        `targets` (lists of str of one length), in order, and how many
        pairs had a side longer than the model's max_length, cut (keeping
        EOS) before scoring. Advances `progress`, a `Progress`, per
        batch."""

        def process(batch):
            outputs = self.graph.score(
                inputs=tf.constant([sources[i] for i in batch], tf.string),
                targets=tf.constant([targets[i] for i in batch], tf.string),
                alpha=tf.constant(self.decoding.alpha, tf.float32),
            )
            columns = zip(
                outputs["log_probs"].numpy().tolist(),
                outputs["target_tokens"].numpy().tolist(),
                outputs["scores"].numpy().tolist(),
            )
            return (
                [
                    PairScore(log_prob, tokens, log_prob / tokens, score)
                    for log_prob, tokens, score in columns
                ],
                count_true(outputs["truncated"]),
            )

        lengths = [
            max(len(source.split()), len(target.split())) + 1
            for source, target in zip(sources, targets)
        ]
        return in_order_by_length(
            lengths,
            self.decoding.batch_tokens,
            self.max_batch_sentences,
            process,
            progress,
            sizes=None
            if self.max_request_bytes is None
            else [
                utf8_size(source) + utf8_size(target)
                for source, target in zip(sources, targets)
            ],
            max_bytes=self.max_request_bytes,
        )
