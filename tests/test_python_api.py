"""The Python API (docs/python_api.md): the top-level names, `Translator`
from a run, a SavedModel or memory, exports of a model in memory, the
Keras loss with compile/fit and Keras callbacks, and the page's examples."""

import contextlib
import dataclasses
import importlib.metadata
import io
import json
import logging
import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

import t2t_repro
from helpers import numpy_reference as ref
from helpers.one_training_step import global_batch
from helpers.processes import REPO, run_python
from helpers.toy_run import LEARNABLE_STEPS, SMALL, toy_pairs
from helpers.vocab_for_tests import tiny_vocab
from t2t_repro.averaging import average_checkpoints
from t2t_repro.checkpoints import load_model
from t2t_repro.config import ConfigError, DecodingOptions, TrainingOptions
from t2t_repro.ct2 import CTranslate2Translator
from t2t_repro.data.pipeline import training_batches
from t2t_repro.data.vocabulary import make_tokenizer
from t2t_repro.inference.scoring import Scorer
from t2t_repro.inference.translators import SavedModelTranslator
from t2t_repro.run_dir import RunDir
from t2t_repro.serving import model_and_vocabulary
from t2t_repro.training.losses import smoothed_cross_entropy_stats
from t2t_repro.training.prepare import prepare_run

DOCS = os.path.join(REPO, "docs", "python_api.md")


def _toy_sources_and_targets():
    """The toy run's distinct training pairs, which it learned with a
    margin of 3+ nats per token (toy_run.py): every CPU decodes them
    alike."""
    pairs = dict(toy_pairs().as_numpy_iterator())
    return ([s.decode() for s in pairs], [t.decode() for t in pairs.values()])


# Top-level names ------------------------------------------------------------

_IMPORT_COST = """
import sys, t2t_repro
print(sorted(m for m in ("tensorflow", "keras") if m in sys.modules))
print(sorted(n for n in dir(t2t_repro) if not n.startswith("_")))
"""


def test_import_is_cheap_and_dir_lists_the_public_names():
    result = run_python(["-c", _IMPORT_COST])
    assert result.returncode == 0, result.stderr[-3000:]
    imported, names = result.stdout.splitlines()
    assert imported == "[]"  # nothing heavy until a name is used
    assert names == str(sorted(t2t_repro.__all__))


def test_top_level_names_are_the_defining_modules_objects():
    from t2t_repro import layers
    from t2t_repro.config import TransformerConfig
    from t2t_repro.ct2 import export_ctranslate2
    from t2t_repro.model import Transformer
    from t2t_repro.serving import export_saved_model
    from t2t_repro.training import losses, schedule
    from t2t_repro.translator import Translator

    expected = {
        "Transformer": Transformer,
        "TransformerConfig": TransformerConfig,
        "TransformerSchedule": schedule.TransformerSchedule,
        "FusedAdam": schedule.FusedAdam,
        "paper_adam": schedule.paper_adam,
        "LabelSmoothedCrossEntropy": losses.LabelSmoothedCrossEntropy,
        "Translator": Translator,
        "export_saved_model": export_saved_model,
        "export_ctranslate2": export_ctranslate2,
        # Every public layer class of t2t_repro/layers/.
        **{
            name: value
            for name, value in vars(layers).items()
            if isinstance(value, type) and issubclass(value, keras.layers.Layer)
        },
    }
    assert sorted(t2t_repro.__all__) == sorted(expected)
    for name, value in expected.items():
        assert getattr(t2t_repro, name) is value, name
    assert t2t_repro.__version__ == importlib.metadata.version("t2t_repro")
    with pytest.raises(AttributeError, match="no attribute 'Trainer'"):
        t2t_repro.Trainer  # noqa: B018  not public


# Translator and exports -----------------------------------------------------


@pytest.fixture(scope="module")
def in_memory(toy_run_dir):
    """(model, SentencePiece proto) of the toy run, loaded into memory."""
    model, proto, _ = load_model(toy_run_dir)
    return model, proto


