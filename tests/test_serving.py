"""t2t-export's SavedModel: fresh-process, TF1-session and saved_model_cli
loading, edge-case inputs, the n-best signature, and t2t-translate."""

import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rest_api
from processes import HELPERS, REPO, run_python
from t2t_repro.checkpoints import RunDir
from t2t_repro.config import DecodingOptions
from t2t_repro.data.vocabulary import make_tokenizer
from t2t_repro.inference import (SavedModelTranslator, TranslationGraph,
                                 Translator)
from t2t_repro.serving import WARMUP_FILE, export_saved_model
from toy_run import LEARNABLE_STEPS

SENTENCES = [
    "ein hund läuft das gras",
    "",
    "der mann eine katze",
    "über das gras läuft ein hund — «schön» 犬",
    " ".join(["ein hund läuft"] * 340),  # over 1000 pieces
    "eine katze",
]
# The toy model's max_length is 32 pieces: the long sentence is cut.
TRUNCATED = [False, False, False, False, True, False]
TRUNCATION_LOG = ("1 of 6 inputs had more subword tokens than the model's "
                  "max_length and were truncated")


@pytest.fixture(scope="module")
def exported(toy_run_dir, tmp_path_factory):
    export_dir = tmp_path_factory.mktemp("export")
    return export_saved_model(toy_run_dir, str(export_dir))


@pytest.fixture(scope="module")
def checkpoint_translations(toy_run_dir):
    model, proto, _ = RunDir(toy_run_dir).load_model()
    return Translator(model, make_tokenizer(proto)).translate_with_scores(
        SENTENCES)


def _load_in_fresh_process(mode, path, sentences):
    result = run_python([os.path.join(HELPERS, "load_saved_model.py"), mode,
                         path], stdin=json.dumps(sentences))
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


@pytest.mark.parametrize("mode", ["tf2", "tf1"])
def test_fresh_process_translates_like_the_checkpoint(
        exported, checkpoint_translations, mode):
    result = _load_in_fresh_process(mode, exported, SENTENCES)
    assert result["t2t_modules"] == []
    translations, scores = checkpoint_translations
    assert result["translations"] == translations
    np.testing.assert_allclose(result["scores"], scores, atol=1e-4)
    assert result["truncated"] == TRUNCATED


def _warmup_requests(path):
    from tensorflow_serving.apis import prediction_log_pb2

    records = tf.data.TFRecordDataset(os.path.join(path, WARMUP_FILE))
    return [prediction_log_pb2.PredictionLog.FromString(record).predict_log
            .request for record in records.as_numpy_iterator()]


def test_warmup_requests_parse_and_run_through_the_signature(
        exported, toy_run_dir, tmp_path):
    requests = _warmup_requests(exported)
    assert len(requests) == 8  # t2t-export's default
    serve = tf.saved_model.load(exported).signatures["serving_default"]
    model, proto, _ = RunDir(toy_run_dir).load_model()
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
    none = export_saved_model(toy_run_dir, str(tmp_path), warmup_requests=0)
    assert not os.path.exists(os.path.join(none, "assets.extra"))


def test_a_batch_of_zero(exported):
    result = _load_in_fresh_process("tf1", exported, [])
    assert result["translations"] == [] and result["scores"] == []


def test_saved_model_cli_run(exported, checkpoint_translations, tmp_path):
    # saved_model_cli has no way to load custom ops: register them first.
    wrapper = ("import sys, tensorflow_text; "
               "from tensorflow.python.tools import saved_model_cli; "
               "sys.argv[0] = 'saved_model_cli'; saved_model_cli.main()")
    inputs = json.dumps(SENTENCES[:3], ensure_ascii=True)
    result = run_python(["-c", wrapper, "run", "--dir", exported,
                         "--tag_set", "serve", "--signature_def",
                         "serving_default", "--input_exprs",
                         f"inputs={inputs}", "--outdir", str(tmp_path)])
    assert result.returncode == 0, result.stderr[-3000:]
    translations = np.load(tmp_path / "translations.npy", allow_pickle=True)
    assert [t.decode("utf-8") for t in translations] == \
        checkpoint_translations[0][:3]


def test_n_best_signature(exported):
    translate = tf.saved_model.load(exported).signatures["translate"]
    outputs = translate(inputs=tf.constant(SENTENCES[:2]),
                        beam_size=tf.constant(3), alpha=tf.constant(0.6))
    assert outputs["translations"].shape == (2, 3)
    assert outputs["truncated"].numpy().tolist() == TRUNCATED[:2]
    scores = outputs["scores"].numpy()
    assert np.all(np.diff(scores, axis=1) <= 1e-6)
    assert len(set(outputs["translations"][0].numpy())) == 3
    greedy = translate(inputs=tf.constant(SENTENCES[:2]),
                       beam_size=tf.constant(1), alpha=tf.constant(0.6))
    assert greedy["translations"].shape == (2, 1)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="beam_size must be >= 1"):
        translate(inputs=tf.constant(SENTENCES[:1]),
                  beam_size=tf.constant(0), alpha=tf.constant(0.6))


