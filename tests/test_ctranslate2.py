"""The CTranslate2 export (t2t_repro/ct2.py): the same greedy token ids
and scores as our decoder (but at near-ties, on a model that has no
margin), beam search that agrees once rescored with our length penalty,
int8 that translates most sentences as float32 does, and the t2t-export /
t2t-translate flags."""

import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers.margins import MARGIN, teacher_forced_margins, translated_with_a_margin
from helpers.processes import run_python
from helpers.toy_run import toy_pairs, toy_trainer
from helpers.vocab_for_tests import tiny_vocab
from t2t_repro.checkpoints import load_model
from t2t_repro.config import (
    BOS_ID,
    EOS_ID,
    EXTRA_DECODE_LENGTH,
    PAD_ID,
    ConfigError,
    DecodingOptions,
    MissingExtraError,
    TransformerConfig,
)
from t2t_repro.ct2 import CTranslate2Translator, export_ctranslate2, transformer_spec
from t2t_repro.data.vocabulary import make_tokenizer, tokenize_sources
from t2t_repro.decoding.common import next_token_log_probs
from t2t_repro.decoding.greedy import greedy_decode
from t2t_repro.inference.translators import ModelTranslator
from t2t_repro.model import Transformer

# The quickstart's shape (flags/multi30k.cfg) over the tests' vocabulary.
QUICKSTART_SIZED = TransformerConfig(
    vocab_size=int(make_tokenizer(tiny_vocab()).vocab_size()),
    d_model=256,
    num_heads=4,
    d_ff=512,
    num_encoder_layers=3,
    num_decoder_layers=3,
    dropout=0.0,
    max_length=100,
)


def _toy_sources_and_references():
    pairs = list(toy_pairs().as_numpy_iterator())
    return ([s.decode() for s, _ in pairs], [t.decode() for _, t in pairs])


def _greedy_both_ways(model, tokenizer, ct2_dir, sentences):
    """((ids, log_probs), (ids, log_probs)): our greedy outputs and
    CTranslate2's, ids with EOS and padding dropped, log P of each output
    with its EOS."""
    ids, _ = tokenize_sources(
        tokenizer, tf.constant(sentences), model.config.max_length
    )
    output, log_probs = tf.function(lambda x: greedy_decode(model, x))(ids)
    ours = [
        [i for i in row if i not in (PAD_ID, EOS_ID)] for row in output.numpy().tolist()
    ]
    translator = CTranslate2Translator(ct2_dir, DecodingOptions(beam_size=1))
    sources = [[translator.tokens[i] for i in row if i] for row in ids.numpy().tolist()]
    # One sentence per call: CTranslate2's length limit is per batch, ours
    # (input + 50) per sentence. With no length penalty its score is the
    # output's log P.
    results = [
        translator.translator.translate_batch(
            [source],
            beam_size=1,
            max_decoding_length=len(source) + EXTRA_DECODE_LENGTH,
            suppress_sequences=[["<blank>"], ["<s>"]],
            return_scores=True,
            length_penalty=0.0,
        )[0]
        for source in sources
    ]
    theirs = [[translator.ids[t] for t in r.hypotheses[0]] for r in results]
    their_log_probs = np.array([r.scores[0] for r in results])
    return (ours, log_probs.numpy()), (theirs, their_log_probs)


# Where our greedy output and CTranslate2's part, |log P(ours) - log P(its)|
# under our model. Both compute in float32 but round differently (their
# own GEMMs and fusions): on the quickstart-sized model below their scores
# of the same outputs differed by 4e-7 nats per token (2e-5 per sentence,
# 2026-11-25), and the closest call along our outputs was 0.022 nats. A
# wrong weight or mask moves log-probabilities by far more than this.
CT2_NEAR_TIE = 1e-2
# The tolerance on their log P of one output (and on beam scores under our
# length penalty): 50x that 2e-5.
CT2_SCORE_ATOL = 1e-3
# Of the quickstart-sized model's 64 outputs, all were the same when
# written: 3 may part at a near-tie.
MIN_IDENTICAL = 0.95