@pytest.fixture(scope="module")
def exported(in_memory, tmp_path_factory):
    """The in-memory toy model exported as exports/x/<the run's step>."""
    model, proto = in_memory
    return t2t_repro.export_saved_model(
        model,
        str(tmp_path_factory.mktemp("exports") / "x"),
        version=LEARNABLE_STEPS,
        vocabulary=proto,
    )


@pytest.fixture(scope="module")
def from_run(toy_run_dir):
    return t2t_repro.Translator.from_run(toy_run_dir)


def test_from_run_and_from_saved_model_translate_alike(from_run, exported):
    from_saved_model = t2t_repro.Translator.from_saved_model(exported)
    sources, targets = _toy_sources_and_targets()
    assert from_run.translate(sources) == targets
    assert from_saved_model.translate(sources) == targets
    assert from_run.translate(sources, beam_size=1) == targets
    assert from_saved_model.translate(sources, beam_size=1) == targets
    run_n_best = from_run.translate(sources, beam_size=5, n_best=3)
    saved_n_best = from_saved_model.translate(sources, beam_size=5, n_best=3)
    assert [[text for text, _ in row] for row in run_n_best] == [
        [text for text, _ in row] for row in saved_n_best
    ]
    np.testing.assert_allclose(
        [[score for _, score in row] for row in run_n_best],
        [[score for _, score in row] for row in saved_n_best],
        atol=1e-4,
    )


def test_n_best_lists_pairs_best_first(from_run, caplog):
    sources, targets = _toy_sources_and_targets()
    n_best = from_run.translate(sources[:4], n_best=4)
    assert len(n_best) == 4
    for row, target in zip(n_best, targets):
        assert [type(item) for item in row] == [tuple] * 4
        texts, scores = zip(*row)
        # Distinct hypotheses may detokenize alike, so distinctness is checked
        # on token ids (tests/cli/test_translate_stream.py, test_serving.py).
        assert texts[0] == target
        assert list(scores) == sorted(scores, reverse=True)
        assert all(isinstance(score, float) and score < 0 for score in scores)
    assert from_run.translate([]) == []
    over_max_length = " ".join(["ein hund läuft"] * 20)  # > 32 pieces
    with caplog.at_level(logging.WARNING):
        assert len(from_run.translate([over_max_length, sources[0]])) == 2
    assert "1 of 2 inputs had more subword tokens" in caplog.text
    with pytest.raises(
        ValueError,
        match=r"n_best=5 must be in \[1, "
        r"beam_size=4\]",
    ):
        from_run.translate(sources[:1], n_best=5)


def test_a_checkpoint_is_a_path_or_a_run_directory(toy_run_dir, tmp_path):
    earlier = os.path.join(toy_run_dir, "ckpt-100")
    assert model_and_vocabulary(toy_run_dir, checkpoint=earlier)[2] == earlier
    average = str(tmp_path / "average")
    average_checkpoints(toy_run_dir, average, 2)
    model, proto, checkpoint = model_and_vocabulary(toy_run_dir, checkpoint=average)
    assert checkpoint == os.path.join(average, f"ckpt-{LEARNABLE_STEPS}")
    assert proto == RunDir(toy_run_dir).load_vocabulary()
    latest = load_model(toy_run_dir)[0]
    # The average, not the run's latest weights.
    assert not np.array_equal(
        model.embedding.embeddings.numpy(), latest.embedding.embeddings.numpy()
    )


@pytest.mark.slow
def test_in_memory_exports_translate_like_the_translator(
    in_memory, exported, from_run, tmp_path
):
    model, proto = in_memory
    assert os.path.basename(exported) == str(LEARNABLE_STEPS)
    sources, _ = _toy_sources_and_targets()
    expected = from_run.translate(sources, n_best=4)
    # The SavedModel's serving_default, which TF Serving answers with.
    serve = tf.saved_model.load(exported).signatures["serving_default"]
    outputs = serve(inputs=tf.constant(sources))
    assert [t.decode() for t in outputs["translations"].numpy()] == [
        row[0][0] for row in expected
    ]
    np.testing.assert_allclose(
        outputs["scores"].numpy(), [row[0][1] for row in expected], atol=1e-4
    )
    # CTranslate2, from the SentencePiece model's path this time.
    vocabulary = tmp_path / "spm.model"
    vocabulary.write_bytes(proto)
    ct2_dir = t2t_repro.export_ctranslate2(
        model, str(tmp_path / "ct2"), vocabulary=vocabulary
    )
    translations, scores = CTranslate2Translator(
        ct2_dir, DecodingOptions(beam_size=4)
    ).translate_with_scores(sources)
    assert translations == [row[0][0] for row in expected]
    np.testing.assert_allclose(scores, [row[0][1] for row in expected], atol=1e-3)


