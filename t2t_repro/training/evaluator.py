"""The dev-set evaluation a `Trainer` is handed: label-smoothed loss and
greedy sacreBLEU, logged to TensorBoard with sample translations and the
last layers' attention heads."""

import sacrebleu
import tensorflow as tf
from absl import logging

from t2t_repro.config import DecodingOptions
from t2t_repro.data import pipeline
from t2t_repro.data.vocabulary import make_tokenizer
from t2t_repro.inference import Translator
from t2t_repro.training.losses import smoothed_cross_entropy_stats
from t2t_repro.visualization import (KINDS, attention_maps, figure_png,
                                     plot_attention, translation_ids)

_SAMPLE_TRANSLATIONS = 5
# Dev BLEU is for choosing checkpoints, often: greedy is fast and ranks
# checkpoints like beam search does.
_DEV_DECODING = DecodingOptions(beam_size=1)


class DevEvaluator:
    """Scores a model on dev pairs.

    Args:
        dev_pairs: a tf.data.Dataset of (source, target) strings.
        vocab_proto: the run's SentencePiece model (decoded with the best
            segmentation, never sampled).
        max_length: the model's `max_length`.
        options: the run's `TrainingOptions` (label smoothing, batch size,
            overlong rule, `dev_bleu_sentences`).
    """

    def __init__(self, dev_pairs, vocab_proto, max_length, options):
        self.dev_pairs = dev_pairs
        self.vocab_proto = vocab_proto
        self.tokenizer = None
        self.max_length = max_length
        self.options = options
        self._model = self._translator = self._batch_loss = None

    def _bind(self, model):
        """The translator and compiled loss of `model` (built once)."""
        if model is self._model:
            return
        # Made with the model, not before the Trainer: a tokenizer made
        # before it was built had lost its resource by the first
        # evaluation ("SentencepieceResource does not exist").
        self.tokenizer = make_tokenizer(self.vocab_proto)
        self._model = model
        self._translator = Translator(model, self.tokenizer, _DEV_DECODING)

        @tf.function(reduce_retracing=True)
        def batch_loss(batch):
            (source, target_input), target_output = batch
            logits = model((source, target_input), training=False)
            return smoothed_cross_entropy_stats(
                target_output, logits, self.options.label_smoothing)[:2]
        self._batch_loss = batch_loss

    def loss(self, model):
        """Label-smoothed loss per target token on the dev set."""
        self._bind(model)
        batches = pipeline.batch_by_tokens(
            pipeline.fit_to_max_length(
                pipeline.tokenize_pairs(self.dev_pairs, self.tokenizer),
                self.max_length, self.options.overlong),
            self.options.batch_tokens, self.max_length)
        loss_sum = count = 0.0
        for batch in batches:
            batch_sum, batch_count = self._batch_loss(batch)
            loss_sum += float(batch_sum)
            count += float(batch_count)
        return loss_sum / max(count, 1.0)

    def translations(self, model):
        """(sources, references, greedy translations) of the dev set, or
        its first `dev_bleu_sentences`."""
        self._bind(model)
        dev_pairs = self.dev_pairs
        if self.options.dev_bleu_sentences:
            dev_pairs = dev_pairs.take(self.options.dev_bleu_sentences)
        pairs = list(dev_pairs.as_numpy_iterator())
        sources = [s.decode("utf-8") for s, _ in pairs]
        references = [t.decode("utf-8") for _, t in pairs]
        return sources, references, self._translator.translate(sources)

    def bleu(self, hypotheses, references):
        """(sacreBLEU, its signature) of the dev translations (tests replace
        it to script the scores that early stopping and best checkpoints
        see)."""
        metric = sacrebleu.BLEU()
        score = metric.corpus_score(hypotheses, [references]).score
        return score, str(metric.get_signature())

    def _write_attention_images(self, model, sentence):
        ids = translation_ids(self._translator, sentence)
        maps = attention_maps(model, self.tokenizer, sentence, ids)
        for kind in KINDS:
            weights, queries, keys = maps[kind]
            png = figure_png(plot_attention(
                weights, queries, keys, [weights.shape[0] - 1],
                range(weights.shape[1]), f"{kind} attention, last layer"))
            tf.summary.image(f"attention/{kind}",
                             tf.image.decode_png(png)[tf.newaxis])

    def __call__(self, model, step, writer):
        """{"loss", "bleu"} of `model`, written to `writer` at `step`."""
        sources, references, hypotheses = self.translations(model)
        bleu, signature = self.bleu(hypotheses, references)
        loss = self.loss(model)
        with writer.as_default(step=step):
            tf.summary.scalar("loss", loss)
            tf.summary.scalar("bleu", bleu)
            samples = "\n\n".join(
                f"**source:** {s}  \n**reference:** {r}  \n**output:** {h}"
                for s, r, h in list(zip(sources, references, hypotheses))[
                    :_SAMPLE_TRANSLATIONS])
            tf.summary.text("translations", samples)
            self._write_attention_images(model, sources[0])
        logging.info("step %d dev loss %.4f greedy sacreBLEU %.2f (%s)",
                     step, loss, bleu, signature)
        return {"loss": loss, "bleu": bleu}
