"""The checks a `TranslationGraph` runs on a request before it tokenizes
anything: the batch cap, a valid beam size and alpha, and an export's
`ServingLimits`, each refused with InvalidArgument and a message naming
the limit and the value (the rules are in `TranslationGraph`'s docstring).
"""

import tensorflow as tf


def admitted(graph, texts, beam_size=None, alpha=None):
    """`texts` ({"inputs": ..., "targets": ...}, string tensors `[batch]`)
    once the request to `graph` passed the checks of the `TranslationGraph`
    docstring, else InvalidArgument. Everything computed from the returned
    tensors runs after the checks: a 100 MB string never reaches the
    tokenizer."""
    batch = tf.size(texts["inputs"])
    # (condition, message) pairs, checked in this order: the first a
    # request fails is the one reported.
    conditions = [
        _at_most(
            batch,
            graph.max_batch_sentences,
            "too many sentences in one request ({} > max_batch_sentences={}); split it",
        )
    ]
    if beam_size is not None:
        conditions.append(
            (
                beam_size >= 1,
                lambda: tf.strings.format("beam_size {} must be >= 1", beam_size),
            )
        )
    if alpha is not None:
        conditions.append(
            (
                tf.math.is_finite(alpha) & (alpha >= 0),
                lambda: tf.strings.format("alpha {} must be finite and >= 0", alpha),
            )
        )
    if graph.limits is not None:
        conditions += _limit_conditions(graph, texts, beam_size, alpha)
    check = tf.no_op()
    for ok, message in conditions:
        with tf.control_dependencies([check]):
            check = _refuse_unless(ok, message)
    with tf.control_dependencies([check]):
        return {name: tf.identity(text) for name, text in texts.items()}


def _limit_conditions(graph, texts, beam_size, alpha):
    """(condition, message) pairs of `graph.limits`. Messages name the flag
    (t2t-export's) and avoid apostrophes and string arguments, which
    tf.Assert and tf.strings.format would print quoted."""
    lengths = {
        name: tf.cast(tf.strings.length(text, unit="BYTE"), tf.int64)
        for name, text in texts.items()
    }
    conditions = [
        _sentence_bytes_condition(graph, name, length)
        for name, length in lengths.items()
    ]
    total = tf.add_n([tf.reduce_sum(length) for length in lengths.values()])
    conditions.append(
        _at_most(
            total,
            graph.max_request_bytes,
            "the request has {} bytes of strings, over the export limit "
            "max_request_bytes={}",
        )
    )
    if beam_size is not None:
        conditions.append(
            _at_most(
                beam_size,
                graph.max_beam_size,
                "beam_size {} is over the export limit max_beam_size={}",
            )
        )
    if alpha is not None:
        conditions.append(
            _at_most(
                alpha, graph.max_alpha, "alpha {} is over the export limit max_alpha={}"
            )
        )
    return conditions


def _sentence_bytes_condition(graph, name, lengths):
    over = lengths > graph.max_sentence_bytes

    def message():
        first = tf.where(over)[0, 0]
        return tf.strings.format(
            name + "[{}] is {} bytes, over the export limit max_sentence_bytes={}",
            (first, lengths[first], graph.max_sentence_bytes),
        )

    return ~tf.reduce_any(over), message


def _at_most(value, limit, message):
    """(value <= limit, a function making `message` with the two)."""
    return value <= limit, lambda: tf.strings.format(message, (value, limit))


def _refuse_unless(ok, message):
    """An op failing with InvalidArgument, `message()` (a scalar string
    tensor, built only then), unless `ok`."""
    return tf.cond(ok, tf.no_op, lambda: tf.debugging.Assert(False, [message()]))