def _first_difference_is_a_near_tie(model, source_ids, ours, theirs):
    """Whether `ours` and `theirs` (one sentence's output ids, EOS
    dropped) part at a token our `model` all but tied with theirs."""
    index = next(
        i for i, (a, b) in enumerate(zip(ours + [EOS_ID], theirs + [EOS_ID])) if a != b
    )
    target_in = np.array([[BOS_ID] + ours[:index]], np.int32)
    logits = model((source_ids[np.newaxis], target_in), training=False)
    log_probs = next_token_log_probs(logits[:, index], tf.constant(index == 0)).numpy()[
        0
    ]
    ours_next, theirs_next = ((ids + [EOS_ID])[index] for ids in (ours, theirs))
    return abs(log_probs[ours_next] - log_probs[theirs_next]) < CT2_NEAR_TIE


@pytest.mark.slow
def test_quickstart_sized_model_gives_the_same_greedy_ids_but_at_near_ties(tmp_path):
    # The quickstart's layers, briefly trained on the toy pairs: varied
    # outputs, some running to the length limit, from a model that has
    # not learned them with a margin. So no exact equality: a near-tie may
    # go either way on some CPU.
    trainer = toy_trainer(
        tmp_path / "run",
        60,
        config=QUICKSTART_SIZED,
        batch_tokens=256,
        warmup_steps=20,
        learning_rate_scale=0.3,
        checkpoint_every=60,
    )
    trainer.train()
    ct2_dir = export_ctranslate2(str(tmp_path / "run"), str(tmp_path / "ct2"))
    sources, _ = _toy_sources_and_references()
    (ours, our_log_probs), (theirs, their_log_probs) = _greedy_both_ways(
        trainer.model, make_tokenizer(tiny_vocab()), ct2_dir, sources
    )
    assert len(set(map(tuple, ours))) > 4 and max(map(len, ours)) > 50
    same = np.array([a == b for a, b in zip(ours, theirs)])
    assert same.mean() >= MIN_IDENTICAL, np.flatnonzero(~same)
    np.testing.assert_allclose(
        their_log_probs[same], our_log_probs[same], atol=CT2_SCORE_ATOL
    )
    source_ids, _ = tokenize_sources(
        make_tokenizer(tiny_vocab()), tf.constant(sources), QUICKSTART_SIZED.max_length
    )
    for i in np.flatnonzero(~same):
        assert _first_difference_is_a_near_tie(
            trainer.model, source_ids.numpy()[i], ours[i], theirs[i]
        ), i


@pytest.fixture(scope="module")
def toy_ct2(toy_run_dir, tmp_path_factory):
    return export_ctranslate2(toy_run_dir, str(tmp_path_factory.mktemp("ct2") / "fp32"))


def test_trained_model_greedy_ids_and_beam_translations_agree(toy_run_dir, toy_ct2):
    model, proto, _ = load_model(toy_run_dir)
    tokenizer = make_tokenizer(proto)
    sources, targets = _toy_sources_and_references()
    # Every token learned by a nat or more: rounding that differs between
    # the engines cannot flip one, so the greedy ids compare exactly.
    margins = teacher_forced_margins(
        model,
        tokenizer.tokenize(sources).to_tensor(),
        tokenizer.tokenize(targets).to_tensor().numpy(),
    )
    assert margins.min() > MARGIN, np.sort(margins)[:5]
    (ours, our_log_probs), (theirs, their_log_probs) = _greedy_both_ways(
        model, tokenizer, toy_ct2, sources
    )
    assert ours == theirs
    np.testing.assert_allclose(their_log_probs, our_log_probs, atol=CT2_SCORE_ATOL)
    # And beam search finds each best hypothesis by a margin, so the
    # engines pick the same one.
    assert translated_with_a_margin(model, tokenizer, sources).all()
    beam = DecodingOptions(beam_size=4)
    ours, our_scores = ModelTranslator(
        model, make_tokenizer(proto), beam
    ).translate_with_scores(sources)
    theirs, their_scores = CTranslate2Translator(toy_ct2, beam).translate_with_scores(
        sources
    )
    assert theirs == ours
    # Same hypothesis, same score under our length penalty.
    np.testing.assert_allclose(their_scores, our_scores, atol=CT2_SCORE_ATOL)


