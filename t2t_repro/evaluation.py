"""Scoring translations: sacreBLEU, chrF, the paper's tokenized BLEU and
the Multi30k literature's lowercased tokenized BLEU; parses (a treebank
corpus) with EVALB's labelled bracketing. A test set (`score_corpus`, for
t2t-eval and t2t-train's last step) and the dev set
(training/evaluator.py) are translated by `translate_pairs` and scored by
`corpus_bleu`."""

import re

import sacrebleu
from absl import logging

from t2t_repro.config import ConfigError, DecodingOptions
from t2t_repro.inference.translators import ModelTranslator

# tensor2tensor's get_ende_bleu.sh: after Moses tokenization, hyphenated
# compounds are split so each part counts as a word.
_COMPOUND_HYPHEN = re.compile(r"(\S)-(\S)")
TOKENIZED_BLEU_NOTE = (
    "tokenized BLEU with compound splitting (tensor2tensor get_ende_bleu: "
    "Moses tokenizer, ##AT##-##AT##, multi-bleu); NOT comparable to "
    "sacreBLEU, only to the paper's table"
)
LC_TOK_BLEU_NOTE = (
    "Moses-normalised, tokenized, lowercased, as the Multi30k literature "
    "(multi-bleu); NOT sacreBLEU"
)
# sacreBLEU's tokenizer for target languages that 13a would leave
# unsegmented. The MeCab ones need sacrebleu's [ja]/[ko] extras; without
# them, characters are the words.
_SACREBLEU_TOKENIZE = {"zh": "zh", "ja": "ja-mecab", "ko": "ko-mecab"}
_WITHOUT_MECAB = "char"


def primary_language(code):
    """A language code's primary subtag, as the tokenizers key rules by:
    "zh-CN", "zh_Hans" and "ZH" are "zh"; None and "" stay."""
    return code.replace("_", "-").split("-")[0].lower() if code else code


def sacrebleu_metric(target_lang, tokenize=None):
    """sacreBLEU's BLEU with `tokenize` if given, else with the tokenizer
    for `target_lang` (sacreBLEU's 13a for any other language or none).
    Raises ConfigError if the given tokenizer's extra is not installed."""
    if tokenize:
        try:
            return sacrebleu.BLEU(tokenize=tokenize)
        except RuntimeError as error:  # sacreBLEU's "pip install ..." text
            raise ConfigError(
                f"--sacrebleu_tokenize={tokenize}: " + " ".join(str(error).split())
            ) from error
    target_lang = primary_language(target_lang)
    tokenize = _SACREBLEU_TOKENIZE.get(target_lang, sacrebleu.BLEU.TOKENIZER_DEFAULT)
    try:
        return sacrebleu.BLEU(tokenize=tokenize)
    except RuntimeError:
        logging.warning(
            "sacreBLEU's %s tokenizer needs `pip install "
            "sacrebleu[%s]`: scoring %s with the %s tokenizer "
            "instead",
            tokenize,
            target_lang,
            target_lang,
            _WITHOUT_MECAB,
        )
        return sacrebleu.BLEU(tokenize=_WITHOUT_MECAB)


def multi_bleu(hypotheses, references):
    """multi-bleu.perl's BLEU of tokenized text: split at spaces only,
    case-sensitive, no smoothing."""
    return (
        sacrebleu.BLEU(tokenize="none", smooth_method="none", force=True)
        .corpus_score(hypotheses, [references])
        .score
    )


def _moses_lang(lang):
    """sacremoses' own default, English, without a target language."""
    return primary_language(lang) or "en"


def split_compounds(tokenized):
    return _COMPOUND_HYPHEN.sub(r"\1 ##AT##-##AT## \2", tokenized)


def paper_tokenized(sentences, lang):
    """Moses-tokenized, compound-split text, as get_ende_bleu.sh makes it."""
    from sacremoses import MosesTokenizer

    tokenizer = MosesTokenizer(lang=_moses_lang(lang))
    return [split_compounds(tokenizer.tokenize(s, return_str=True)) for s in sentences]


