"""One translation graph, strings in and strings out, for every caller.

`TranslationGraph` tokenizes with tensorflow-text, pads to a training
bucket's length, decodes and detokenizes, all in TensorFlow: the SavedModel
serves exactly this module (serving.py), and `Translator` runs the same one
in-process (t2t-eval, t2t-translate, dev BLEU, t2t-attention).
`SavedModelTranslator` runs an exported one. Both translators share the
loop that batches sentences by length and restores their order. `Scorer`
scores given translations through the graph's `score` signature, and
`Progress` reports how far a long job got.
"""

import datetime
import sys
import time
from typing import NamedTuple

import tensorflow as tf
from absl import logging

from t2t_repro.config import BOS_ID, PAD_ID, ConfigError, DecodingOptions
from t2t_repro.data.pipeline import bucket_boundaries
from t2t_repro.data.vocabulary import tokenize_sources
from t2t_repro.decoding.beam_search import length_penalty
from t2t_repro.decoding.decoders import best_translation_fn, n_best_translations
from t2t_repro.layers.masks import sequence_lengths


class TranslationGraph(tf.Module):
    """Strings in, strings out, everything in one graph.

    Signatures (see `signatures`):
        serving_default: `inputs` tf.string `[batch]` -> `translations`
            tf.string `[batch]`, `scores` float32 `[batch]` (log P / length
            penalty), `truncated` bool `[batch]` (the input had more than
            max_length subword tokens and was cut; also printed to the
            server's log), with `decoding`'s beam size and alpha.
        translate: `inputs` `[batch]`, `beam_size` int32 scalar, `alpha`
            float32 scalar -> `translations` `[batch, beam_size]`, `scores`
            `[batch, beam_size]`, n-best, best first, and `truncated`
            `[batch]`. Never XLA-compiled: its shapes depend on the
            request's beam size.
        score: `inputs` `[batch]`, `targets` `[batch]` (given
            translations), `alpha` float32 scalar -> `log_probs` float32
            `[batch]`, log P(target | input) summed over the target's
            subword tokens and its EOS; `target_tokens` int32 `[batch]`,
            their count; `scores`, log_probs / ((5 + target_tokens) / 6)
            ** alpha, beam search's ranking score; `truncated` `[batch]`
            (either side was cut to max_length). P is the model's softmax,
            the distribution it was trained on (the training loss without
            label smoothing is -log_probs / target_tokens); the decoders
            also never emit PAD or BOS, nor EOS first, so a translation's
            decoder score can be a little higher than its `scores`.
    All refuse (InvalidArgument) a batch of more than
    `decoding.max_batch_sentences` inputs, and translate and score a
    beam_size < 1 or an alpha that is not finite and >= 0. With `limits`,
    all also refuse, before tokenizing anything, a request over them, the
    message naming the limit and the value; the limits are variables of
    the module, of the fields' names, which a loaded export has too.

    Args:
        model: a trained `Transformer`.
        tokenizer: the run's tensorflow-text SentencePiece tokenizer.
        decoding: `DecodingOptions` of serving_default's decoder (beam 1 =
            greedy); with `jit_compile`, a SavedModel needs TF Serving's
            `--xla_cpu_compilation_enabled=true`.
        limits: an export's `ServingLimits` (serving.py); None in this
            process, where the caller's own settings are the only bounds.
    """

    def __init__(self, model, tokenizer, decoding, limits=None):
        super().__init__(name="translation")
        # Only the model's variables are tracked, not the Keras model: saving
        # it would trace Keras' default float32 signature, which cannot call
        # a model of token ids. Keras 3 variables are not tf.Variables; the
        # backing ones are, and get names the TF1 loader (TF Serving,
        # saved_model_cli) restores.
        self.model_variables = [v.value for v in model.variables]
        self.max_length = model.config.max_length
        # Variables, so that a loaded export can be asked what it is.
        self.compute_dtype = tf.Variable(
            model.compute_dtype, trainable=False, name="compute_dtype"
        )
        self.tokenizer = tokenizer
        self.boundaries = tf.constant(bucket_boundaries(self.max_length), tf.int32)
        self.max_batch_sentences = tf.Variable(
            decoding.max_batch_sentences, trainable=False, name="max_batch_sentences"
        )
        self.limits = limits
        if limits is not None:
            self.max_beam_size = tf.Variable(
                limits.max_beam_size, trainable=False, name="max_beam_size"
            )
            self.max_sentence_bytes = tf.Variable(
                limits.max_sentence_bytes,
                trainable=False,
                dtype=tf.int64,
                name="max_sentence_bytes",
            )
            self.max_request_bytes = tf.Variable(
                limits.max_request_bytes,
                trainable=False,
                dtype=tf.int64,
                name="max_request_bytes",
            )
            self.max_alpha = tf.Variable(
                limits.max_alpha, trainable=False, dtype=tf.float32, name="max_alpha"
            )
        # `(ids [batch, length], scores [batch])` of bucket-padded ids.
        self.decode_ids = tf.function(best_translation_fn(model, decoding))
        self._n_best = tf.function(
            lambda ids, k, a: n_best_translations(model, ids, k, a, decoding)
        )
        self._target_log_probs = tf.function(
            lambda source, target: target_log_probs(model, source, target)
        )

    def source_ids(self, inputs):
        """(ids, truncated) of a request: tokenized and padded to a training
        bucket's length (an XLA decoder then compiles a few shapes, not one
        per input length), and which inputs were cut to max_length."""
        ids, truncated = tokenize_sources(self.tokenizer, inputs, self.max_length)
        width = tf.shape(ids)[1]
        bucket = tf.gather(
            self.boundaries, tf.reduce_min(tf.where(self.boundaries >= width))
        )
        return tf.pad(
            ids, [[0, 0], [0, bucket - width]], constant_values=PAD_ID
        ), truncated

    def _admitted(self, texts, beam_size=None, alpha=None):
        """`texts` ({"inputs": ..., "targets": ...}, string tensors
        `[batch]`) once the request passed the checks of the class
        docstring, else InvalidArgument. Everything computed from the
        returned tensors runs after the checks: a 100 MB string never
        reaches the tokenizer."""
        batch = tf.size(texts["inputs"])
        # (condition, message) pairs, checked in this order: the first a
        # request fails is the one reported.
        conditions = [
            (
                batch <= self.max_batch_sentences,
                lambda: tf.strings.format(
                    "too many sentences in one request ({} > "
                    "max_batch_sentences={}); split it",
                    (batch, self.max_batch_sentences),
                ),
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
                    lambda: tf.strings.format(
                        "alpha {} must be finite and >= 0", alpha
                    ),
                )
            )
        if self.limits is not None:
            conditions += self._limit_conditions(texts, beam_size, alpha)
        check = tf.no_op()
        for ok, message in conditions:
            with tf.control_dependencies([check]):
                check = _refuse_unless(ok, message)
        with tf.control_dependencies([check]):
            return {name: tf.identity(text) for name, text in texts.items()}

    def _limit_conditions(self, texts, beam_size, alpha):
        """(condition, message) pairs of `limits`. Messages name the flag
        (t2t-export's) and avoid apostrophes and string arguments, which
        tf.Assert and tf.strings.format would print quoted."""
        lengths = {
            name: tf.cast(tf.strings.length(text, unit="BYTE"), tf.int64)
            for name, text in texts.items()
        }
        conditions = [
            self._sentence_bytes_condition(name, length)
            for name, length in lengths.items()
        ]
        total = tf.add_n([tf.reduce_sum(length) for length in lengths.values()])
        conditions.append(
            (
                total <= self.max_request_bytes,
                lambda: tf.strings.format(
                    "the request has {} bytes of strings, over the export limit "
                    "max_request_bytes={}",
                    (total, self.max_request_bytes),
                ),
            )
        )
        if beam_size is not None:
            conditions.append(
                (
                    beam_size <= self.max_beam_size,
                    lambda: tf.strings.format(
                        "beam_size {} is over the export limit max_beam_size={}",
                        (beam_size, self.max_beam_size),
                    ),
                )
            )
        if alpha is not None:
            conditions.append(
                (
                    alpha <= self.max_alpha,
                    lambda: tf.strings.format(
                        "alpha {} is over the export limit max_alpha={}",
                        (alpha, self.max_alpha),
                    ),
                )
            )
        return conditions

    def _sentence_bytes_condition(self, name, lengths):
        over = lengths > self.max_sentence_bytes

        def message():
            first = tf.where(over)[0, 0]
            return tf.strings.format(
                name + "[{}] is {} bytes, over the export limit max_sentence_bytes={}",
                (first, lengths[first], self.max_sentence_bytes),
            )

        return ~tf.reduce_any(over), message

    def _detokenize(self, ids):
        return self.tokenizer.detokenize(
            tf.RaggedTensor.from_tensor(ids, padding=PAD_ID)
        )

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def serve(self, inputs):
        source, truncated = self.source_ids(
            self._admitted({"inputs": inputs})["inputs"]
        )
        cut = tf.reduce_sum(tf.cast(truncated, tf.int32))
        if cut > 0:
            tf.print(
                "t2t_repro:",
                cut,
                "of",
                tf.size(inputs),
                "inputs had more than",
                self.max_length,
                "subword tokens and were truncated",
                output_stream=sys.stderr,
            )
        ids, scores = self.decode_ids(source)
        return {
            "translations": self._detokenize(ids),
            "scores": scores,
            "truncated": truncated,
        }

    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.string, name="inputs"),
            tf.TensorSpec([], tf.int32, name="beam_size"),
            tf.TensorSpec([], tf.float32, name="alpha"),
        ]
    )
    def translate(self, inputs, beam_size, alpha):
        source, truncated = self.source_ids(
            self._admitted({"inputs": inputs}, beam_size, alpha)["inputs"]
        )
        ids, scores = self._n_best(source, beam_size, alpha)
        batch = tf.shape(ids)[0]
        texts = self._detokenize(tf.reshape(ids, [batch * beam_size, -1]))
        return {
            "translations": tf.reshape(texts, [batch, beam_size]),
            "scores": scores,
            "truncated": truncated,
        }

    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.string, name="inputs"),
            tf.TensorSpec([None], tf.string, name="targets"),
            tf.TensorSpec([], tf.float32, name="alpha"),
        ]
    )
    def score(self, inputs, targets, alpha):
        with tf.control_dependencies(
            [
                tf.debugging.assert_equal(
                    tf.size(inputs),
                    tf.size(targets),
                    message="as many targets as inputs, please",
                )
            ]
        ):
            texts = self._admitted({"inputs": inputs, "targets": targets}, alpha=alpha)
        source, source_truncated = self.source_ids(texts["inputs"])
        # Cut like a source (and like --overlong=truncate in training):
        # a learned position table has no row past max_length.
        target, target_truncated = tokenize_sources(
            self.tokenizer, texts["targets"], self.max_length
        )
        log_probs = self._target_log_probs(source, target)
        tokens = sequence_lengths(target)
        return {
            "log_probs": log_probs,
            "target_tokens": tokens,
            "scores": log_probs / length_penalty(tokens, alpha),
            "truncated": source_truncated | target_truncated,
        }

    def signatures(self):
        return {
            "serving_default": self.serve,
            "translate": self.translate,
            "score": self.score,
        }


