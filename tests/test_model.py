"""The assembled Transformer: shapes, causality, parameter counts, saving."""

import dataclasses
import glob
import json
import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers.processes import HELPERS, REPO, run_python
from t2t_repro.config import TransformerConfig
from t2t_repro.model import Transformer, global_policy

SMALL = TransformerConfig(
    vocab_size=50,
    d_model=16,
    num_heads=2,
    d_ff=32,
    num_encoder_layers=2,
    num_decoder_layers=2,
    dropout=0.1,
    max_length=32,
)


def _batch(seed=0):
    rng = np.random.default_rng(seed)
    source = rng.integers(4, 50, size=(3, 7))
    source[0, 5:] = 0
    target = rng.integers(4, 50, size=(3, 6))
    return tf.constant(source), tf.constant(target)


@pytest.mark.parametrize(
    "overrides", [{}, {"pre_norm": True}, {"position_encoding": "learned"}]
)
def test_decoder_is_causal(overrides):
    model = Transformer(TransformerConfig(**{**SMALL.__dict__, **overrides}))
    source, target = _batch()
    logits = model((source, target)).numpy()
    changed = target.numpy().copy()
    changed[:, 4:] = (changed[:, 4:] + 7) % 46 + 4
    changed_logits = model((source, tf.constant(changed))).numpy()
    np.testing.assert_allclose(logits[:, :4], changed_logits[:, :4], atol=1e-5)
    assert not np.allclose(logits[:, 4:], changed_logits[:, 4:], atol=1e-3)


def test_source_padding_is_ignored():
    model = Transformer(SMALL)
    source, target = _batch()
    longer = tf.pad(source, [[0, 0], [0, 5]])
    np.testing.assert_allclose(
        model((source, target)), model((longer, target)), atol=1e-5
    )


def test_source_word_dropout_drops_whole_tokens_before_positions():
    rate = 0.25
    config = {**SMALL.__dict__, "dropout": 0.0, "source_word_dropout": 0.0}
    model = Transformer(TransformerConfig(**{**config, "source_word_dropout": rate}))
    source = tf.constant(np.random.default_rng(1).integers(4, 50, size=(16, 30)))
    # Traced for any batch shape, as training runs it.
    embed = tf.function(
        lambda ids: model.embed(
            ids, training=True, word_dropout=model.source_word_dropout
        ),
        input_signature=[tf.TensorSpec([None, None], tf.int64)],
    )
    embedded = embed(source).numpy()
    # NumPy reference: sqrt(d_model) * E[ids] + the sinusoids of section 3.5.
    table = model.embedding.embeddings.numpy()
    words = np.sqrt(SMALL.d_model) * table[source.numpy()]
    position = np.arange(source.shape[1])[:, None]
    angles = position / 10000 ** (np.arange(0, SMALL.d_model, 2) / SMALL.d_model)
    sinusoids = np.empty([source.shape[1], SMALL.d_model])
    sinusoids[:, 0::2], sinusoids[:, 1::2] = np.sin(angles), np.cos(angles)
    kept = np.isclose(embedded, words / (1 - rate) + sinusoids, atol=1e-4).all(-1)
    dropped = np.isclose(embedded, sinusoids, atol=1e-4).all(-1)
    # Every token is either kept whole (scaled) or dropped whole.
    assert (kept ^ dropped).all()
    assert 0.18 < dropped.mean() < 0.32
    # A mask per sentence, not one per position for the whole batch.
    assert len({tuple(row) for row in dropped}) > 1
    # Only in training, and only on the source side.
    target = source[:, :6]
    np.testing.assert_allclose(
        model.encode(source, training=False),
        model.encode(source, training=None),
    )
    assert not np.allclose(
        model.encode(source, training=True), model.encode(source, training=False)
    )
    encoder_output = model.encode(source)
    np.testing.assert_allclose(
        model.decode(target, encoder_output, source, training=True),
        model.decode(target, encoder_output, source, training=False),
        atol=1e-5,
    )
    # Without it, the model has no extra (checkpointed) seed variable.
    without = Transformer(TransformerConfig(**config))
    assert len(without.variables) == len(model.variables) - 1


def test_logits_shape_and_tied_projection():
    model = Transformer(SMALL)
    source, target = _batch()
    assert model((source, target)).shape == (3, 6, 50)
    embedding_weights = [w for w in model.weights if "embedding" in w.path]
    assert [tuple(w.shape) for w in embedding_weights] == [(50, 16)]


@pytest.mark.parametrize(
    "flags_config, paper_count",
    [
        (dict(vocab_size=37000), 63.1e6),
        pytest.param(
            dict(vocab_size=37000, d_model=1024, num_heads=16, d_ff=4096, dropout=0.3),
            214e6,
            marks=pytest.mark.slow,
        ),
    ],
    ids=["base", "big"],
)
def test_parameter_count_matches_paper_accounting(flags_config, paper_count):
    model = Transformer(TransformerConfig(**flags_config))
    assert abs(model.count_params() - paper_count) / paper_count < 0.01


def test_get_config_round_trip_and_weight_save_load(tmp_path):
    model = Transformer(SMALL)
    source, target = _batch()
    expected = model((source, target)).numpy()

    clone = Transformer.from_config(model.get_config())
    assert clone.config == model.config
    clone.set_weights(model.get_weights())
    np.testing.assert_array_equal(clone((source, target)), expected)

    weights_path = str(tmp_path / "model.weights.h5")
    model.save_weights(weights_path)
    restored = Transformer(SMALL)
    restored.load_weights(weights_path)
    np.testing.assert_array_equal(restored((source, target)), expected)

    archive = str(tmp_path / "model.keras")
    model.save(archive)
    reloaded = keras.saving.load_model(archive)
    np.testing.assert_array_equal(reloaded((source, target)), expected)