def test_export_arguments_are_checked(in_memory, toy_run_dir, tmp_path):
    model, proto = in_memory
    with pytest.raises(ValueError, match="needs its vocabulary="):
        t2t_repro.export_saved_model(model, str(tmp_path), version=1)
    with pytest.raises(ValueError, match="brings its own vocabulary"):
        t2t_repro.export_ctranslate2(
            toy_run_dir, str(tmp_path / "ct2"), vocabulary=proto
        )
    with pytest.raises(ValueError, match="has its weights already"):
        t2t_repro.export_saved_model(
            model, str(tmp_path), version=1, checkpoint="ckpt-1", vocabulary=proto
        )
    with pytest.raises(ValueError, match="give a model in memory a version="):
        t2t_repro.export_saved_model(model, str(tmp_path), vocabulary=proto)
    # A checkpoint given where the version goes (the third argument).
    with pytest.raises(TypeError, match="version directory is a number"):
        t2t_repro.export_saved_model(
            toy_run_dir, str(tmp_path), os.path.join(toy_run_dir, "ckpt-200")
        )
    # A vocabulary of another size than the model's.
    with pytest.raises(ConfigError, match="not this model's vocabulary"):
        t2t_repro.export_saved_model(
            model, str(tmp_path), version=1, vocabulary=tiny_vocab(30)
        )
    assert os.listdir(tmp_path) == []


def test_translate_arguments_are_checked(from_run, toy_run_dir):
    """Mistakes that failed deep in TensorFlow, or worked wrongly: one
    sentence alone (a str was translated character by character), an
    item that is not text, a run directory given to the constructor, a
    step number for checkpoint=."""
    with pytest.raises(TypeError, match="not one str or bytes"):
        from_run.translate("ein hund")
    with pytest.raises(TypeError, match=r"sentences\[1\] is NoneType"):
        from_run.translate(["ein hund", None])
    assert from_run.translate(s for s in ["ein hund"]) == from_run.translate(
        ["ein hund"]
    )
    with pytest.raises(TypeError, match="use Translator.from_run"):
        t2t_repro.Translator(toy_run_dir)
    with pytest.raises(TypeError, match="in memory Translator.from_model"):
        t2t_repro.Translator(load_model(toy_run_dir)[0])
    with pytest.raises(TypeError, match="^sentences is NoneType, not a list"):
        from_run.translate(None)
    # The search arguments, which the graph refused with an
    # InvalidArgumentError or a tensor slice with a TypeError.
    for arguments, error, message in [
        ({"beam_size": 0}, ValueError, "^beam_size=0 must be >= 1$"),
        ({"n_best": 2.0}, TypeError, r"^n_best=2.0 is not an int$"),
        ({"alpha": -1}, ValueError, "^alpha=-1 must be finite and >= 0$"),
        ({"alpha": float("nan")}, ValueError, "^alpha=nan must be finite"),
        ({"alpha": "0.6"}, TypeError, "^alpha='0.6' is not a number$"),
        ({"n_best": 5}, ValueError, r"^n_best=5 must be in \[1, beam_size=4\]"),
    ]:
        with pytest.raises(error, match=message):
            from_run.translate(["ein hund"], **arguments)
    assert from_run.translate(["ein hund"], beam_size=np.int64(2), alpha=np.float32(1))
    with pytest.raises(TypeError, match="checkpoint=200: give a path"):
        t2t_repro.Translator.from_run(toy_run_dir, checkpoint=200)


