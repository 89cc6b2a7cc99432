"""Scoring translations of a test set with sacreBLEU."""

import sacrebleu
from absl import logging

from t2t_repro.decoding.translator import Translator


def score_corpus(model, tokenizer, corpus, decode_fn=None, progress=False):
    """Translates `corpus` and returns (hypotheses, sacrebleu BLEU, chrF).

    Prints BLEU with its signature, the only way BLEU numbers compare.
    """
    sources = [s.decode("utf-8") for s, _ in
               corpus.pairs().as_numpy_iterator()]
    references = [t.decode("utf-8") for _, t in
                  corpus.pairs().as_numpy_iterator()]
    kwargs = {"decode_fn": decode_fn} if decode_fn else {}
    hypotheses = Translator(model, tokenizer, **kwargs).translate(
        sources, progress=progress)
    bleu_metric = sacrebleu.BLEU()
    bleu = bleu_metric.corpus_score(hypotheses, [references])
    chrf = sacrebleu.CHRF().corpus_score(hypotheses, [references])
    print(f"sacreBLEU {bleu.score:.2f} ({bleu_metric.get_signature()}) on "
          f"{corpus.source_path} ({len(sources)} sentences)")
    print(f"chrF {chrf.score:.2f}")
    logging.info("%s", bleu)
    return hypotheses, bleu, chrf
