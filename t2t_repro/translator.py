"""`Translator`: translate with a trained model from Python, whether it is
a run directory, an exported SavedModel or a `Transformer` in memory.

All three run the same graph, `inference.graph.TranslationGraph`: built
in this process from the weights, or loaded as the SavedModel that
t2t-export (or `export_saved_model`) wrote from it. Its `translate`
signature takes the beam size and alpha with each request and returns the
n-best list with scores, so every constructor gives the same translations
for the same weights. See docs/python_api.md.
"""

import math
import numbers

from t2t_repro.config import DecodingOptions
from t2t_repro.data.vocabulary import make_tokenizer
from t2t_repro.decoding.precision import in_precision
from t2t_repro.inference.batching import (
    n_best_in_order,
    signature_n_best,
    warn_truncated,
)
from t2t_repro.inference.exports import (
    check_export_limits,
    load_export,
    refuse_oversized,
    request_byte_limit,
)
from t2t_repro.inference.graph import TranslationGraph
from t2t_repro.serving import model_and_vocabulary

# beam_size, alpha and the batch size default to the command-line tools'.
_DEFAULTS = DecodingOptions()


def _sentence_list(sentences):
    """`sentences` as a list of str or bytes; TypeError for one sentence
    given alone (a str would be translated character by character) or an
    item that is not text."""
    if isinstance(sentences, (str, bytes)):
        raise TypeError(
            "sentences: a list of sentences, not one str or bytes; "
            "translate([sentence]) for one"
        )
    try:
        sentences = list(sentences)  # a generator is read once
    except TypeError:
        raise TypeError(
            f"sentences is {type(sentences).__name__}, not a list of str or bytes"
        ) from None
    for index, sentence in enumerate(sentences):
        if not isinstance(sentence, (str, bytes)):
            raise TypeError(
                f"sentences[{index}] is {type(sentence).__name__}, not str or bytes"
            )
    return sentences


def _check_search_arguments(beam_size, alpha, n_best):
    """TypeError or ValueError naming the first of `translate`'s search
    arguments that beam search cannot take (inside the graph it would be
    an InvalidArgumentError or a traceback from a tensor slice)."""
    for name, value in (("beam_size", beam_size), ("n_best", n_best)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{name}={value!r} is not an int")
        if value < 1:
            raise ValueError(f"{name}={value} must be >= 1")
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
        raise TypeError(f"alpha={alpha!r} is not a number")
    # Written so that NaN, which compares false with everything, is refused.
    if not (math.isfinite(alpha) and alpha >= 0):
        raise ValueError(f"alpha={alpha} must be finite and >= 0")
    if n_best > beam_size:
        raise ValueError(
            f"n_best={n_best} must be in [1, beam_size={beam_size}]: beam "
            "search keeps beam_size hypotheses"
        )


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
        if not hasattr(graph, "translate") or not hasattr(graph, "max_batch_sentences"):
            raise TypeError(
                f"Translator({graph!r}): a translation graph; for a run "
                "directory use Translator.from_run, for an export "
                "Translator.from_saved_model, for a Transformer in memory "
                "Translator.from_model"
            )
        self.graph = graph
        self.batch_tokens = batch_tokens
        self.max_batch_sentences = int(graph.max_batch_sentences.numpy())
        self.max_request_bytes = request_byte_limit(graph)

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
        such as the MODEL_DIR/average that
        t2t-train --average_last writes."""
        model, proto, _ = model_and_vocabulary(model_dir, checkpoint=checkpoint)
        return cls.from_model(model, proto, precision)

    @classmethod
    def from_saved_model(cls, path):
        """A t2t-export version directory, e.g. exports/x/950."""
        return cls(load_export(path))

    def _check_export_limits(self, sentences, beam_size, alpha):
        """An export's limits, checked before its graph refuses a request
        with an InvalidArgumentError naming a position in a batch sorted
        by length. A graph built in this process has none."""
        if not hasattr(self.graph, "max_beam_size"):
            return
        check_export_limits(self.graph, "the SavedModel", alpha, beam_size, prefix="")
        refuse_oversized(
            sentences,
            int(self.graph.max_sentence_bytes.numpy()),
            name_of=lambda index: f"sentences[{index}]",
            export="the SavedModel",
            prefix="",
        )

    def translate(
        self, sentences, beam_size=_DEFAULTS.beam_size, alpha=_DEFAULTS.alpha, n_best=1
    ):
        """Translations of `sentences` (a list of str), in their order.

        Beam search with `beam_size` beams (1: greedy) and the length
        penalty ((5 + length) / 6) ** `alpha`. With `n_best` = 1, a list
        of str; with `n_best` > 1 (at most `beam_size`), per sentence a
        list of its `n_best` best (translation, score) pairs, best first,
        a score being log P(translation) / length penalty. A sentence
        that tokenizes to nothing (empty, whitespace) gets "", score 0.
        Inputs longer than the model's max_length are cut (keeping EOS);
        how many is logged.
        """
        sentences = _sentence_list(sentences)
        _check_search_arguments(beam_size, alpha, n_best)
        self._check_export_limits(sentences, beam_size, alpha)
        results, truncated = n_best_in_order(
            lambda inputs: signature_n_best(
                self.graph.translate, inputs, beam_size, alpha, n_best
            ),
            sentences,
            self.batch_tokens,
            self.max_batch_sentences,
            progress=None,
            max_bytes=self.max_request_bytes,
        )
        warn_truncated(truncated, len(sentences))
        if n_best == 1:
            return [result[0][0] for result in results]
        return results
