"""t2t-export's SavedModel: fresh-process, TF1-session and saved_model_cli
loading, edge-case inputs, the n-best signature, the limits of a request,
and t2t-translate."""

import dataclasses
import json
import math
import os
import re
import time
import types

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from helpers import prediction_service, rest_api
from helpers.margins import translated_with_a_margin
from helpers.processes import HELPERS, REPO, run_python
from helpers.toy_run import LEARNABLE_STEPS
from t2t_repro.checkpoints import load_model
from t2t_repro.config import (
    EOS_ID,
    PAD_ID,
    ConfigError,
    DecodingOptions,
    ServingLimits,
)
from t2t_repro.data.vocabulary import make_tokenizer
from t2t_repro.decoding.decoders import n_best_translations
from t2t_repro.inference.exports import check_export_limits
from t2t_repro.inference.graph import TranslationGraph, translatable_rows_decoded
from t2t_repro.inference.scoring import Scorer
from t2t_repro.inference.translators import ModelTranslator, SavedModelTranslator
from t2t_repro.serving import WARMUP_FILE, export_saved_model, warmup_sentences

SENTENCES = [
    "ein hund läuft das gras",
    "",
    "der mann eine katze",
    "über das gras läuft ein hund — «schön» 犬",
    " ".join(["ein hund läuft"] * 100),  # 1599 bytes, over 300 pieces
    "eine katze",
]
# The toy model's max_length is 32 pieces: the long sentence is cut.
TRUNCATED = [False, False, False, False, True, False]
TRUNCATION_LOG = (
    "1 of 6 inputs had more subword tokens than the model's "
    "max_length and were truncated"
)


@pytest.fixture(scope="module")
def exported(toy_run_dir, tmp_path_factory):
    export_dir = tmp_path_factory.mktemp("export")
    return export_saved_model(toy_run_dir, str(export_dir))


# Small limits, so that requests at and over them stay cheap; each batch
# of SENTENCES that SavedModelTranslator sends (2 sentences, the default
# beam 4 and alpha 0.6) is within them.
LIMITS = ServingLimits(
    max_beam_size=4, max_sentence_bytes=2048, max_request_bytes=3000, max_alpha=1.0
)
CAPPED = DecodingOptions(max_batch_sentences=2)


@pytest.fixture(scope="module")
def capped_export(toy_run_dir, tmp_path_factory):
    """An export with LIMITS and CAPPED's cap on sentences a request."""
    return export_saved_model(
        toy_run_dir,
        str(tmp_path_factory.mktemp("capped")),
        version=3,
        decoding=CAPPED,
        limits=LIMITS,
    )


@pytest.fixture(scope="module")
def checkpoint_translations(toy_run_dir):
    model, proto, _ = load_model(toy_run_dir)
    return ModelTranslator(model, make_tokenizer(proto)).translate_with_scores(
        SENTENCES
    )