def test_an_input_with_nothing_to_translate_is_not_decoded(toy_ct2):
    """As the SavedModel answers it (tests/test_serving.py): "", score 0,
    in its place among decoded sentences, or in a batch of nothing else."""
    translator = CTranslate2Translator(toy_ct2, DecodingOptions(beam_size=4))
    texts, scores = translator.translate_with_scores(
        ["ein hund", "", " \t ", "\ufeff", "eine katze"]
    )
    assert texts[1:4] == ["", "", ""] and scores[1:4] == [0.0, 0.0, 0.0]
    assert texts[0] and texts[4] and scores[0] < 0 and scores[4] < 0
    assert translator.translate_with_scores(["", "\ufeff"]) == (["", ""], [0.0, 0.0])


def _cpu_has_vnni(cpuinfo="/proc/cpuinfo"):
    """Whether the CPU multiplies int8 with VNNI (AVX-512 or AVX) or AMX."""
    with open(cpuinfo, encoding="utf-8") as handle:
        flags = set(handle.read().split())
    return bool(flags & {"avx512_vnni", "avx_vnni", "amx_int8"})


# Of the toy run's 64 training sources (8 distinct), int8 translated all as
# float32 did with VNNI (AMX Intel), 48 with AVX2 alone: there, int8
# products are summed in pairs into saturating 16-bit integers
# (vpmaddubsw), which both MKL's and oneDNN's kernels do (measured with
# CT2_FORCE_CPU_ISA=AVX2 and ONEDNN_MAX_CPU_ISA / MKL_ENABLE_INSTRUCTIONS
# =AVX2 on the AMX machine, and on an AVX2-only AMD, where BLEU fell from
# 100 to 91.36 both times; 2026-11-26). A wrong weight mapping loses nearly
# every sentence.
MIN_INT8_IDENTICAL = 0.9 if _cpu_has_vnni() else 0.7


def test_int8_translates_most_sentences_as_float32_does(toy_run_dir, toy_ct2, tmp_path):
    int8 = export_ctranslate2(toy_run_dir, str(tmp_path / "int8"), quantization="int8")
    sources, references = _toy_sources_and_references()
    fp32_translations, int8_translations = (
        CTranslate2Translator(path).translate(sources) for path in (toy_ct2, int8)
    )
    assert fp32_translations == references  # learned with a margin
    same = np.mean([a == b for a, b in zip(int8_translations, fp32_translations)])
    assert same >= MIN_INT8_IDENTICAL, same


@pytest.mark.slow
def test_export_and_translate_flags(toy_run_dir, tmp_path):
    source = tmp_path / "source.txt"
    sources, _ = _toy_sources_and_references()
    source.write_text("".join(s + "\n" for s in sources[:8]), "utf-8")
    for name, flags in [("fp32", []), ("int8", ["--quantization=int8"])]:
        export = run_python(
            [
                "-m",
                "t2t_repro.cli",
                "export",
                f"--model_dir={toy_run_dir}",
                "--format=ctranslate2",
                *flags,
                f"--export_dir={tmp_path / name}",
            ]
        )
        assert export.returncode == 0, export.stderr[-3000:]
    int8 = CTranslate2Translator(str(tmp_path / "int8")).translator
    assert int8.compute_type.startswith("int8"), int8.compute_type
    # Exactly: float32 on the toy run's training sources, which it
    # translates by a margin (a quantized model may part from it, see
    # MIN_INT8_IDENTICAL).
    outputs = {}
    for flag in (f"--model_dir={toy_run_dir}", f"--ctranslate2={tmp_path / 'fp32'}"):
        result = run_python(
            [
                "-m",
                "t2t_repro.cli",
                "translate",
                "--progress=false",
                flag,
                f"--input={source}",
            ]
        )
        assert result.returncode == 0, result.stderr[-3000:]
        outputs[flag.split("=")[0]] = result.stdout
    assert outputs["--ctranslate2"] == outputs["--model_dir"]
    assert len(outputs["--model_dir"].splitlines()) == 8