def _refuse_unless(ok, message):
    """An op failing with InvalidArgument, `message()` (a scalar string
    tensor, built only then), unless `ok`."""
    return tf.cond(ok, tf.no_op, lambda: tf.debugging.Assert(False, [message()]))


def target_log_probs(model, source_ids, target_ids):
    """float32 `[batch]`: log P(target_ids | source_ids) under the model's
    softmax by teacher forcing (the decoder reads BOS + the target without
    its last token, as in training), summed over the non-PAD tokens of
    `target_ids` (int32 `[batch, length]`, EOS included)."""
    target_input = tf.concat(
        [tf.fill([tf.shape(target_ids)[0], 1], BOS_ID), target_ids[:, :-1]], axis=1
    )
    logits = model((source_ids, target_input), training=False)
    # The fused op never materialises the [batch, length, vocab] log-probs.
    token_losses = tf.nn.sparse_softmax_cross_entropy_with_logits(
        target_ids, tf.cast(logits, tf.float32)
    )
    real = tf.cast(target_ids != PAD_ID, tf.float32)
    return -tf.reduce_sum(token_losses * real, axis=1)


class Progress:
    """How many of `total` items (None: unknown) a long job has done, on
    `stream` (default stderr): on a terminal a tqdm bar with rate and ETA,
    else a plain line at most every `interval` seconds and one at the end,
    which keeps a log file readable.

    Args:
        total: items the job will do, counting `initial`; None if unknown.
        verb: what the job does to an item ("translated").
        unit: what an item is ("sentences").
        initial: items done before (by an interrupted run being resumed).
    """

    def __init__(
        self,
        total,
        verb="translated",
        unit="sentences",
        initial=0,
        interval=30.0,
        stream=None,
    ):
        self.total, self.verb, self.unit = total, verb, unit
        self.done = self.initial = initial
        self.interval = interval
        self.stream = stream or sys.stderr
        self.start = self.last_line = time.monotonic()
        self.closed = False
        self.bar = None
        if self.stream.isatty():
            # tqdm ships with tensorflow-datasets and nltk, both pinned
            # dependencies; keras' Progbar would write to stdout, where
            # the translations go.
            from tqdm import tqdm

            self.bar = tqdm(
                total=total,
                initial=initial,
                desc=verb,
                unit=f" {unit}",
                file=self.stream,
            )

    def update(self, count):
        """`count` more items done; closes when all `total` are."""
        self.done += count
        if self.bar is not None:
            self.bar.update(count)
        elif time.monotonic() - self.last_line >= self.interval:
            self._print_line()
        if self.total is not None and self.done >= self.total:
            self.close()

    def _print_line(self):
        self.last_line = time.monotonic()
        elapsed = self.last_line - self.start
        rate = (self.done - self.initial) / max(elapsed, 1e-9)
        text = f"{self.verb} {self.done}"
        if self.total is not None:
            text += f"/{self.total}"
        text += f" {self.unit}, {rate:.1f}/s"
        if self.total is not None and self.done < self.total and rate > 0:
            eta = datetime.timedelta(seconds=round((self.total - self.done) / rate))
            text += f", ETA {eta}"
        print(text, file=self.stream, flush=True)

    def close(self):
        if self.closed:
            return
        self.closed = True
        if self.bar is not None:
            self.bar.close()
        else:
            self._print_line()


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


