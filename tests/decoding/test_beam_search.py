"""Beam search (beam_search.py): a beam of one against greedy search, its
scores against an independent scorer, and stopping at the best."""

import numpy as np
import pytest
import tensorflow as tf

from helpers.decoding_models import (
    NEAR_TIE,
    RANDOM,
    SCORE_ATOL,
    beam,
    greedy,
    margin_checked_sources,
    random_sources,
    sequence_log_prob,
)
from t2t_repro.config import BOS_ID, EOS_ID, PAD_ID
from t2t_repro.decoding.beam_search import beam_search, length_penalty
from t2t_repro.decoding.common import next_token_log_probs


def test_beam_of_one_without_length_penalty_follows_greedy(random_model):
    # The one alive hypothesis takes greedy's path; but each step looks at
    # 2 candidates (module docstring), so an ending (EOS, the runner-up)
    # of that path is kept, and returned if it scores better than greedy's
    # output or greedy's ran to the length limit (ended ones rank first).
    # Untrained, outputs run to the limit and every step is compared.
    source = random_sources(np.random.default_rng(1), 16, RANDOM.vocab_size)
    greedy_ids, greedy_scores = (x.numpy() for x in greedy(random_model, source))
    beam_ids, beam_scores = (
        x.numpy()[:, 0] for x in beam(random_model, source, 1, 0.0)
    )
    same = np.array([np.array_equal(g, b) for g, b in zip(greedy_ids, beam_ids)])
    # 14 of these 16 identical, on the CPU this was written on.
    assert same.mean() >= 0.75, same
    np.testing.assert_allclose(beam_scores[same], greedy_scores[same], atol=SCORE_ATOL)
    for row in np.flatnonzero(~same):
        greedy_row, beam_row = greedy_ids[row], beam_ids[row]
        index = np.flatnonzero(greedy_row != beam_row)[0]
        target_in = np.concatenate([[BOS_ID], greedy_row[:-1]])[np.newaxis]
        logits = random_model(
            (source[row : row + 1], target_in.astype(np.int32)), training=False
        )
        log_probs = next_token_log_probs(
            logits[:, index], tf.constant(index == 0)
        ).numpy()[0]
        if beam_row[index] != EOS_ID:  # the paths parted: only at a near-tie
            gap = abs(log_probs[greedy_row[index]] - log_probs[beam_row[index]])
            assert gap < NEAR_TIE, (row, index, gap)
            continue
        # An ending of greedy's path, at a step where EOS was the runner-up.
        assert np.all(beam_row[index + 1 :] == PAD_ID)
        assert np.argsort(log_probs)[-2] == EOS_ID, (row, index)
        assert (
            EOS_ID not in greedy_row
            or beam_scores[row] >= greedy_scores[row] - SCORE_ATOL
        ), row


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_scores_are_the_models_and_sorted(random_model, alpha):
    source = random_sources(np.random.default_rng(2), 5, RANDOM.vocab_size)
    ids, scores = beam(random_model, source, 4, alpha)
    ids, scores = ids.numpy(), scores.numpy()
    assert ids.shape == (5, 4, source.shape[1] + 50)
    assert np.all(np.diff(scores, axis=1) <= 1e-6)
    limits = np.sum(source != PAD_ID, axis=1) + 50
    for hypothesis in range(4):
        lengths = np.sum(ids[:, hypothesis] != PAD_ID, axis=1)
        expected = (
            sequence_log_prob(random_model, source, ids[:, hypothesis])
            / length_penalty(lengths, alpha).numpy()
        )
        np.testing.assert_allclose(scores[:, hypothesis], expected, rtol=1e-4)
        for row, length, limit in zip(ids[:, hypothesis], lengths, limits):
            # Ended with EOS (or ran to the limit), PAD after, none before.
            assert np.all(row[length:] == PAD_ID)
            assert EOS_ID not in row[: length - 1]
            assert length <= limit
            assert row[length - 1] == EOS_ID or length == limit
            assert BOS_ID not in row and PAD_ID not in row[:length]
    # The hypotheses of one sentence are distinct.
    for sentence in ids:
        assert len({tuple(row) for row in sentence}) == 4


def test_stopping_at_the_best_keeps_the_best(copy_model):
    # Trained: the right copy ends last, after worse hypotheses ended
    # early (EOS among the 8 candidates of a step), so stopping too soon
    # returns one of those.
    source = margin_checked_sources(copy_model, 6, 8)
    exact_ids, exact_scores = beam(copy_model, source, 4, 0.6)
    ids, scores = tf.function(
        lambda x: beam_search(copy_model, x, 4, 0.6, exact_n_best=False)
    )(source)
    np.testing.assert_array_equal(ids[:, 0], exact_ids[:, 0])
    np.testing.assert_allclose(scores[:, 0], exact_scores[:, 0], atol=1e-5)