def test_xla_export_gives_the_same_translations(
        toy_run_dir, checkpoint_translations, tmp_path):
    path = export_saved_model(toy_run_dir, str(tmp_path), version=7,
                              decoding=DecodingOptions(jit_compile=True))
    result = _load_in_fresh_process("tf2", path, SENTENCES)
    assert result["translations"] == checkpoint_translations[0]


# A request in docs/serving.md: `$ curl -d 'BODY' \`, the URL, then the
# response.
SERVING_DOC = os.path.join(REPO, "docs", "serving.md")
_DOC_REST_CALL = re.compile(
    r"^\$ curl -d '(?P<body>.+)' \\\n\s+http://\S+:predict\n"
    r"(?P<response>\{.*\})$", re.MULTILINE)


def _shape_of(value):
    """A JSON value's structure: keys, list lengths and leaf types."""
    if isinstance(value, dict):
        return {key: _shape_of(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_shape_of(item) for item in value]
    return type(value).__name__


def test_the_docs_rest_calls_match_the_model_servers_contract(exported):
    with open(SERVING_DOC, encoding="utf-8") as doc:
        calls = list(_DOC_REST_CALL.finditer(doc.read()))
    assert len(calls) == 2  # the row and the columnar format
    formats = set()
    for call in calls:
        body, shown = call["body"], json.loads(call["response"])
        response = rest_api.predict(_serving_default(exported), body)
        assert _shape_of(response) == _shape_of(shown)
        formats.add(next(iter(response)))
    assert formats == {"predictions", "outputs"}
    # The two formats carry the same translations.
    row = rest_api.predict(_serving_default(exported), json.dumps(
        {"instances": SENTENCES[:3]}))
    columns = rest_api.predict(_serving_default(exported), json.dumps(
        {"inputs": {"inputs": SENTENCES[:3]}}))
    assert [p["translations"] for p in row["predictions"]] == \
        columns["outputs"]["translations"]
    assert set(columns["outputs"]) == {"translations", "scores", "truncated"}


def _translate_cli(*flags, stdin=None):
    return run_python(["-m", "t2t_repro.cli", "translate", "--progress=false",
                       *flags], stdin=stdin)


def test_translate_cli_from_checkpoint_and_saved_model(
        toy_run_dir, exported, checkpoint_translations, tmp_path):
    source = tmp_path / "source.txt"
    source.write_text("".join(s + "\n" for s in SENTENCES), "utf-8")
    expected = "".join(t + "\n" for t in checkpoint_translations[0])
    from_checkpoint = _translate_cli(f"--model_dir={toy_run_dir}",
                                     f"--input={source}")
    assert from_checkpoint.returncode == 0, from_checkpoint.stderr[-3000:]
    assert from_checkpoint.stdout == expected
    assert from_checkpoint.stderr.count(TRUNCATION_LOG) == 1
    output = tmp_path / "out.txt"
    from_saved_model = _translate_cli(f"--saved_model={exported}",
                                      f"--output={output}",
                                      stdin=source.read_text("utf-8"))
    assert from_saved_model.returncode == 0, from_saved_model.stderr[-3000:]
    assert output.read_text("utf-8") == expected
    assert from_saved_model.stderr.count(TRUNCATION_LOG) == 1


def test_a_request_over_the_cap_is_refused_and_translators_split(
        toy_run_dir, checkpoint_translations, tmp_path):
    path = export_saved_model(
        toy_run_dir, str(tmp_path), version=3,
        decoding=DecodingOptions(jit_compile=False, max_batch_sentences=2))
    serve = tf.saved_model.load(path).signatures["serving_default"]
    assert serve(inputs=tf.constant(SENTENCES[:2]))[
        "translations"].shape == (2,)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="too many sentences in one request"):
        serve(inputs=tf.constant(SENTENCES[:3]))
    # The client reads the cap from the export and sends batches under it,
    # whatever its own (larger) setting.
    assert SavedModelTranslator(path).translate(SENTENCES) == \
        checkpoint_translations[0]


# Any bytes a client may send: text (any code point, combining marks,
# whitespace), raw bytes (invalid UTF-8, lone surrogates' encodings, NULs),
# empty and long strings.
_INPUT = st.one_of(st.text(max_size=300).map(lambda t: t.encode("utf-8")),
                   st.binary(max_size=300),
                   st.sampled_from([b"", b"\xed\xa0\x80", b" " * 50,
                                    "犬 " .encode() * 700, b"\x00" * 2000]))


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(batch=st.lists(_INPUT, max_size=6))
def test_serving_fuzz_one_string_per_input_never_raises(exported, batch):
    serve = _serving_default(exported)
    first = serve(inputs=tf.constant(batch, tf.string, shape=[len(batch)]))
    again = serve(inputs=tf.constant(batch, tf.string, shape=[len(batch)]))
    assert first["translations"].shape == (len(batch),)
    assert first["translations"].dtype == tf.string
    assert first["truncated"].shape == (len(batch),)
    np.testing.assert_array_equal(first["translations"].numpy(),
                                  again["translations"].numpy())
    np.testing.assert_array_equal(first["scores"].numpy(),
                                  again["scores"].numpy())


_LOADED = {}


def _serving_default(path):
    """The export's serving_default, loaded once per path."""
    if path not in _LOADED:
        _LOADED[path] = tf.saved_model.load(path).signatures[
            "serving_default"]
    return _LOADED[path]
