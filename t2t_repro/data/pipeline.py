"""Tokenization, length filtering and token-budget batching with tf.data:
`training_batches`, and the steps it is made of."""

import tensorflow as tf
from absl import logging

from t2t_repro.config import BOS_ID, PAD_ID
from t2t_repro.data.text_files import do_not_convert
from t2t_repro.data.vocabulary import truncate_keeping_eos

_TOKENIZE_BATCH = 512


def check_string_pairs(pairs):
    """TypeError unless `pairs` is a tf.data.Dataset of (source, target)
    scalar strings: `Dataset.zip` of two line datasets, or
    `from_tensor_slices((sources, targets))`; not a dataset of [2] tensors
    (`from_tensor_slices(list(zip(...)))`) or of dicts (TFDS)."""
    spec = getattr(pairs, "element_spec", None)
    if not (
        isinstance(spec, tuple)
        and len(spec) == 2
        and all(
            isinstance(side, tf.TensorSpec)
            and side.dtype == tf.string
            and side.shape.rank in (0, None)  # None: from_generator's
            for side in spec
        )
    ):
        raise TypeError(
            f"pairs: a tf.data.Dataset of (source, target) strings, e.g. "
            f"Dataset.from_tensor_slices((sources, targets)); got elements {spec}"
        )


def tokenize_pairs(pairs, tokenizer):
    """(source, target) strings -> (source_ids, target_ids), each with EOS."""

    def tokenize(source, target):
        return tokenizer.tokenize(source), tokenizer.tokenize(target)

    return (
        pairs.batch(_TOKENIZE_BATCH)
        .map(
            do_not_convert(tokenize),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
        .rebatch(1)
        .map(do_not_convert(lambda s, t: (s[0], t[0])))
    )


def _longest_side(source, target):
    return tf.maximum(tf.shape(source)[0], tf.shape(target)[0])


def fit_to_max_length(tokenized, max_length, overlong="drop"):
    """Drops pairs with a side over `max_length`, or truncates them.

    Truncation keeps the final EOS (`vocabulary.truncate_keeping_eos`).
    """
    if overlong == "drop":
        return tokenized.filter(
            do_not_convert(lambda s, t: _longest_side(s, t) <= max_length)
        )
    if overlong == "truncate":

        def truncate(ids):
            rows = tf.RaggedTensor.from_tensor(ids[tf.newaxis])
            return truncate_keeping_eos(rows, max_length)[0]

        return tokenized.map(do_not_convert(lambda s, t: (truncate(s), truncate(t))))
    raise ValueError(f"overlong must be 'drop' or 'truncate', got {overlong!r}")


def count_overlong(pairs, tokenizer, max_length):
    """(pairs, pairs with a side over `max_length` subword tokens, EOS
    included) of `pairs`: one pass, batched."""

    def longest_sides(source, target):
        return tf.maximum(
            tokenizer.tokenize(source).row_lengths(),
            tokenizer.tokenize(target).row_lengths(),
        )

    def count(totals, longest):
        total, overlong = totals
        return (
            total + tf.size(longest, tf.int64),
            overlong + tf.math.count_nonzero(longest > max_length),
        )

    totals = (
        pairs.batch(_TOKENIZE_BATCH)
        .map(
            do_not_convert(longest_sides),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
        .reduce(
            (tf.constant(0, tf.int64), tf.constant(0, tf.int64)),
            do_not_convert(count),
        )
    )
    return tuple(int(value) for value in totals)


# check_lengths counts at most this many pairs: a pass over a WMT-sized
# corpus would cost minutes at every start and resume.
LENGTH_SAMPLE_PAIRS = 200_000


def check_lengths(pairs, tokenizer, max_length, overlong, name):
    """Logs how many of `pairs` (of the first LENGTH_SAMPLE_PAIRS)
    `fit_to_max_length` drops or cuts, and raises DataError if it would
    drop them all: the repeated training input would then filter forever
    and never yield a batch."""
    from t2t_repro.data import DataError

    fitting = fit_to_max_length(tokenize_pairs(pairs, tokenizer), max_length, overlong)
    if not list(fitting.take(1).as_numpy_iterator()):  # stops at the first
        raise DataError(
            f"{name}: no pair fits --max_length={max_length}: every pair has "
            f"a side longer than {max_length} subword tokens (EOS included);"
            " raise --max_length or pass --overlong=truncate"
        )
    total, too_long = count_overlong(
        pairs.take(LENGTH_SAMPLE_PAIRS), tokenizer, max_length
    )
    logging.info(
        "%s: %d of %s%d pairs have a side over --max_length=%d subword tokens: %s",
        name,
        too_long,
        "the first " if total == LENGTH_SAMPLE_PAIRS else "",
        total,
        max_length,
        "left out (--overlong=truncate cuts them instead)"
        if overlong == "drop"
        else "cut (--overlong=truncate)",
    )


def bucket_boundaries(max_length, min_length=8, growth=1.1):
    """Padded lengths of the buckets: min_length, then about x1.1 each.

    Geometric spacing bounds the padding waste per bucket (tensor2tensor
    uses the same scheme); the last boundary is max_length.
    """
    boundaries, length = [], min_length
    while length < max_length:
        boundaries.append(length)
        length = max(length + 1, int(length * growth))
    return boundaries + [max_length]


def _to_model_inputs(source, target):
    """Teacher forcing: decoder input is BOS + target without its last token."""
    start = tf.fill([tf.shape(target)[0], 1], tf.constant(BOS_ID, target.dtype))
    target_input = tf.concat([start, target[:, :-1]], axis=1)
    return (source, target_input), target


def batch_by_tokens(tokenized, batch_tokens, max_length):
    """Length-bucketed batches of about `batch_tokens` padded tokens.

    Each bucket pads source and target to its boundary, so only
    len(bucket_boundaries) shapes are ever produced, and holds
    batch_tokens // (2 * boundary) pairs (source + target tokens).

    Yields ((source_ids, target_input_ids), target_ids), int32
    `[batch, boundary]` each.
    """
    lengths = bucket_boundaries(max_length)
    batch_sizes = [max(1, batch_tokens // (2 * n)) for n in lengths]
    # bucket_by_sequence_length pads to boundary - 1 for bucket i, and the
    # extra final batch size covers lengths >= the last boundary (none here).
    batched = tokenized.bucket_by_sequence_length(
        do_not_convert(_longest_side),
        bucket_boundaries=[n + 1 for n in lengths],
        bucket_batch_sizes=batch_sizes + [batch_sizes[-1]],
        pad_to_bucket_boundary=True,
        padding_values=(PAD_ID, PAD_ID),
    )
    return batched.map(do_not_convert(_to_model_inputs))


def real_and_padded_tokens(source, target):
    """float32 (non-PAD tokens, all positions) of a batch's two sides."""
    real = tf.reduce_sum(tf.cast(source != PAD_ID, tf.float32)) + tf.reduce_sum(
        tf.cast(target != PAD_ID, tf.float32)
    )
    return real, tf.cast(tf.size(source) + tf.size(target), tf.float32)


def shuffled_batches(
    pairs,
    tokenizer,
    *,
    batch_tokens,
    max_length,
    overlong="drop",
    shuffle_buffer=100_000,
    seed=0,
):
    """`pairs` shuffled, tokenized, fitted to `max_length` and bucketed:
    one pass over a finite dataset, every pass over a repeated one."""
    pairs = pairs.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    tokenized = fit_to_max_length(
        tokenize_pairs(pairs, tokenizer), max_length, overlong
    )
    return batch_by_tokens(tokenized, batch_tokens, max_length)


def training_batches(pairs, tokenizer, **options):
    """The training input: `shuffled_batches` of `pairs` repeated forever
    (`options` are its keywords).

    Deterministic: the same pairs and seed give the same batches in the
    same order.
    """
    check_string_pairs(pairs)
    batches = shuffled_batches(pairs.repeat(), tokenizer, **options)
    deterministic = tf.data.Options()
    deterministic.deterministic = True
    return batches.with_options(deterministic).prefetch(tf.data.AUTOTUNE)
