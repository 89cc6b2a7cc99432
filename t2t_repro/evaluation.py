"""Scoring translations: sacreBLEU, chrF and the paper's tokenized BLEU;
parses (a treebank corpus) with EVALB's labelled bracketing."""

import re

import sacrebleu

from t2t_repro.config import DecodingOptions
from t2t_repro.inference import Translator

# tensor2tensor's get_ende_bleu.sh: after Moses tokenization, hyphenated
# compounds are split so each part counts as a word.
_COMPOUND_HYPHEN = re.compile(r"(\S)-(\S)")
TOKENIZED_BLEU_NOTE = (
    "tokenized BLEU with compound splitting (tensor2tensor get_ende_bleu: "
    "Moses tokenizer, ##AT##-##AT##, multi-bleu); NOT comparable to "
    "sacreBLEU, only to the paper's table")


def split_compounds(tokenized):
    return _COMPOUND_HYPHEN.sub(r"\1 ##AT##-##AT## \2", tokenized)


def paper_tokenized(sentences, lang):
    """Moses-tokenized, compound-split text, as get_ende_bleu.sh makes it."""
    from sacremoses import MosesTokenizer

    tokenizer = MosesTokenizer(lang=lang)
    return [split_compounds(tokenizer.tokenize(s, return_str=True))
            for s in sentences]


def score_translations(hypotheses, references, target_lang):
    """A JSON-ready dict of scores of `hypotheses` against `references`."""
    bleu_metric = sacrebleu.BLEU()
    bleu = bleu_metric.corpus_score(hypotheses, [references])
    chrf_metric = sacrebleu.CHRF()
    chrf = chrf_metric.corpus_score(hypotheses, [references])
    # multi-bleu.perl: already tokenized, case-sensitive, no smoothing.
    tokenized = sacrebleu.BLEU(tokenize="none", smooth_method="none",
                               force=True).corpus_score(
        paper_tokenized(hypotheses, target_lang),
        [paper_tokenized(references, target_lang)])
    return {
        "sentences": len(hypotheses),
        "sacrebleu": round(bleu.score, 2),
        "sacrebleu_signature": str(bleu_metric.get_signature()),
        "sacrebleu_detail": str(bleu),
        "chrf": round(chrf.score, 2),
        "chrf_signature": str(chrf_metric.get_signature()),
        "tokenized_bleu": round(tokenized.score, 2),
        "tokenized_bleu_note": TOKENIZED_BLEU_NOTE,
    }


def format_scores(scores):
    if "bracket_f1" in scores:
        from t2t_repro.parsing import format_parse_scores

        return format_parse_scores(scores)
    return (f"sacreBLEU {scores['sacrebleu']:.2f} "
            f"({scores['sacrebleu_signature']})\n"
            f"chrF {scores['chrf']:.2f} ({scores['chrf_signature']})\n"
            f"tokenized BLEU {scores['tokenized_bleu']:.2f} "
            f"[{scores['tokenized_bleu_note']}]")


def score_corpus(model, tokenizer, corpus, decoding=DecodingOptions(),
                 progress=False):
    """Translates a `Corpus` and returns (hypotheses, references, scores):
    sacreBLEU and friends, or EVALB's for a treebank."""
    pairs = list(corpus.pairs().as_numpy_iterator())
    sources = [s.decode("utf-8") for s, _ in pairs]
    references = [t.decode("utf-8") for _, t in pairs]
    hypotheses = Translator(model, tokenizer, decoding).translate(
        sources, progress=progress)
    if corpus.trees_path:
        from t2t_repro.parsing import score_parses

        return hypotheses, references, score_parses(hypotheses,
                                                    corpus.trees)
    return hypotheses, references, score_translations(
        hypotheses, references, corpus.target_lang)