def batches_by_length(lengths, batch_tokens, max_sentences):
    """Index lists of items of similar length, longest first, each holding
    at most `max_sentences` items and `batch_tokens` tokens of its longest
    item's length (or a single item)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batch, width = [], 0
    for index in order:
        if batch and (
            (len(batch) + 1) * width > batch_tokens or len(batch) == max_sentences
        ):
            yield batch
            batch = []
        if not batch:
            width = lengths[index]
        batch.append(index)
    if batch:
        yield batch


def in_order_by_length(lengths, batch_tokens, max_sentences, process, progress=None):
    """(results, truncated) of `process(indices)` run on batches of items
    of similar `lengths` (`batches_by_length`), which returns one result
    per index and how many of its items were truncated: the results in
    index order and the total truncated. Advances `progress` (a
    `Progress`) per batch."""
    results = [None] * len(lengths)
    truncated = 0
    for batch in batches_by_length(lengths, batch_tokens, max_sentences):
        batch_results, batch_truncated = process(batch)
        for index, result in zip(batch, batch_results):
            results[index] = result
        truncated += batch_truncated
        if progress is not None:
            progress.update(len(batch))
    return results, truncated


def _count_true(flags):
    return int(tf.reduce_sum(tf.cast(flags, tf.int32)))


def _n_best_outputs(translate, sentences, decoding, n_best):
    """(translations `[batch, n_best]`, scores, truncated `[batch]`) from a
    `translate` signature (see `TranslationGraph`)."""
    outputs = translate(
        inputs=sentences,
        beam_size=tf.constant(decoding.beam_size),
        alpha=tf.constant(decoding.alpha, tf.float32),
    )
    # Exports older than the `truncated` output: nothing reported.
    truncated = outputs.get("truncated", tf.zeros([0], tf.bool))
    return (
        outputs["translations"][:, :n_best],
        outputs["scores"][:, :n_best],
        truncated,
    )


class _BatchingTranslator:
    """Translates a list of sentences in batches of similar length (by
    word count + EOS, close enough to the subword count to size batches)
    and returns the results in input order."""

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

        def process(batch):
            inputs = tf.constant([sentences[i] for i in batch], tf.string)
            if n_best == 1:
                texts, scores, truncated = self._translate_batch(inputs)
                texts, scores = texts[:, tf.newaxis], scores[:, tf.newaxis]
            else:
                texts, scores, truncated = self._n_best_batch(inputs, n_best)
            return (
                [
                    [
                        (text.decode("utf-8"), float(score))
                        for text, score in zip(row_texts, row_scores)
                    ]
                    for row_texts, row_scores in zip(texts.numpy(), scores.numpy())
                ],
                _count_true(truncated),
            )

        return in_order_by_length(
            [len(s.split()) + 1 for s in sentences],
            self.decoding.batch_tokens,
            self._max_batch_sentences(),
            process,
            progress,
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


class Translator(_BatchingTranslator):
    """Translates with a model in this process, through `TranslationGraph`.

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
        super().__init__(decoding)
        self.model = model
        self.tokenizer = tokenizer
        self.graph = TranslationGraph(model, tokenizer, decoding)

    def _translate_batch(self, sentences):
        outputs = self.graph.serve(sentences)
        return (outputs["translations"], outputs["scores"], outputs["truncated"])

    def _n_best_batch(self, sentences, n_best):
        return _n_best_outputs(self.graph.translate, sentences, self.decoding, n_best)