def test_a_model_with_other_head_depths_is_refused_clearly(tmp_path):
    model = Transformer(
        TransformerConfig(
            vocab_size=20,
            d_model=16,
            num_heads=2,
            d_ff=32,
            key_dim=4,
            num_encoder_layers=1,
            num_decoder_layers=1,
        )
    )
    with pytest.raises(ConfigError, match="key_dim=4, value_dim=0"):
        transformer_spec(model, [f"t{i}" for i in range(20)])


def test_outputs_longer_than_the_position_table_are_refused(tmp_path):
    with pytest.raises(
        ConfigError, match="--extra_decode_length=300: a CTranslate2 export's position"
    ):
        CTranslate2Translator(str(tmp_path), DecodingOptions(extra_length=300))


def test_a_learned_position_model_converts_and_stops_where_ours_does(tmp_path):
    """A learned table holds max_length positions and caps our outputs
    there: the export holds that table, and CTranslate2's limit is capped
    alike (an untrained model, which never ends early, meets the cap)."""
    keras.utils.set_random_seed(5)
    config = TransformerConfig(
        vocab_size=int(make_tokenizer(tiny_vocab()).vocab_size()),
        d_model=16,
        num_heads=2,
        d_ff=32,
        num_encoder_layers=1,
        num_decoder_layers=1,
        dropout=0.0,
        max_length=9,
        position_encoding="learned",
    )
    model = Transformer(config)
    ct2_dir = export_ctranslate2(model, str(tmp_path / "ct2"), vocabulary=tiny_vocab())
    sources = ["ein hund", "eine katze läuft", "ein hund läuft"]
    greedy = DecodingOptions(beam_size=1)
    ours = ModelTranslator(model, make_tokenizer(tiny_vocab()), greedy)
    theirs = CTranslate2Translator(ct2_dir, greedy)
    our_texts, our_scores = ours.translate_with_scores(sources)
    their_texts, their_scores = theirs.translate_with_scores(sources)
    assert their_texts == our_texts
    np.testing.assert_allclose(their_scores, our_scores, atol=CT2_SCORE_ATOL)
    assert max(len(ours.tokenizer.tokenize(t).numpy()) for t in our_texts) >= 8


def test_ctranslate2_cuts_no_source_itself(toy_ct2, monkeypatch):
    """Sources are cut at the model's max_length by our tokenizer; CTranslate2
    would cut them again at its default 1,024 tokens."""
    translator = CTranslate2Translator(toy_ct2, DecodingOptions(beam_size=1))
    calls = []
    original = translator.translator.translate_batch

    class Recording:
        def translate_batch(self, sources, **options):
            calls.append(options)
            return original(sources, **options)

    monkeypatch.setattr(translator, "translator", Recording())
    translator.translate(["ein hund"])
    assert [call["max_input_length"] for call in calls] == [0]


def test_without_the_extra_the_error_says_how_to_install_it(monkeypatch):
    from t2t_repro import ct2
    from t2t_repro.cli.common import USER_ERRORS

    monkeypatch.setitem(sys.modules, "ctranslate2", None)
    with pytest.raises(MissingExtraError, match=r"pip install -e '\.\[ct2\]'"):
        ct2._ctranslate2()
    assert issubclass(MissingExtraError, USER_ERRORS)  # one line from a tool
