"""How robustly a trained test model has learned its task."""

import numpy as np

from t2t_repro.config import BOS_ID, PAD_ID


def teacher_forced_margins(model, source_ids, target_ids):
    """log P(right token) - max log P(any other token) at every real
    (non-PAD) position of `target_ids` (int `[batch, length]`, EOS
    included), by teacher forcing. A minimum of a nat or more means greedy
    decoding reproduces every target, and float rounding that differs
    between CPUs cannot flip a token: tests assert it instead of a
    recorded output."""
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
    return (right - log_probs.max(-1))[target_ids != PAD_ID]
