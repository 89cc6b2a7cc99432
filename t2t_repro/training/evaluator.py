"""The dev-set evaluation a `Trainer` is handed: label-smoothed loss,
perplexity per subword piece and greedy sacreBLEU, logged to TensorBoard
with sample translations and the last layer's attention heads."""

import dataclasses
import math

import numpy as np
import tensorflow as tf
from absl import logging

from t2t_repro.config import DecodingOptions
from t2t_repro.data import pipeline
from t2t_repro.data.vocabulary import make_tokenizer
from t2t_repro.evaluation import corpus_bleu, sacrebleu_metric, translate_pairs
from t2t_repro.inference.translators import ModelTranslator
from t2t_repro.parsing import score_parses, tree_of_linearisation
from t2t_repro.training.losses import evaluation_stats
from t2t_repro.visualization import (
    KINDS,
    attention_maps,
    figure_png,
    plot_attention,
    translation_ids,
)

_SAMPLE_TRANSLATIONS = 5


def perplexity_of(negative_log_likelihood):
    """exp(NLL per piece), or inf where that overflows a float (NLL over
    ~709, a diverged model): a dev evaluation must never end the run."""
    try:
        return math.exp(negative_log_likelihood)
    except OverflowError:
        return math.inf


class DevEvaluator:
    """Scores a model on dev pairs.

    Args:
        dev_pairs: a tf.data.Dataset of (source, target) strings.
        vocab_proto: the run's SentencePiece model (decoded with the best
            segmentation, never sampled).
        max_length: the model's `max_length`.
        options: the run's `TrainingOptions` (label smoothing, batch size,
            overlong rule, `dev_bleu_sentences`).
        decoding: `DecodingOptions` whose length limit and batch sizes the
            dev translations use (always greedy), and whose
            `sacrebleu_tokenize` scores them.
        parsing: the pairs are (words, linearised tree): also log the
            bracket F1 of the greedy parses (checkpoints are still ranked
            by BLEU of the linearisations).
        target_lang: the dev targets' language, which chooses sacreBLEU's
            tokenizer unless `decoding` names one.
    """

    def __init__(
        self,
        dev_pairs,
        vocab_proto,
        max_length,
        options,
        decoding=DecodingOptions(),
        parsing=False,
        target_lang=None,
    ):
        self.dev_pairs = dev_pairs
        self.vocab_proto = vocab_proto
        self.tokenizer = None
        self.max_length = max_length
        self.options = options
        # Dev BLEU is for choosing checkpoints, often: greedy is fast and
        # ranks checkpoints like beam search does.
        # One search: training keeps every op on all cores, where a second
        # search does not pay.
        self.decoding = dataclasses.replace(decoding, beam_size=1, parallel_searches=1)
        self.parsing = parsing
        # Made once: a tokenizer that cannot work fails (or warns) before
        # training, not at every evaluation.
        self._bleu_metric = sacrebleu_metric(target_lang, decoding.sacrebleu_tokenize)
        # The model `_bind` made the translator and compiled loss for.
        self._model = None

    def _bind(self, model):
        """The translator and compiled loss of `model` (built once)."""
        if model is self._model:
            return
        # Made with the model, not before the Trainer: a tokenizer made
        # before it was built had lost its resource by the first
        # evaluation ("SentencepieceResource does not exist").
        self.tokenizer = make_tokenizer(self.vocab_proto)
        self._model = model
        self._translator = ModelTranslator(model, self.tokenizer, self.decoding)

        @tf.function(reduce_retracing=True, autograph=False)
        def batch_loss(batch):
            (source, target_input), target_output = batch
            logits = model((source, target_input), training=False)
            return tf.stack(
                evaluation_stats(target_output, logits, self.options.label_smoothing)
            )

        self._batch_loss = batch_loss

    def loss(self, model):
        """(label-smoothed loss, negative log-likelihood) per target token
        on the dev set."""
        self._bind(model)
        batches = pipeline.batch_by_tokens(
            pipeline.fit_to_max_length(
                pipeline.tokenize_pairs(self.dev_pairs, self.tokenizer),
                self.max_length,
                self.options.overlong,
            ),
            self.options.batch_tokens,
            self.max_length,
        )
        smoothed, negative_log_likelihood, count = sum(
            (self._batch_loss(batch).numpy().astype(float) for batch in batches),
            np.zeros(3),
        )
        return (smoothed / max(count, 1.0), negative_log_likelihood / max(count, 1.0))

    def translations(self, model):
        """(sources, references, greedy translations) of the dev set, or
        its first `dev_bleu_sentences`."""
        self._bind(model)
        dev_pairs = self.dev_pairs
        if self.options.dev_bleu_sentences:
            dev_pairs = dev_pairs.take(self.options.dev_bleu_sentences)
        # Sentences done of the total and their rate on stderr: a long dev
        # set would otherwise hold training up without a word.
        return translate_pairs(self._translator, dev_pairs, progress=True)

    def bleu(self, hypotheses, references):
        """(sacreBLEU, its signature) of the dev translations (tests replace
        it to script the scores that early stopping and best checkpoints
        see)."""
        bleu, signature = corpus_bleu(self._bleu_metric, hypotheses, references)
        return bleu.score, signature

    def _write_attention_images(self, model, sentence):
        """The last layer's heads on `sentence` (the first dev sentence,
        so that images compare across steps): one image per head, large
        enough to read every piece; none if it has nothing to translate
        (characters the vocabulary drops, which the data checks keep)."""
        try:
            ids = translation_ids(self._translator, sentence)
        except ValueError:
            return
        maps = attention_maps(model, self.tokenizer, sentence, ids)
        for kind in KINDS:
            weights, queries, keys = maps[kind]
            last = weights.shape[0] - 1
            for head in range(weights.shape[1]):
                png = figure_png(
                    plot_attention(
                        weights, queries, keys, [last], [head], f"{kind} attention"
                    )
                )
                tf.summary.image(
                    f"attention/{kind}/head_{head}",
                    tf.image.decode_png(png)[tf.newaxis],
                )

    def __call__(self, model, step, writer):
        """{"loss", "perplexity", "bleu"} of `model` (perplexity per
        subword piece, without label smoothing), written to `writer` at
        `step`."""
        sources, references, hypotheses = self.translations(model)
        bleu, signature = self.bleu(hypotheses, references)
        loss, negative_log_likelihood = self.loss(model)
        perplexity = perplexity_of(negative_log_likelihood)
        with writer.as_default(step=step):
            tf.summary.scalar("loss", loss)
            tf.summary.scalar("perplexity", perplexity)
            tf.summary.scalar("bleu", bleu)
            if self.parsing:
                f1 = score_parses(
                    hypotheses,
                    [tree_of_linearisation(s, r) for s, r in zip(sources, references)],
                )["bracket_f1"]
                tf.summary.scalar("bracket_f1", f1)
                logging.info("step %d dev greedy bracket F1 %.2f", step, f1)
            samples = "\n\n".join(
                f"**source:** {s}  \n**reference:** {r}  \n**output:** {h}"
                for s, r, h in list(zip(sources, references, hypotheses))[
                    :_SAMPLE_TRANSLATIONS
                ]
            )
            tf.summary.text("translations", samples)
            self._write_attention_images(model, sources[0])
        logging.info(
            "step %d dev loss %.4f perplexity %.2f greedy sacreBLEU %.2f (%s)",
            step,
            loss,
            perplexity,
            bleu,
            signature,
        )
        return {"loss": loss, "perplexity": perplexity, "bleu": bleu}
