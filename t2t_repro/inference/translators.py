"""The translators the tools use, each a `BatchingTranslator` with fixed
`DecodingOptions`: `ModelTranslator` runs a `TranslationGraph` of a model
in this process (t2t-eval, t2t-translate --model_dir, dev BLEU,
t2t-attention), `SavedModelTranslator` an export's `translate` signature
(t2t-translate --saved_model). ct2.py has the CTranslate2 one."""

from t2t_repro.config import DecodingOptions
from t2t_repro.inference.batching import BatchingTranslator, signature_n_best
from t2t_repro.inference.exports import (
    check_export_limits,
    load_export,
    request_byte_limit,
)
from t2t_repro.inference.graph import TranslationGraph


class ModelTranslator(BatchingTranslator):
    """Translates with a model in this process, through `TranslationGraph`.

    Args:
        model: a `Transformer`.
        tokenizer: the run's `tensorflow_text.SentencepieceTokenizer`.
        decoding: `DecodingOptions` (beam size, alpha, batch size, XLA).

    Usage, with a trained run (see `checkpoints.load_model`)::

        model, proto, _ = load_model("runs/multi30k")
        ModelTranslator(model, make_tokenizer(proto)).translate(["A dog runs."])
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
        return signature_n_best(
            self.graph.translate,
            sentences,
            self.decoding.beam_size,
            self.decoding.alpha,
            n_best,
        )


class SavedModelTranslator(BatchingTranslator):
    """Translates with an exported SavedModel's `translate` signature."""

    def __init__(self, path, decoding=DecodingOptions()):
        super().__init__(decoding)
        loaded = load_export(path)
        check_export_limits(loaded, path, decoding.alpha, decoding.beam_size)
        self._signature = loaded.signatures["translate"]
        self._export_cap = int(loaded.max_batch_sentences.numpy())
        self.max_sentence_bytes = int(loaded.max_sentence_bytes.numpy())
        self.max_request_bytes = request_byte_limit(loaded)

    def _max_batch_sentences(self):
        return min(self.decoding.max_batch_sentences, self._export_cap)

    def _translate_batch(self, sentences):
        texts, scores, truncated = self._n_best_batch(sentences, 1)
        return texts[:, 0], scores[:, 0], truncated

    def _n_best_batch(self, sentences, n_best):
        return signature_n_best(
            self._signature,
            sentences,
            self.decoding.beam_size,
            self.decoding.alpha,
            n_best,
        )