def test_an_exports_limits_are_checked_naming_the_sentence(exported):
    translator = t2t_repro.Translator.from_saved_model(exported)
    with pytest.raises(
        ValueError,
        match=r"^sentences\[1\]: 5000 bytes, over the SavedModel's "
        r"max_sentence_bytes=\d+; split it, or export with a larger "
        r"max_sentence_bytes$",
    ):
        translator.translate(["ein hund", "x" * 5000])
    with pytest.raises(
        ConfigError, match="^the SavedModel: beam_size=32 is over its max_beam_size=16"
    ):
        translator.translate(["ein hund"], beam_size=32)


def test_requests_to_an_export_stay_within_its_max_request_bytes(exported):
    """Short sentences of many bytes would fill one request over the
    export's limit, which its graph refuses (InvalidArgumentError) after
    the batches before it were translated."""
    sentences = ["ein hund " * 333] * 3  # 2,997 bytes each, one batch by words
    loaded = tf.saved_model.load(exported)
    loaded.max_request_bytes.assign(8192)
    translations = t2t_repro.Translator(loaded).translate(sentences, beam_size=1)
    assert len(translations) == 3 and len(set(translations)) == 1
    # t2t-translate --saved_model's translator, which reads the limit
    # from the export (patched after, as the fixture's is 1 MiB).
    tool = SavedModelTranslator(exported, DecodingOptions(beam_size=1))
    tool.max_request_bytes = 8192
    sent = []
    translate_batch = tool._translate_batch
    tool._translate_batch = lambda inputs: (
        sent.append(sum(map(len, inputs.numpy()))) or translate_batch(inputs)
    )
    assert tool.translate(sentences) == translations
    assert len(sent) > 1 and max(sent) <= 8192
    scorer = Scorer(loaded)
    results, _ = scorer.score(sentences, ["a dog"] * 3)
    assert len(results) == 3
    np.testing.assert_allclose(results[0], results[2], rtol=1e-5)


def test_training_batches_want_pairs_of_strings(from_run):
    tokenizer = from_run.graph.tokenizer
    pairs = tf.data.Dataset.from_tensor_slices([("ein hund", "a dog")])
    with pytest.raises(TypeError, match=r"got elements TensorSpec\(shape=\(2,\)"):
        training_batches(pairs, tokenizer, batch_tokens=64, max_length=8)


# The Keras loss and compile/fit ---------------------------------------------


def test_keras_loss_matches_the_reference_and_ignores_padding():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 6, 13)).astype(np.float32)
    labels = rng.integers(1, 13, size=(3, 6)).astype(np.int32)
    labels[0, 2:] = 0
    labels[2, 4:] = 0
    loss = t2t_repro.LabelSmoothedCrossEntropy(0.1)
    expected = ref.smoothed_cross_entropy(labels, logits, 0.1)
    np.testing.assert_allclose(float(loss(labels, logits)), expected, rtol=1e-5)
    noisy = logits.copy()
    noisy[labels == 0] += 50.0  # logits at PAD positions count for nothing
    np.testing.assert_allclose(float(loss(labels, noisy)), expected, rtol=1e-5)
    # The Trainer's sums, normalised by the real tokens.
    loss_sum, count, _ = smoothed_cross_entropy_stats(labels, logits, 0.1)
    np.testing.assert_allclose(
        float(loss(labels, logits)), float(loss_sum / count), rtol=1e-6
    )
    assert float(count) == 12.0
    clone = t2t_repro.LabelSmoothedCrossEntropy.from_config(loss.get_config())
    assert clone.smoothing == 0.1 and clone.name == loss.name
    assert (
        t2t_repro.LabelSmoothedCrossEntropy().smoothing
        == TrainingOptions.label_smoothing
    )
    with pytest.raises(ValueError, match="no sample_weight"):
        loss(labels, logits, sample_weight=np.ones(3, np.float32))


_TWO_REPLICAS = """
import json
import numpy as np
import tensorflow as tf
from t2t_repro.training.distribution import make_strategy
from t2t_repro.training.losses import LabelSmoothedCrossEntropy

strategy = make_strategy(cpu_devices=2)
rng = np.random.default_rng(0)
logits = rng.normal(size=(4, 5, 11)).astype(np.float32)
labels = rng.integers(1, 11, size=(4, 5)).astype(np.int32)
labels[:2, 1:] = 0  # replica 0 gets 2 real tokens, replica 1 gets 10
loss = LabelSmoothedCrossEntropy(0.1)
batch = next(iter(strategy.experimental_distribute_dataset(
    tf.data.Dataset.from_tensors((labels, logits)))))
per_replica = tf.function(lambda y, p: strategy.run(loss, args=(y, p)))(
    *batch)
print(json.dumps({"replicas": [float(v) for v in
                               strategy.experimental_local_results(
                                   per_replica)],
                  "labels": labels.tolist(), "logits": logits.tolist()}))
"""


