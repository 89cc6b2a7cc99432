"""The decoders as the tools use them (decoders.py): both copy what a
trained model learned, parallel searches give the results of one, and no
decoder outputs an empty translation."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from helpers.decoding_models import (
    COPY,
    beam,
    greedy,
    margin_checked_sources,
    random_sources,
)
from helpers.margins import MARGIN, sequence_margins
from t2t_repro.config import EOS_ID, PAD_ID, DecodingOptions
from t2t_repro.decoding.beam_search import length_penalty
from t2t_repro.decoding.decoders import best_translation_fn, n_best_translations


def test_both_decoders_copy_held_out_sequences(copy_model):
    held_out = random_sources(np.random.default_rng(99), 32, COPY.vocab_size)
    # The model learned to copy: nearly every held-out sequence by a margin
    # (float32 training on an AVX2-only CPU took another path, where 29 of
    # the 32 had one). The exact checks below run on those sequences, where
    # no CPU's rounding can flip a token.
    margins = sequence_margins(copy_model, held_out, held_out)
    assert np.sum(margins > MARGIN) >= 28, np.sort(margins)[:5]
    source = held_out[margins > MARGIN]
    greedy_ids, greedy_log_probs = greedy(copy_model, source)
    beam_ids, beam_scores = beam(copy_model, source, 4, 0.6)
    width = source.shape[1]
    np.testing.assert_array_equal(greedy_ids[:, :width], source)
    np.testing.assert_array_equal(beam_ids[:, 0, :width], source)
    assert np.all(greedy_ids.numpy()[:, width:] == PAD_ID)
    # Same scoring: greedy's log-probability under the length penalty.
    lengths = np.sum(source != PAD_ID, axis=1)
    greedy_scores = greedy_log_probs / length_penalty(lengths, 0.6)
    assert np.all(beam_scores[:, 0] >= greedy_scores - 1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("beam_size", [1, 4])
def test_parallel_searches_give_the_results_of_one(copy_model, beam_size):
    options = DecodingOptions(extra_length=6, beam_size=beam_size)
    sources = margin_checked_sources(copy_model, 8, 5)
    any_batch = [tf.TensorSpec([None, None], tf.int32)]

    def decoder(searches, **changes):
        return tf.function(
            best_translation_fn(
                copy_model,
                dataclasses.replace(options, parallel_searches=searches, **changes),
            ),
            any_batch,
        )

    one, two = decoder(1), decoder(2)
    # 5 sentences split 2 + 3; 1 and 0 leave a search empty.
    for source in (sources, sources[:1], sources[:0]):
        for split, joined in zip(two(source), one(source)):
            np.testing.assert_allclose(split, joined, atol=1e-5)
    xla = decoder(2, jit_compile=True)
    # A request of empty lines alone leaves the XLA decoder no row at all.
    for source in (sources, sources[:0]):
        for split, joined in zip(xla(source), one(source)):
            np.testing.assert_allclose(split, joined, atol=1e-4)
    # The serving signature's n-best: every beam, in the same order.
    n_best = [
        tf.function(
            lambda ids, n=n: n_best_translations(
                copy_model,
                ids,
                tf.constant(3 if beam_size > 1 else 1),
                tf.constant(0.6),
                dataclasses.replace(options, parallel_searches=n),
            )
        )(sources)
        for n in (1, 2)
    ]
    # The margin covers the best hypothesis; the runners-up must be
    # ranked by gaps far above rounding too for their order to be exact.
    assert np.all(np.diff(n_best[0][1], axis=1) < -1e-3), n_best[0][1]
    np.testing.assert_array_equal(n_best[1][0], n_best[0][0])
    np.testing.assert_allclose(n_best[1][1], n_best[0][1], atol=1e-5)
    assert n_best[0][0].shape[:2] == (5, 3 if beam_size > 1 else 1)


class _EosFirstModel:
    """The decoders' step contract with fixed logits over 8 tokens: EOS the
    most likely at every position, token 4 the next."""

    max_positions = None

    def start_decoding(self, source_ids, buffer_length=None, beams=1):
        return {"rows": tf.range(tf.shape(source_ids)[0] * beams)}

    def decode_step(self, token_ids, index, cache, buffered=False):
        logits = tf.one_hot(EOS_ID, 8, 5.0) + tf.one_hot(4, 8, 4.0)
        return tf.tile(logits[tf.newaxis], [tf.shape(token_ids)[0], 1]), cache

    @staticmethod
    def reorder_decode_cache(cache, rows, sentences=None):
        return {"rows": tf.gather(cache["rows"], rows)}


def test_no_decoder_outputs_an_empty_translation():
    model, source = _EosFirstModel(), tf.constant([[5, 6, EOS_ID]])
    ids, _ = greedy(model, source)
    assert ids.numpy()[0, :3].tolist() == [4, EOS_ID, PAD_ID]
    ids, scores = beam(model, source, 4, 0.6)
    assert ids.numpy()[0, 0, :3].tolist() == [4, EOS_ID, PAD_ID]
    assert EOS_ID not in ids.numpy()[0, :, 0]
