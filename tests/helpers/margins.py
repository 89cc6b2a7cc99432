"""How robustly a trained test model has learned its task, and which
inputs it translates with a margin that float rounding cannot undo."""

import numpy as np
import tensorflow as tf

from t2t_repro.config import BOS_ID, PAD_ID, DecodingOptions
from t2t_repro.decoding.decoders import n_best_translations
from t2t_repro.inference.graph import TranslationGraph

# Nats. Engines that round differently (XLA and the graph, CTranslate2,
# other CPUs) move a log-probability by 1e-5 to 1e-4 nats: a token or a
# hypothesis that wins by a nat wins on every one of them.
MARGIN = 1.0


def _margin_matrix(model, source_ids, target_ids):
    """log P(right token) - max log P(any other token) at every position
    of `target_ids` (int `[batch, length]`, EOS included, PAD after), by
    teacher forcing; meaningless at PAD positions."""
    target_ids = np.asarray(target_ids)
    target_input = np.concatenate(
        [np.full([len(target_ids), 1], BOS_ID, np.int32), target_ids[:, :-1]], axis=1
    ).astype(np.int32)
    logits = model((source_ids, target_input), training=False).numpy()
    log_probs = (
        logits
        - np.log(
            np.sum(np.exp(logits - logits.max(-1, keepdims=True)), -1, keepdims=True)
        )
        - logits.max(-1, keepdims=True)
    )
    right = np.take_along_axis(log_probs, target_ids[..., None], -1)[..., 0]
    np.put_along_axis(log_probs, target_ids[..., None], -np.inf, -1)
    return right - log_probs.max(-1)


def teacher_forced_margins(model, source_ids, target_ids):
    """The margins (see `_margin_matrix`) at every real (non-PAD)
    position of `target_ids`, flattened. A minimum over MARGIN means
    greedy decoding reproduces every target, and float rounding that
    differs between CPUs cannot flip a token: tests assert it instead of
    a recorded output."""
    target_ids = np.asarray(target_ids)
    return _margin_matrix(model, source_ids, target_ids)[target_ids != PAD_ID]


def sequence_margins(model, source_ids, target_ids):
    """The smallest margin (see `_margin_matrix`) over each row's real
    (non-PAD) positions of `target_ids`: `[batch]`. Over MARGIN, greedy
    decoding reproduces that row on any CPU."""
    target_ids = np.asarray(target_ids)
    margins = _margin_matrix(model, source_ids, target_ids)
    return np.where(target_ids != PAD_ID, margins, np.inf).min(axis=1)


def translated_with_a_margin(model, tokenizer, sentences, decoding=DecodingOptions()):
    """bool `[len(sentences)]`: whether `model`'s beam search (`decoding`'s
    beam size, 2 or more, and alpha) finds each sentence's translation by
    MARGIN: each token of the best hypothesis beats every other token by
    MARGIN under teacher forcing, and the runner-up hypothesis scores
    MARGIN below it. Two engines that round differently give such a
    sentence the same translation; another may part at a near-tie, which
    is no bug."""
    graph = TranslationGraph(model, tokenizer, decoding)
    source, _ = graph.source_ids(tf.constant(sentences, tf.string))
    ids, scores = (
        x.numpy()
        for x in tf.function(
            lambda ids: n_best_translations(
                model, ids, decoding.beam_size, decoding.alpha, decoding
            )
        )(source)
    )
    best = ids[:, 0]
    best = best[:, : max(1, int(np.max(np.sum(best != PAD_ID, axis=1))))]
    return (sequence_margins(model, source.numpy(), best) > MARGIN) & (
        scores[:, 0] - scores[:, 1] > MARGIN
    )
