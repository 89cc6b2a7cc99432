"""`TranslationGraph`: strings in, strings out, everything in one graph.

It tokenizes with tensorflow-text, pads to a training bucket's length,
decodes and detokenizes, all in TensorFlow, so that the SavedModel
(serving.py) and this process (`translators.ModelTranslator`, the
public `t2t_repro.Translator`) run exactly the same computation. The
checks that refuse a request are in request_checks.py.
"""

import sys

import tensorflow as tf

from t2t_repro.config import BOS_ID, PAD_ID
from t2t_repro.data.pipeline import bucket_boundaries
from t2t_repro.data.vocabulary import tokenize_sources
from t2t_repro.decoding.beam_search import length_penalty
from t2t_repro.decoding.decoders import best_translation_fn, n_best_translations
from t2t_repro.inference.request_checks import admitted
from t2t_repro.layers.masks import sequence_lengths


class TranslationGraph(tf.Module):
    """A model's translation and scoring signatures.

    Signatures (see `signatures`):
        serving_default: `inputs` tf.string `[batch]` -> `translations`
            tf.string `[batch]`, `scores` float32 `[batch]` (log P / length
            penalty; an input that tokenizes to EOS alone gets "" and 0),
            `truncated` bool `[batch]` (the input had more than max_length
            subword tokens and was cut; also printed to the server's log),
            with `decoding`'s beam size and alpha.
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
        self.decode_ids = tf.function(
            best_translation_fn(model, decoding), autograph=False
        )
        self._n_best = tf.function(
            lambda ids, k, a: n_best_translations(model, ids, k, a, decoding),
            autograph=False,
        )
        self._target_log_probs = tf.function(
            lambda source, target: target_log_probs(model, source, target),
            autograph=False,
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

    def _detokenize(self, ids):
        return self.tokenizer.detokenize(
            tf.RaggedTensor.from_tensor(ids, padding=PAD_ID)
        )

    @tf.function(
        input_signature=[tf.TensorSpec([None], tf.string, name="inputs")],
        autograph=False,
    )
    def serve(self, inputs):
        source, truncated = self.source_ids(
            admitted(self, {"inputs": inputs})["inputs"]
        )
        cut = tf.reduce_sum(tf.cast(truncated, tf.int32))

        def log_the_cut():
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

        tf.cond(cut > 0, log_the_cut, lambda: None)
        ids, scores = translatable_rows_decoded(self.decode_ids, source)
        return {
            "translations": self._detokenize(ids),
            "scores": scores,
            "truncated": truncated,
        }

    @tf.function(
        autograph=False,
        input_signature=[
            tf.TensorSpec([None], tf.string, name="inputs"),
            tf.TensorSpec([], tf.int32, name="beam_size"),
            tf.TensorSpec([], tf.float32, name="alpha"),
        ],
    )
    def translate(self, inputs, beam_size, alpha):
        source, truncated = self.source_ids(
            admitted(self, {"inputs": inputs}, beam_size, alpha)["inputs"]
        )
        ids, scores = translatable_rows_decoded(
            lambda rows: self._n_best(rows, beam_size, alpha), source
        )
        batch = tf.shape(ids)[0]
        texts = self._detokenize(tf.reshape(ids, [batch * beam_size, -1]))
        return {
            "translations": tf.reshape(texts, [batch, beam_size]),
            "scores": scores,
            "truncated": truncated,
        }

    @tf.function(
        autograph=False,
        input_signature=[
            tf.TensorSpec([None], tf.string, name="inputs"),
            tf.TensorSpec([None], tf.string, name="targets"),
            tf.TensorSpec([], tf.float32, name="alpha"),
        ],
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
            texts = admitted(self, {"inputs": inputs, "targets": targets}, alpha=alpha)
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


def nothing_to_translate(source_ids):
    """bool `[batch]`: the sources that tokenized to EOS alone (empty or
    whitespace), whose translation is "" with score 0: decoding from EOS
    alone, a model invents a sentence."""
    return sequence_lengths(source_ids) <= 1


def translatable_rows_decoded(decode, source_ids):
    """`decode(source_ids)`'s `(ids, scores)`, batch-major, searched for
    the rows that have something to translate only: a row of
    `nothing_to_translate` gets PAD ids (the translation "") and score 0
    without a search, so a batch of empty lines costs no decoding."""
    rows = tf.where(~nothing_to_translate(source_ids))
    ids, scores = decode(tf.gather_nd(source_ids, rows))
    batch = tf.shape(source_ids)[:1]
    all_ids = tf.fill(tf.concat([batch, tf.shape(ids)[1:]], 0), PAD_ID)
    all_scores = tf.zeros(tf.concat([batch, tf.shape(scores)[1:]], 0), scores.dtype)
    return (
        tf.tensor_scatter_nd_update(all_ids, rows, ids),
        tf.tensor_scatter_nd_update(all_scores, rows, scores),
    )


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