def test_keras_loss_divides_by_the_tokens_of_all_replicas():
    result = run_python(["-c", _TWO_REPLICAS])
    assert result.returncode == 0, result.stderr[-3000:]
    outputs = json.loads(result.stdout)
    labels, logits = (
        np.array(outputs["labels"]),
        np.array(outputs["logits"], np.float32),
    )
    replicas = outputs["replicas"]
    assert len(replicas) == 2
    # Keras sums the replicas' gradients, so their losses must sum to the
    # global batch's mean: each replica's sum over all 12 real tokens.
    np.testing.assert_allclose(
        sum(replicas), ref.smoothed_cross_entropy(labels, logits, 0.1), rtol=1e-5
    )
    np.testing.assert_allclose(
        replicas[0],
        2 / 12 * ref.smoothed_cross_entropy(labels[:2], logits[:2], 0.1),
        rtol=1e-5,
    )


def _shorter_batch():
    """global_batch()'s four longest rows: another share of padding, so
    a loss normalised by anything but the real tokens weighs the two
    steps differently."""
    (source, target_input), target = global_batch()
    return (source[4:], target_input[4:]), target[4:]


def test_two_fit_steps_equal_two_trainer_steps(tmp_path):
    config = dataclasses.replace(SMALL, dropout=0.0, attention_dropout=0.0)
    options = TrainingOptions(
        model_dir=str(tmp_path),
        train_steps=2,
        warmup_steps=2,
        learning_rate_scale=0.1,
        mixed_precision="fp32",
    )
    strategy = tf.distribute.MirroredStrategy()
    trainer = prepare_run(config, options, strategy, tiny_vocab())
    initial = trainer.model.get_weights()
    batches = [
        tf.nest.map_structure(tf.constant, batch)
        for batch in (global_batch(), _shorter_batch())
    ]
    step = trainer.compile_step(
        tf.nest.map_structure(
            lambda t: tf.TensorSpec([None, None], t.dtype), batches[0]
        )
    )
    trainer_losses = []
    for batch in batches:
        outputs = step((batch,))
        trainer_losses.append(float(outputs["loss_sum"] / outputs["target_tokens"]))

    with strategy.scope():
        model = t2t_repro.Transformer(config)
        model.set_weights(initial)
        model.compile(
            optimizer=t2t_repro.paper_adam(
                t2t_repro.TransformerSchedule(
                    config.d_model, options.warmup_steps, options.learning_rate_scale
                )
            ),
            loss=t2t_repro.LabelSmoothedCrossEntropy(options.label_smoothing),
        )
    dataset = tf.data.Dataset.from_tensors(batches[0]).concatenate(
        tf.data.Dataset.from_tensors(batches[1])
    )
    # One step per epoch: Keras logs each step's loss, not their mean.
    history = model.fit(dataset, epochs=2, steps_per_epoch=1, verbose=0)

    np.testing.assert_allclose(history.history["loss"], trainer_losses, rtol=1e-6)
    # The key projection's bias has an exactly zero gradient (softmax is
    # shift-invariant per query): its Adam update is amplified round-off.
    compared = [
        (mine, theirs)
        for mine, theirs in zip(
            model.trainable_weights, trainer.model.trainable_weights
        )
        if not mine.path.endswith("/key/bias")
    ]
    assert len(compared) > 30
    for mine, theirs in compared:
        # Keras numbers a process's second model "transformer_1".
        assert mine.path.split("/", 1)[1] == theirs.path.split("/", 1)[1]
        np.testing.assert_allclose(
            mine.numpy(), theirs.numpy(), atol=1e-5, err_msg=mine.path
        )
    moved = [
        np.abs(w.numpy() - w0).max() for w, w0 in zip(model.trainable_weights, initial)
    ]
    assert min(moved) > 1e-3  # every weight took both updates