def test_a_bf16_model_reloads_in_bf16_under_another_global_policy(tmp_path):
    with global_policy("mixed_bfloat16"):
        model = Transformer(SMALL)
    source, target = _batch()
    expected = model((source, target))
    archive = str(tmp_path / "model.keras")
    model.save(archive)
    reloaded = keras.saving.load_model(archive)
    assert keras.mixed_precision.global_policy().name == "float32"
    assert {layer.dtype_policy.name for layer in reloaded._flatten_layers()} == {
        "mixed_bfloat16"
    }
    np.testing.assert_array_equal(reloaded((source, target)), expected)


def test_building_creates_the_weights_a_first_call_would(monkeypatch):
    """`Transformer.build` creates every weight from shapes, as the layers
    would one by one on a first call: the same variables and, for a seed,
    the same values."""
    config = dataclasses.replace(
        SMALL, pre_norm=True, position_encoding="learned", source_word_dropout=0.1
    )
    keras.utils.set_random_seed(3)
    built = Transformer(config, name="transformer")
    keras.utils.set_random_seed(3)
    monkeypatch.setattr(Transformer, "build", lambda self, input_shape=None: None)
    called = Transformer(config, name="transformer")
    # Only the dropouts' seeds so far.
    assert all(v.path.endswith("seed_generator_state") for v in called.variables)
    called(_batch(), training=False)

    def paths(model):  # seed generators are named by a process-wide count
        return [re.sub(r"seed_generator(_\d+)?/", "", v.path) for v in model.variables]

    assert paths(called) == paths(built)
    for by_call, by_build in zip(called.variables, built.variables):
        np.testing.assert_array_equal(by_call.numpy(), by_build.numpy(), by_call.path)


def test_layer_dropout_reaches_every_layer():
    model = Transformer(dataclasses.replace(SMALL, pre_norm=True, layer_dropout=0.2))
    stack = model.encoder_layers + model.decoder_layers
    assert [layer.layer_drop.rate for layer in stack] == [0.2] * len(stack)


def test_invalid_config_names_the_problem():
    with pytest.raises(ValueError, match="d_model=30 is not divisible by num_heads=4"):
        TransformerConfig(vocab_size=100, d_model=30, num_heads=4)
    with pytest.raises(ValueError, match="dropout=1.5"):
        TransformerConfig(vocab_size=100, dropout=1.5)
    with pytest.raises(ValueError, match="layer_dropout=0.1 needs pre_norm"):
        TransformerConfig(vocab_size=100, layer_dropout=0.1)


@pytest.mark.slow  # builds every shipped model, the big ones too
def test_every_shipped_flagfile_builds_the_model_docs_training_states():
    """Every flags/*.cfg parses as t2t-train reads it, and the table of
    shipped flagfiles in docs/training.md lists each of them (no other)
    with the parameter count of the model it builds."""
    result = run_python([os.path.join(HELPERS, "flagfile_models.py")])
    assert result.returncode == 0, result.stderr[-3000:]
    counts = {
        path: model["params"]
        for path, model in json.loads(result.stdout.strip().splitlines()[-1]).items()
    }
    with open(os.path.join(REPO, "docs", "training.md"), encoding="utf-8") as handle:
        stated = dict(
            re.findall(
                r"^\| `(flags/[\w.]+\.cfg)` \| [^|]+ \| "
                r"([\d,]+) \|$",
                handle.read(),
                re.M,
            )
        )
    assert sorted(counts) == sorted(stated)  # every flagfile, no other
    for path, count in counts.items():
        assert int(stated[path].replace(",", "")) == count, path


def _flagfile_values(path, restated):
    """{flag name: value} after the flagfile `path` (relative to the
    repository, as flagfiles name each other); appends to `restated` each
    of its own lines that gives a flag the value it already had: its
    default, or the value a flagfile included before it gave it."""
    from absl import flags

    from t2t_repro.cli.flags import define_training_flags

    define_training_flags(show=False)
    values = {}
    with open(os.path.join(REPO, path), encoding="utf-8") as handle:
        lines = [line.strip() for line in handle]
    for line in lines:
        if not line or line.startswith("#"):
            continue
        name, given, text = line.removeprefix("--").partition("=")
        if name == "flagfile":
            values.update(_flagfile_values(text, []))  # checked on its own
            continue
        value = flags.FLAGS[name].parser.parse(text) if given else True
        if not given and name not in flags.FLAGS:
            name, value = name.removeprefix("no"), False
        # --num_layers sets both stacks.
        names = (
            ["num_encoder_layers", "num_decoder_layers"]
            if name == "num_layers"
            else [name]
        )
        if all(values.get(n, flags.FLAGS[n].default) == value for n in names):
            restated.append(f"{path}: {line}")
        values.update(dict.fromkeys(names, value))
    return values


def test_no_shipped_flagfile_restates_a_value_its_flag_already_has():
    """A flagfile line that gives config.py's default (or an included
    flagfile's value) again would be a second copy of that fact."""
    restated = []
    paths = sorted(
        os.path.relpath(path, REPO)
        for path in glob.glob(
            os.path.join(REPO, "flags", "**", "*.cfg"), recursive=True
        )
    )
    assert len(paths) > 20
    for path in paths:
        _flagfile_values(path, restated)
    assert not restated, restated