def load_export(path):
    """(the loaded t2t-export SavedModel at `path`, its request cap: the
    most sentences it takes at once, None for exports older than the
    cap)."""
    import tensorflow_text  # noqa: F401  registers the SentencePiece ops

    if not tf.saved_model.contains_saved_model(path):
        raise FileNotFoundError(f"{path}: no SavedModel there (no saved_model.pb)")
    loaded = tf.saved_model.load(path)
    cap = getattr(loaded, "max_batch_sentences", None)
    return loaded, None if cap is None else int(cap.numpy())


def check_export_limits(loaded, path, alpha, beam_size=None):
    """Refuses (ConfigError, naming the flags) an `alpha` or `beam_size`
    over the limits of the export at `path`, `loaded`, which would refuse
    every request; exports older than the limits have none."""
    if not hasattr(loaded, "max_alpha"):
        return
    over = []
    max_beam_size = int(loaded.max_beam_size.numpy())
    if beam_size is not None and beam_size > max_beam_size:
        over.append(
            f"--beam_size={beam_size} is over its max_beam_size={max_beam_size}"
        )
    max_alpha = float(loaded.max_alpha.numpy())
    if alpha > max_alpha:
        over.append(f"--alpha={alpha:g} is over its max_alpha={max_alpha:g}")
    if over:
        raise ConfigError(
            f"{path}: {' and '.join(over)} (set by t2t-export's flags of those names)"
        )