def _load_in_fresh_process(mode, path, sentences):
    result = run_python(
        [os.path.join(HELPERS, "load_saved_model.py"), mode, path],
        stdin=json.dumps(sentences),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def test_export_layout_is_tf_servings(exported, toy_run_dir):
    version = os.path.basename(exported)
    assert version == str(LEARNABLE_STEPS)  # the checkpoint's step
    assert os.path.exists(os.path.join(exported, "saved_model.pb"))
    assert os.listdir(os.path.join(exported, "variables"))
    assert os.path.exists(os.path.join(exported, WARMUP_FILE))
    # Written beside and renamed: nothing half-written is left to be seen.
    assert os.listdir(os.path.dirname(exported)) == [version]
    with pytest.raises(FileExistsError, match="immutable"):
        export_saved_model(toy_run_dir, os.path.dirname(exported))


@pytest.mark.parametrize("mode", ["tf2", pytest.param("tf1", marks=pytest.mark.slow)])
def test_fresh_process_translates_like_the_checkpoint(
    exported, checkpoint_translations, mode
):
    result = _load_in_fresh_process(mode, exported, SENTENCES)
    assert result["t2t_modules"] == []
    translations, scores = checkpoint_translations
    assert result["translations"] == translations
    np.testing.assert_allclose(result["scores"], scores, atol=1e-4)
    assert result["truncated"] == TRUNCATED


def _warmup_requests(path):
    from tensorflow_serving.apis import prediction_log_pb2

    records = tf.data.TFRecordDataset(os.path.join(path, WARMUP_FILE))
    return [
        prediction_log_pb2.PredictionLog.FromString(record).predict_log.request
        for record in records.as_numpy_iterator()
    ]


@pytest.mark.slow
def test_warmup_requests_parse_and_run_through_the_signature(
    exported, toy_run_dir, tmp_path
):
    requests = _warmup_requests(exported)
    assert len(requests) == 8  # t2t-export's default
    serve = tf.saved_model.load(exported).signatures["serving_default"]
    model, proto, _ = load_model(toy_run_dir)
    graph = TranslationGraph(model, make_tokenizer(proto), DecodingOptions())
    widths = []
    for request in requests:
        assert request.model_spec.signature_name == "serving_default"
        inputs = tf.constant(tf.make_ndarray(request.inputs["inputs"]))
        assert inputs.shape == (1,)
        outputs = serve(inputs=inputs)
        assert outputs["translations"].shape == (1,)
        assert not outputs["truncated"].numpy()[0]
        widths.append(int(graph.source_ids(inputs)[0].shape[1]))
    # Distinct bucket widths, the shortest and the longest among them.
    boundaries = graph.boundaries.numpy().tolist()
    assert widths == sorted(set(widths)) and set(widths) <= set(boundaries)
    assert widths[0] == boundaries[0] and widths[-1] == boundaries[-1]
    # A sentence over the limit would fail the warm-up, and TF Serving
    # would not load the model: those widths are left out.
    limited = TranslationGraph(
        model,
        make_tokenizer(proto),
        DecodingOptions(),
        ServingLimits(max_sentence_bytes=40),
    )
    sentences = warmup_sentences(limited, 8)
    assert sentences and all(
        len(sentence.encode("utf-8")) <= 40 for sentence in sentences
    )
    none = export_saved_model(toy_run_dir, str(tmp_path), warmup_requests=0)
    assert not os.path.exists(os.path.join(none, WARMUP_FILE))


def test_an_input_with_nothing_to_translate_translates_to_nothing(
    exported, checkpoint_translations
):
    """A model decoding from EOS alone would invent a sentence: both
    signatures answer "" with score 0, as the tools do in this process."""
    loaded = tf.saved_model.load(exported)
    # A byte order mark is not whitespace, and SentencePiece drops it.
    inputs = tf.constant(["", " \t ", "\ufeff", "ein hund"])
    served = loaded.signatures["serving_default"](inputs=inputs)
    assert served["translations"].numpy().tolist()[:3] == [b""] * 3
    assert served["scores"].numpy().tolist()[:3] == [0.0] * 3
    assert served["translations"].numpy()[3]
    n_best = loaded.signatures["translate"](
        inputs=inputs, beam_size=tf.constant(3), alpha=tf.constant(0.6)
    )
    assert n_best["translations"].numpy()[:3].tolist() == [[b""] * 3] * 3
    assert n_best["scores"].numpy()[:3].tolist() == [[0.0] * 3] * 3
    assert all(n_best["translations"].numpy()[3])
    # A request of such inputs alone: no row is searched.
    nothing = loaded.signatures["serving_default"](inputs=tf.constant(["", " "]))
    assert nothing["translations"].numpy().tolist() == [b""] * 2
    assert nothing["scores"].numpy().tolist() == [0.0] * 2
    nothing = loaded.signatures["translate"](
        inputs=tf.constant(["", " "]), beam_size=tf.constant(3), alpha=tf.constant(0.6)
    )
    assert nothing["translations"].numpy().tolist() == [[b""] * 3] * 2
    translations, scores = checkpoint_translations
    assert SENTENCES[1] == "" and (translations[1], scores[1]) == ("", 0.0)


@pytest.mark.parametrize("n_best", [False, True])
def test_rows_with_nothing_to_translate_are_not_searched(n_best):
    source = tf.constant([[5, 6, EOS_ID, 0], [EOS_ID, 0, 0, 0], [7, EOS_ID, 0, 0]])
    searched = []

    def decode(rows):  # "translates" each id to id + 1
        searched.append(rows.numpy().tolist())
        ids = tf.stack([rows + 1, rows + 1], axis=1) if n_best else rows + 1
        scores = -tf.cast(tf.reduce_sum(ids, axis=-1), tf.float32)
        return ids, scores

    ids, scores = translatable_rows_decoded(decode, source)
    assert searched == [[[5, 6, EOS_ID, 0], [7, EOS_ID, 0, 0]]]
    expected = [[6, 7, EOS_ID + 1, 1], [PAD_ID] * 4, [8, EOS_ID + 1, 1, 1]]
    expected_scores = [-sum(row) if row[0] else 0.0 for row in expected]
    if n_best:
        expected = [[row, row] for row in expected]
        expected_scores = [[score, score] for score in expected_scores]
    assert ids.numpy().tolist() == expected
    assert scores.numpy().tolist() == expected_scores
    searched.clear()
    translatable_rows_decoded(decode, source[1:2])  # empty lines alone
    assert searched == [[]]


@pytest.mark.slow
def test_a_batch_of_zero(exported):
    result = _load_in_fresh_process("tf1", exported, [])
    assert result["translations"] == [] and result["scores"] == []


@pytest.mark.slow
def test_saved_model_cli_run(exported, checkpoint_translations, tmp_path):
    # saved_model_cli has no way to load custom ops: register them first.
    wrapper = (
        "import sys, tensorflow_text; "
        "from tensorflow.python.tools import saved_model_cli; "
        "sys.argv[0] = 'saved_model_cli'; saved_model_cli.main()"
    )
    inputs = json.dumps(SENTENCES[:3], ensure_ascii=True)
    result = run_python(
        [
            "-c",
            wrapper,
            "run",
            "--dir",
            exported,
            "--tag_set",
            "serve",
            "--signature_def",
            "serving_default",
            "--input_exprs",
            f"inputs={inputs}",
            "--outdir",
            str(tmp_path),
        ]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    translations = np.load(tmp_path / "translations.npy", allow_pickle=True)
    assert [t.decode("utf-8") for t in translations] == checkpoint_translations[0][:3]


@pytest.mark.slow
def test_n_best_signature(exported, toy_run_dir):
    translate = tf.saved_model.load(exported).signatures["translate"]
    # Two with something to translate (see test_an_input_with_nothing_to_...
    sentences = [SENTENCES[0], SENTENCES[2]]
    outputs = translate(
        inputs=tf.constant(sentences),
        beam_size=tf.constant(3),
        alpha=tf.constant(0.6),
    )
    assert outputs["translations"].shape == (2, 3)
    assert outputs["truncated"].numpy().tolist() == [False, False]
    scores = outputs["scores"].numpy()
    assert np.all(np.diff(scores, axis=1) <= 1e-6)
    # Beam search keeps distinct token sequences, which two segmentations
    # of one string would be: the ids of the same search, run here, are
    # distinct, and the signature's strings are theirs.
    model, proto, _ = load_model(toy_run_dir)
    tokenizer = make_tokenizer(proto)
    source, _ = TranslationGraph(model, tokenizer, DecodingOptions()).source_ids(
        tf.constant(sentences)
    )
    ids, _ = tf.function(
        lambda source: n_best_translations(
            model, source, tf.constant(3), tf.constant(0.6), DecodingOptions()
        )
    )(source)
    for hypotheses, texts in zip(ids.numpy(), outputs["translations"].numpy()):
        assert len({tuple(row) for row in hypotheses}) == 3, hypotheses
        detokenized = tokenizer.detokenize(
            tf.RaggedTensor.from_tensor(hypotheses, padding=PAD_ID)
        )
        assert detokenized.numpy().tolist() == texts.tolist()
    greedy = translate(
        inputs=tf.constant(sentences),
        beam_size=tf.constant(1),
        alpha=tf.constant(0.6),
    )
    assert greedy["translations"].shape == (2, 1)
    with pytest.raises(
        tf.errors.InvalidArgumentError, match="beam_size 0 must be >= 1"
    ):
        translate(
            inputs=tf.constant(SENTENCES[:1]),
            beam_size=tf.constant(0),
            alpha=tf.constant(0.6),
        )


# XLA's and the graph's scores of one translation differ by ~2e-5 nats.
SCORE_ATOL = 1e-4


@pytest.mark.slow
def test_xla_export_gives_the_same_translations(
    toy_run_dir, checkpoint_translations, tmp_path
):
    path = export_saved_model(
        toy_run_dir,
        str(tmp_path),
        version=7,
        decoding=DecodingOptions(jit_compile=True),
    )
    result = _load_in_fresh_process("tf2", path, SENTENCES)
    translations, scores = checkpoint_translations
    # XLA rounds otherwise than the graph: a sentence the checkpoint
    # translates by a margin gets the same translation, another may part
    # at a near-tie. The training source among them has a margin.
    model, proto, _ = load_model(toy_run_dir)
    robust = translated_with_a_margin(model, make_tokenizer(proto), SENTENCES)
    assert robust[SENTENCES.index("ein hund läuft das gras")], robust
    for index in np.flatnonzero(robust):
        assert result["translations"][index] == translations[index], index
    same = np.array(result["translations"]) == np.array(translations)
    np.testing.assert_allclose(
        np.array(result["scores"])[same], np.array(scores)[same], atol=SCORE_ATOL
    )
    assert result["truncated"] == TRUNCATED


# A request in docs/serving.md: `$ curl -d 'BODY' \`, the URL, then the
# response.
SERVING_DOC = os.path.join(REPO, "docs", "serving.md")
_DOC_REST_CALL = re.compile(
    r"^\$ curl -d '(?P<body>.+)' \\\n\s+http://\S+:predict\n"
    r"(?P<response>\{.*\})$",
    re.MULTILINE,
)


def _shape_of(value):
    """A JSON value's structure: keys, list lengths and leaf types."""
    if isinstance(value, dict):
        return {key: _shape_of(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_shape_of(item) for item in value]
    return type(value).__name__


def _numbers_as_written(text):
    """The number tokens of a JSON document, as written."""
    tokens = []

    def keep(token):
        tokens.append(token)
        return float(token)

    json.loads(text, parse_float=keep, parse_int=keep, parse_constant=keep)
    return tokens


def test_the_docs_rest_calls_are_answered_as_tf_serving_answers(exported):
    with open(SERVING_DOC, encoding="utf-8") as doc:
        calls = list(_DOC_REST_CALL.finditer(doc.read()))
    assert len(calls) == 2  # the row and the columnar format
    formats = set()
    for call in calls:
        shown = call["response"]
        response = rest_api.predict(_loaded(exported), call["body"])
        # The page shows the quickstart export's words, this is the toy
        # export: the same structure, and numbers as TF Serving writes
        # float32 scores.
        assert _shape_of(json.loads(response)) == _shape_of(json.loads(shown))
        numbers = _numbers_as_written(shown)
        assert numbers and numbers == [
            rest_api.float_text(np.float32(n)) for n in numbers
        ]
        formats.add(next(iter(json.loads(response))))
    assert formats == {"predictions", "outputs"}
    # The two formats carry the same translations.
    row = json.loads(
        rest_api.predict(_loaded(exported), json.dumps({"instances": SENTENCES[:3]}))
    )
    columns = json.loads(
        rest_api.predict(
            _loaded(exported), json.dumps({"inputs": {"inputs": SENTENCES[:3]}})
        )
    )
    assert [p["translations"] for p in row["predictions"]] == columns["outputs"][
        "translations"
    ]
    assert set(columns["outputs"]) == {"translations", "scores", "truncated"}


# The docs' calls of the other signatures: `curl -d '{"signature_name": ...`.
_DOC_SIGNATURE_CALL = re.compile(
    r"^curl -d '(?P<body>\{\"signature_name\".+)' \\$", re.M
)


def test_the_docs_calls_of_translate_and_score_are_answered(exported):
    with open(SERVING_DOC, encoding="utf-8") as doc:
        bodies = [
            json.loads(m["body"]) for m in _DOC_SIGNATURE_CALL.finditer(doc.read())
        ]
    assert [body["signature_name"] for body in bodies] == ["translate", "score"]
    outputs = {
        body["signature_name"]: json.loads(
            rest_api.predict(_loaded(exported), json.dumps(body))
        )["outputs"]
        for body in bodies
    }
    beam = bodies[0]["inputs"]["beam_size"]
    assert set(outputs["translate"]) == {"translations", "scores", "truncated"}
    assert [len(row) for row in outputs["translate"]["translations"]] == [beam]
    assert [len(row) for row in outputs["translate"]["scores"]] == [beam]
    assert set(outputs["score"]) == {
        "log_probs",
        "scores",
        "target_tokens",
        "truncated",
    }
    assert all(len(values) == 1 for values in outputs["score"].values())


_DOC_GRPC_CLIENT = re.compile(
    r"```python\n(?P<script>[^`]*?prediction_service_pb2_grpc.*?)```", re.S
)


def test_the_docs_grpc_client_is_answered(exported):
    with open(SERVING_DOC, encoding="utf-8") as doc:
        (script,) = [m["script"] for m in _DOC_GRPC_CLIENT.finditer(doc.read())]
    sentences = json.loads(re.search(r"^sentences = (\[.*\])$", script, re.M)[1])
    expected = _serving_default(exported)(inputs=tf.constant(sentences))
    assert script.count('"localhost:8500"') == 1
    with prediction_service.serving("multi30k", exported) as address:
        result = run_python(["-c", script.replace("localhost:8500", address)])
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == [
        *(t.decode("utf-8") for t in expected["translations"].numpy()),
        "(1, 3)",
    ]


def _translate_cli(*flags, stdin=None):
    return run_python(
        ["-m", "t2t_repro.cli", "translate", "--progress=false", *flags], stdin=stdin
    )


@pytest.mark.slow
def test_translate_cli_from_checkpoint_and_saved_model(
    toy_run_dir, exported, checkpoint_translations, tmp_path
):
    source = tmp_path / "source.txt"
    source.write_text("".join(s + "\n" for s in SENTENCES), "utf-8")
    expected = "".join(t + "\n" for t in checkpoint_translations[0])
    from_checkpoint = _translate_cli(f"--model_dir={toy_run_dir}", f"--input={source}")
    assert from_checkpoint.returncode == 0, from_checkpoint.stderr[-3000:]
    assert from_checkpoint.stdout == expected
    assert from_checkpoint.stderr.count(TRUNCATION_LOG) == 1
    output = tmp_path / "out.txt"
    from_saved_model = _translate_cli(
        f"--saved_model={exported}",
        f"--output={output}",
        stdin=source.read_text("utf-8"),
    )
    assert from_saved_model.returncode == 0, from_saved_model.stderr[-3000:]
    assert output.read_text("utf-8") == expected
    assert from_saved_model.stderr.count(TRUNCATION_LOG) == 1


def test_a_request_over_the_cap_is_refused_and_translators_split(
    capped_export, checkpoint_translations
):
    serve = _serving_default(capped_export)
    assert serve(inputs=tf.constant(SENTENCES[:2]))["translations"].shape == (2,)
    with pytest.raises(
        tf.errors.InvalidArgumentError, match="too many sentences in one request"
    ):
        serve(inputs=tf.constant(SENTENCES[:3]))
    # The client reads the cap from the export and sends batches under it,
    # whatever its own (larger) setting.
    assert (
        SavedModelTranslator(capped_export).translate(SENTENCES)
        == checkpoint_translations[0]
    )


def _refused_within_a_second(call, message):
    """Asserts that `call()` fails with InvalidArgument saying `message`
    in under a second: nothing proportional to the request ran first."""
    start = time.monotonic()
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(message)):
        call()
    assert time.monotonic() - start < 1.0, message


def test_translate_takes_requests_at_the_limits_and_refuses_more(capped_export):
    loaded = _loaded(capped_export)
    assert {
        name: getattr(loaded, name).numpy() for name in dataclasses.asdict(LIMITS)
    } == dataclasses.asdict(LIMITS)
    translate = loaded.signatures["translate"]

    def call(inputs=("a" * 2048, "b" * 952), beam_size=4, alpha=1.0):
        return translate(
            inputs=tf.constant(inputs, tf.string),
            beam_size=tf.constant(beam_size),
            alpha=tf.constant(alpha, tf.float32),
        )

    # Every limit exactly (the request is 3000 bytes); this first call
    # also builds the signature's function, which the timed calls reuse.
    at_limits = call()
    assert at_limits["translations"].shape == (2, 4)
    assert np.all(np.isfinite(at_limits["scores"].numpy()))
    for arguments, message in [
        ({"beam_size": 5}, "beam_size 5 is over the export limit max_beam_size=4"),
        (
            {"beam_size": 10**6},
            "beam_size 1000000 is over the export limit max_beam_size=4",
        ),
        ({"beam_size": 0}, "beam_size 0 must be >= 1"),
        ({"alpha": 1.5}, "alpha 1.5 is over the export limit max_alpha=1"),
        ({"alpha": math.inf}, "alpha inf must be finite and >= 0"),
        ({"alpha": math.nan}, "alpha nan must be finite and >= 0"),
        ({"alpha": -0.5}, "alpha -0.5 must be finite and >= 0"),
        (
            {"inputs": ["a", "b" * 2049]},
            "inputs[1] is 2049 bytes, over the export limit max_sentence_bytes=2048",
        ),
        (
            {"inputs": ["a" * 2048, "b" * 953]},
            "the request has 3001 "
            "bytes of strings, over the export limit max_request_bytes=3000",
        ),
        (
            {"inputs": ["a"] * 3},
            "too many sentences in one request (3 > max_batch_sentences=2)",
        ),
    ]:
        _refused_within_a_second(lambda: call(**arguments), message)


def test_score_counts_targets_against_the_limits(capped_export):
    score = _loaded(capped_export).signatures["score"]

    def call(inputs, targets, alpha=1.0):
        return score(
            inputs=tf.constant(inputs),
            targets=tf.constant(targets),
            alpha=tf.constant(alpha, tf.float32),
        )

    assert np.all(np.isfinite(call(["a" * 1500], ["b" * 1500])["scores"].numpy()))
    _refused_within_a_second(
        lambda: call(["a"], ["b" * 2049]),
        "targets[0] is 2049 bytes, over the export limit max_sentence_bytes=2048",
    )
    _refused_within_a_second(
        lambda: call(["a" * 1500], ["b" * 1501]),
        "the request has 3001 "
        "bytes of strings, over the export limit max_request_bytes=3000",
    )
    _refused_within_a_second(
        lambda: call(["a"], ["b"], math.inf), "alpha inf must be finite and >= 0"
    )


def test_a_100_mb_string_is_refused_without_being_tokenized(exported):
    serve = _serving_default(exported)
    serve(inputs=tf.constant(["ein hund"]))  # builds the function
    huge = tf.constant(["ein hund", "x" * (100 << 20)])
    # The default limit. Tokenizing 100 MB would take far over a second.
    _refused_within_a_second(
        lambda: serve(inputs=huge),
        "inputs[1] is 104857600 bytes, over the export limit max_sentence_bytes=4096",
    )


def test_an_export_refuses_a_serving_default_over_its_own_limits(toy_run_dir, tmp_path):
    with pytest.raises(ConfigError, match="--max_beam_size=4"):
        export_saved_model(
            toy_run_dir,
            str(tmp_path),
            decoding=DecodingOptions(beam_size=5),
            limits=LIMITS,
        )
    with pytest.raises(
        ConfigError,
        match="--max_request_bytes=10 is less than --max_sentence_bytes=4096",
    ):
        ServingLimits(max_request_bytes=10)
    with pytest.raises(ConfigError, match="--max_alpha=nan must be"):
        ServingLimits(max_alpha=math.nan)


def test_clients_of_an_export_refuse_a_beam_or_alpha_over_its_limits(capped_export):
    # One error before any request, not InvalidArgument from each one.
    with pytest.raises(
        ConfigError,
        match="--beam_size=5 is over its "
        "max_beam_size=4 and --alpha=1.5 is over its "
        "max_alpha=1 ",
    ):
        SavedModelTranslator(capped_export, DecodingOptions(beam_size=5, alpha=1.5))
    with pytest.raises(ConfigError, match="--alpha=2 is over its max_alpha=1 "):
        Scorer.from_saved_model(capped_export, DecodingOptions(alpha=2.0))


def test_in_process_translation_has_no_export_limits(toy_run_dir):
    over = ServingLimits()
    model, proto, _ = load_model(toy_run_dir)
    translator = ModelTranslator(
        model,
        make_tokenizer(proto),
        DecodingOptions(beam_size=over.max_beam_size + 1, alpha=over.max_alpha + 1),
    )
    long_sentence = " ".join(["ein hund"] * (over.max_sentence_bytes // 8))
    assert len(long_sentence.encode("utf-8")) > over.max_sentence_bytes
    results, truncated = translator.translate_n_best([long_sentence], n_best=2)
    assert len(results[0]) == 2 and truncated == 1


# Any bytes a client may send: text (any code point, combining marks,
# whitespace), raw bytes (invalid UTF-8, lone surrogates' encodings, NULs),
# empty and long strings.
_INPUT = st.one_of(
    st.text(max_size=300).map(lambda t: t.encode("utf-8")),
    st.binary(max_size=300),
    st.sampled_from(
        [b"", b"\xed\xa0\x80", b" " * 50, "犬 ".encode() * 700, b"\x00" * 2000]
    ),
)


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(batch=st.lists(_INPUT, max_size=6))
def test_serving_fuzz_one_string_per_input_never_raises(exported, batch):
    serve = _serving_default(exported)
    first = serve(inputs=tf.constant(batch, tf.string, shape=[len(batch)]))
    again = serve(inputs=tf.constant(batch, tf.string, shape=[len(batch)]))
    assert first["translations"].shape == (len(batch),)
    assert first["translations"].dtype == tf.string
    assert first["truncated"].shape == (len(batch),)
    np.testing.assert_array_equal(
        first["translations"].numpy(), again["translations"].numpy()
    )
    np.testing.assert_array_equal(first["scores"].numpy(), again["scores"].numpy())


# Requests at, over and far over the limits: beams, alphas (NaN and
# infinities too) and strings of up to 10 MB.
_BEAM_SIZE = st.one_of(
    st.integers(1, LIMITS.max_beam_size),
    st.sampled_from([0, -1, LIMITS.max_beam_size + 1, 10**6, 2**31 - 1]),
)
_ALPHA = st.one_of(
    st.floats(0.0, LIMITS.max_alpha, width=32),
    st.floats(allow_nan=True, allow_infinity=True, width=32),
)
_LIMIT_INPUT = st.one_of(
    _INPUT,
    st.sampled_from(
        [
            b"x" * LIMITS.max_sentence_bytes,
            b"x" * (LIMITS.max_sentence_bytes + 1),
            b"x" * (10 << 20),
        ]
    ),
)


def _within_capped_exports_limits(batch, beam_size, alpha):
    lengths = [len(text) for text in batch]
    return (
        len(batch) <= CAPPED.max_batch_sentences
        and max(lengths, default=0) <= LIMITS.max_sentence_bytes
        and sum(lengths) <= LIMITS.max_request_bytes
        and 1 <= beam_size <= LIMITS.max_beam_size
        and math.isfinite(alpha)
        and 0.0 <= alpha <= LIMITS.max_alpha
    )


@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(batch=st.lists(_LIMIT_INPUT, max_size=3), beam_size=_BEAM_SIZE, alpha=_ALPHA)
def test_translate_fuzz_refuses_what_breaks_a_limit_else_scores_finitely(
    capped_export, batch, beam_size, alpha
):
    translate = _loaded(capped_export).signatures["translate"]
    arguments = {
        "inputs": tf.constant(batch, tf.string, shape=[len(batch)]),
        "beam_size": tf.constant(beam_size, tf.int32),
        "alpha": tf.constant(alpha, tf.float32),
    }
    within = _within_capped_exports_limits(batch, beam_size, alpha)
    # --hypothesis-show-statistics counts both kinds of example.
    event("within the limits" if within else "over a limit")
    if not within:
        with pytest.raises(
            tf.errors.InvalidArgumentError,
            match="must be|over the export limit|too many",
        ):
            translate(**arguments)
        return
    outputs = translate(**arguments)
    assert outputs["translations"].shape == (len(batch), beam_size)
    assert np.all(np.isfinite(outputs["scores"].numpy()))


_LOADED = {}


def _loaded(path):
    """The export at `path`, loaded once."""
    if path not in _LOADED:
        _LOADED[path] = tf.saved_model.load(path)
    return _LOADED[path]


def _serving_default(path):
    return _loaded(path).signatures["serving_default"]


def test_translate_names_the_line_over_the_exports_sentence_limit(
    capped_export, tmp_path
):
    source = tmp_path / "source.en"
    too_long = "ein hund " * (LIMITS.max_sentence_bytes // 9 + 1)
    source.write_text(f"ein hund\n{too_long}\n", "utf-8")
    result = run_python(
        [
            "-m",
            "t2t_repro.cli",
            "translate",
            f"--saved_model={capped_export}",
            f"--input={source}",
            f"--beam_size={CAPPED.beam_size}",
        ]
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"t2t-translate: error: {source}:2: "
        f"{len(too_long.encode())} bytes, over the export's "
        f"max_sentence_bytes={LIMITS.max_sentence_bytes}; split it, "
        "or export with a larger --max_sentence_bytes"
    )


def test_clients_take_an_alpha_equal_to_a_max_alpha_float32_rounds_down():
    """The export stores max_alpha in float32 (0.7 as 0.69999999) and its
    graph compares in float32: alpha=0.7 is within max_alpha=0.7."""
    loaded = types.SimpleNamespace(
        max_beam_size=tf.Variable(16), max_alpha=tf.Variable(0.7, dtype=tf.float32)
    )
    check_export_limits(loaded, "X", alpha=0.7, beam_size=16)
    with pytest.raises(ConfigError, match="alpha=0.71 is over its max_alpha=0.7"):
        check_export_limits(loaded, "X", alpha=0.71)