def literature_tokenized(sentences, lang):
    """Lowercased, Moses punctuation-normalised and tokenized text, as
    multi30k/dataset's data/task1/tok/*.lc.norm.tok.* references that the
    Multi30k literature scores against (the raw val and test_2016_flickr
    files become exactly those)."""
    from sacremoses import MosesPunctNormalizer, MosesTokenizer

    lang = _moses_lang(lang)
    # perl_parity: normalize-punctuation.perl turns ’ into " (val.fr:861,
    # "d’œil" is "d &quot; œil" there).
    normalizer = MosesPunctNormalizer(lang, perl_parity=True)
    tokenizer = MosesTokenizer(lang)
    # The Perl script reads each line with its newline. Its rule turning
    # '."' into '".' (de, fr) spares a quote that ends the sentence, but
    # takes the newline for a character after it (val.de:656 and
    # test_2016_flickr.fr:694 end in '" .' there).
    return [
        tokenizer.tokenize(
            normalizer.normalize(s.lower() + "\n"), return_str=True, escape=True
        )
        for s in sentences
    ]


def corpus_bleu(bleu_metric, hypotheses, references):
    """(sacreBLEU's `BLEUScore` of `hypotheses` against `references`, the
    signature of `bleu_metric`, a `sacrebleu_metric`)."""
    return (
        bleu_metric.corpus_score(hypotheses, [references]),
        str(bleu_metric.get_signature()),
    )


def score_translations(hypotheses, references, target_lang, bleu_metric=None):
    """A JSON-ready dict of scores of `hypotheses` against `references`;
    `bleu_metric`: sacreBLEU's (default: `sacrebleu_metric(target_lang)`)."""
    if bleu_metric is None:
        bleu_metric = sacrebleu_metric(target_lang)
    bleu, bleu_signature = corpus_bleu(bleu_metric, hypotheses, references)
    chrf_metric = sacrebleu.CHRF()
    chrf = chrf_metric.corpus_score(hypotheses, [references])
    return {
        "sentences": len(hypotheses),
        "sacrebleu": round(bleu.score, 2),
        "sacrebleu_signature": bleu_signature,
        "sacrebleu_detail": str(bleu),
        "chrf": round(chrf.score, 2),
        "chrf_signature": str(chrf_metric.get_signature()),
        "tokenized_bleu": round(
            multi_bleu(
                paper_tokenized(hypotheses, target_lang),
                paper_tokenized(references, target_lang),
            ),
            2,
        ),
        "tokenized_bleu_note": TOKENIZED_BLEU_NOTE,
        "lc_tok_bleu": round(
            multi_bleu(
                literature_tokenized(hypotheses, target_lang),
                literature_tokenized(references, target_lang),
            ),
            2,
        ),
        "lc_tok_bleu_note": LC_TOK_BLEU_NOTE,
    }


def format_scores(scores):
    if "bracket_f1" in scores:
        from t2t_repro.parsing import format_parse_scores

        return format_parse_scores(scores)
    return (
        f"sacreBLEU {scores['sacrebleu']:.2f} "
        f"({scores['sacrebleu_signature']})\n"
        f"chrF {scores['chrf']:.2f} ({scores['chrf_signature']})\n"
        f"tokenized BLEU {scores['tokenized_bleu']:.2f} "
        f"[{scores['tokenized_bleu_note']}]\n"
        f"lowercased tokenized BLEU {scores['lc_tok_bleu']:.2f} "
        f"[{scores['lc_tok_bleu_note']}]"
    )


def translate_pairs(translator, pairs, progress=False):
    """(sources, references, translations) of `pairs`, a tf.data.Dataset
    of (source, target) strings, the sources translated by `translator` (a
    `BatchingTranslator`; with `progress`, reporting how far it got)."""
    pairs = list(pairs.as_numpy_iterator())
    sources = [s.decode("utf-8") for s, _ in pairs]
    references = [t.decode("utf-8") for _, t in pairs]
    return sources, references, translator.translate(sources, progress=progress)


def score_corpus(model, tokenizer, corpus, decoding=DecodingOptions(), progress=False):
    """Translates a `Corpus` and returns (hypotheses, references, scores):
    sacreBLEU and friends, or EVALB's for a treebank."""
    # Before translating: a tokenizer that cannot work fails now, not after
    # the whole test set.
    bleu_metric = (
        None
        if corpus.trees_path
        else sacrebleu_metric(corpus.target_lang, decoding.sacrebleu_tokenize)
    )
    _, references, hypotheses = translate_pairs(
        ModelTranslator(model, tokenizer, decoding),
        corpus.pairs(keep_empty=True),
        progress,
    )
    if corpus.trees_path:
        from t2t_repro.parsing import score_parses

        return hypotheses, references, score_parses(hypotheses, corpus.trees)
    return (
        hypotheses,
        references,
        score_translations(hypotheses, references, corpus.target_lang, bleu_metric),
    )