class SavedModelTranslator(_BatchingTranslator):
    """Translates with an exported SavedModel's `translate` signature."""

    def __init__(self, path, decoding=DecodingOptions()):
        super().__init__(decoding)
        loaded, self._export_cap = load_export(path)
        check_export_limits(loaded, path, decoding.alpha, decoding.beam_size)
        self._signature = loaded.signatures["translate"]
        # The export refuses a request holding a longer sentence.
        limit = getattr(loaded, "max_sentence_bytes", None)
        self.max_sentence_bytes = None if limit is None else int(limit.numpy())

    def _max_batch_sentences(self):
        return min(filter(None, [self.decoding.max_batch_sentences, self._export_cap]))

    def _translate_batch(self, sentences):
        texts, scores, truncated = self._n_best_batch(sentences, 1)
        return texts[:, 0], scores[:, 0], truncated

    def _n_best_batch(self, sentences, n_best):
        return _n_best_outputs(self._signature, sentences, self.decoding, n_best)


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

    @classmethod
    def from_model(cls, model, tokenizer, decoding=DecodingOptions()):
        return cls(TranslationGraph(model, tokenizer, decoding), decoding)

    @classmethod
    def from_saved_model(cls, path, decoding=DecodingOptions()):
        loaded, _ = load_export(path)
        if not hasattr(loaded, "score"):
            raise ConfigError(
                f"{path}: exported before t2t-score "
                "existed (no score signature); export the run "
                "again, or score with --model_dir"
            )
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
                _count_true(outputs["truncated"]),
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
        )
