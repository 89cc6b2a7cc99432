"""`Translator`: translate with a trained model from Python, whether it is
a run directory, an exported SavedModel or a `Transformer` in memory.

All three run the same graph, `inference.TranslationGraph`: built in this
process from the weights, or loaded as the SavedModel that t2t-export (or
`export_saved_model`) wrote from it. Its `translate` signature takes the
beam size and alpha with each request and returns the n-best list with
scores, so every constructor gives the same translations for the same
weights. See docs/python_api.md.
"""

import tensorflow as tf
from absl import logging

from t2t_repro.config import DecodingOptions
from t2t_repro.data.vocabulary import make_tokenizer
from t2t_repro.decoding.precision import in_precision
from t2t_repro.inference import TranslationGraph, batches_by_length
from t2t_repro.serving import model_and_vocabulary

# beam_size, alpha and the batch size default to the command-line tools'.
_DEFAULTS = DecodingOptions()


class Translator:
    """Translates lists of sentences; build one with `from_run`,
    `from_saved_model` or `from_model`.

    Args:
        graph: a `TranslationGraph`, or one loaded from a SavedModel.
        batch_tokens: padded source tokens per decoding batch.

    Example, with the tests' toy run (more in docs/python_api.md)::

        translator = Translator.from_run("runs/x")
        translator.translate(["ein hund läuft eine katze"])
        # -> ['a dog runs a cat']
        translator.translate(["ein hund läuft eine katze"], n_best=2)
        # -> [[('a dog runs a cat', -0.42...), ('a dog runs gras', -3.74...)]]
    """

    def __init__(self, graph, batch_tokens=_DEFAULTS.batch_tokens):
        self.graph = graph
        self.batch_tokens = batch_tokens
        # Exports older than the request cap have none.
        cap = getattr(graph, "max_batch_sentences", None)
        self.max_batch_sentences = (
            _DEFAULTS.max_batch_sentences if cap is None else int(cap.numpy())
        )

    @classmethod
    def from_model(cls, model, vocabulary, precision=None):
        """A `Transformer` in memory and its SentencePiece model (the
        serialized proto's bytes, or a path to it). `precision`: None
        (the model as it is), "fp32", "bf16" or "auto" (t2t-translate's
        --precision)."""
        model, proto, _ = model_and_vocabulary(model, vocabulary)
        return cls(
            TranslationGraph(
                in_precision(model, precision), make_tokenizer(proto), _DEFAULTS
            )
        )

    @classmethod
    def from_run(cls, model_dir, checkpoint=None, precision=None):
        """A t2t-train run directory's latest checkpoint, or `checkpoint`:
        a path like MODEL_DIR/ckpt-950, or a run directory of its own
        such as t2t-average's MODEL_DIR/average."""
        model, proto, _ = model_and_vocabulary(model_dir, checkpoint=checkpoint)
        return cls.from_model(model, proto, precision)

    @classmethod
    def from_saved_model(cls, path):
        """A t2t-export version directory, e.g. exports/x/950."""
        import tensorflow_text  # noqa: F401  registers the SentencePiece ops

        if not tf.saved_model.contains_saved_model(path):
            raise FileNotFoundError(
                f"{path}: no SavedModel there (no "
                "saved_model.pb); give a version "
                "directory such as exports/x/950"
            )
        return cls(tf.saved_model.load(path))

    def translate(
        self, sentences, beam_size=_DEFAULTS.beam_size, alpha=_DEFAULTS.alpha, n_best=1
    ):
        """Translations of `sentences` (a list of str), in their order.

        Beam search with `beam_size` beams (1: greedy) and the length
        penalty ((5 + length) / 6) ** `alpha`. With `n_best` = 1, a list
        of str; with `n_best` > 1 (at most `beam_size`), per sentence a
        list of its `n_best` best (translation, score) pairs, best first,
        a score being log P(translation) / length penalty. Inputs longer
        than the model's max_length are cut (keeping EOS); how many is
        logged.
        """
        if not 1 <= n_best <= beam_size:
            raise ValueError(
                f"n_best={n_best} must be in [1, beam_size="
                f"{beam_size}]: beam search keeps beam_size "
                "hypotheses"
            )
        results = [None] * len(sentences)
        truncated = 0
        lengths = [len(sentence.split()) + 1 for sentence in sentences]
        for batch in batches_by_length(
            lengths, self.batch_tokens, self.max_batch_sentences
        ):
            outputs = self.graph.translate(
                inputs=tf.constant([sentences[i] for i in batch], tf.string),
                beam_size=tf.constant(beam_size, tf.int32),
                alpha=tf.constant(alpha, tf.float32),
            )
            texts = outputs["translations"][:, :n_best].numpy()
            scores = outputs["scores"][:, :n_best].numpy()
            for index, row_texts, row_scores in zip(batch, texts, scores):
                results[index] = [
                    (text.decode("utf-8"), float(score))
                    for text, score in zip(row_texts, row_scores)
                ]
            # Exports older than the `truncated` output report nothing.
            truncated += int(
                tf.reduce_sum(tf.cast(outputs.get("truncated", False), tf.int32))
            )
        if truncated:
            logging.warning(
                "%d of %d inputs had more subword tokens than "
                "the model's max_length and were truncated",
                truncated,
                len(sentences),
            )
        if n_best == 1:
            return [result[0][0] for result in results]
        return results