class _Preempted(Exception):
    pass


class _PreemptAtEpoch(keras.callbacks.Callback):
    """Stops fit at the start of an epoch, as a preempted job dies."""

    def __init__(self, epoch):
        super().__init__()
        self.epoch = epoch

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self.epoch:
            raise _Preempted(f"epoch {epoch}")


def test_fit_on_the_pipeline_with_tensorboard_and_backup_and_restore(tmp_path):
    batches = training_batches(
        toy_pairs(),
        make_tokenizer(tiny_vocab()),
        batch_tokens=128,
        max_length=SMALL.max_length,
        shuffle_buffer=64,
    )
    strategy = tf.distribute.MirroredStrategy()
    logs, backup = tmp_path / "logs", tmp_path / "backup"

    def fit(*extra_callbacks):
        """A new model (as in a new process) fit for 2 epochs of 2 steps;
        returns it and its history."""
        with strategy.scope():
            model = t2t_repro.Transformer(SMALL)
            model.compile(
                optimizer=t2t_repro.paper_adam(
                    t2t_repro.TransformerSchedule(SMALL.d_model, warmup_steps=4)
                ),
                loss=t2t_repro.LabelSmoothedCrossEntropy(),
            )
        history = model.fit(
            batches,
            epochs=2,
            steps_per_epoch=2,
            verbose=0,
            callbacks=[
                keras.callbacks.TensorBoard(str(logs)),
                keras.callbacks.BackupAndRestore(str(backup)),
                *extra_callbacks,
            ],
        )
        return model, history

    with pytest.raises(_Preempted):
        fit(_PreemptAtEpoch(1))
    assert tf.io.gfile.glob(str(logs / "train" / "events.out.tfevents.*"))
    assert json.loads((backup / "training_metadata.json").read_text()) == {
        "epoch": 1,
        "batch": 0,
    }
    assert (backup / "latest.weights.h5").exists()
    # The next run resumes after the backed-up epoch, with the optimizer's
    # step (and so the learning rate) restored, then drops the backup.
    model, history = fit()
    assert history.epoch == [1]
    assert int(model.optimizer.iterations.numpy()) == 4
    assert np.isfinite(history.history["loss"]).all()
    assert not backup.exists()


# docs/python_api.md ----------------------------------------------------------

# A ```python block, and the ```text block of what it prints if one follows.
_EXAMPLE = re.compile(
    r"```python\n(?P<code>.*?)```\n(?:\n```text\n"
    r"(?P<output>.*?)```\n)?",
    re.DOTALL,
)
_DECIMAL = re.compile(r"-?\d+\.\d+")


def _assert_prints(printed, shown, example):
    """`printed` is the page's `shown` output, decimals within 0.05 (the
    toy run's scores; its weights round differently on another CPU)."""
    assert _DECIMAL.sub("#", printed) == _DECIMAL.sub("#", shown), example
    np.testing.assert_allclose(
        [float(x) for x in _DECIMAL.findall(printed)],
        [float(x) for x in _DECIMAL.findall(shown)],
        atol=0.05,
        err_msg=f"example {example}",
    )


def test_docs_examples_run(toy_run_dir, exported, tmp_path, monkeypatch):
    """Runs the page's blocks in order in one namespace, from a directory
    where runs/x is the toy run and exports/x/200 its export (the page's
    convention), and checks what they print against the page."""
    with open(DOCS, encoding="utf-8") as handle:
        examples = list(_EXAMPLE.finditer(handle.read()))
    assert len(examples) >= 6
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "x").symlink_to(toy_run_dir)
    (tmp_path / "exports" / "x").mkdir(parents=True)
    (tmp_path / "exports" / "x" / "200").symlink_to(exported)
    monkeypatch.chdir(tmp_path)
    namespace = {}
    for number, example in enumerate(examples, 1):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(
                compile(example["code"], f"{DOCS}, example {number}", "exec"), namespace
            )
        if example["output"] is not None:
            _assert_prints(printed.getvalue(), example["output"], number)
