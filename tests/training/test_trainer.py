"""What the Trainer produces: a toy run that learns every pair, a step
and decoders traced a bounded number of times, TensorBoard curves and the
dev evaluation's output."""

import itertools
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from helpers.margins import teacher_forced_margins
from helpers.toy_run import SMALL, learnable_run_evaluator, toy_pairs, toy_trainer
from helpers.vocab_for_tests import tiny_vocab
from t2t_repro.checkpoints import load_model
from t2t_repro.config import DecodingOptions
from t2t_repro.data.pipeline import bucket_boundaries
from t2t_repro.data.vocabulary import make_tokenizer
from t2t_repro.inference.translators import ModelTranslator


def test_the_toy_run_learns_every_pair_with_a_margin(toy_run_dir):
    # What tests that use the toy run (t2t-eval's BLEU) rely on.
    model, proto, _ = load_model(toy_run_dir)
    tokenizer = make_tokenizer(proto)
    sources, targets = zip(
        *[(s.decode(), t.decode()) for s, t in toy_pairs().as_numpy_iterator()]
    )
    margins = teacher_forced_margins(
        model,
        tokenizer.tokenize(sources).to_tensor(),
        tokenizer.tokenize(targets).to_tensor().numpy(),
    )
    assert margins.min() > 1.0, np.sort(margins)[:5]
    greedy = ModelTranslator(model, tokenizer, DecodingOptions(beam_size=1))
    assert greedy.translate(list(sources)) == list(targets)


@pytest.mark.slow  # 22 s: keeps the default suite within CI's 20 minutes
def test_the_step_and_the_decoders_trace_a_bounded_number_of_times(tmp_path):
    # 40 steps over length-bucketed batches of several shapes, then
    # translations of 1 to 30-word inputs in batches of 1 to 4 sentences.
    trainer = toy_trainer(tmp_path, 40, config=SMALL, batch_tokens=200)
    shapes = {
        tuple(batch[1].shape)
        for batch in itertools.islice(trainer.input_state.dataset, 40)
    }
    assert len(shapes) >= 3
    trainer.train()
    assert trainer.train_step.experimental_get_tracing_count() == 1
    tokenizer = make_tokenizer(tiny_vocab())
    translator = ModelTranslator(
        trainer.model,
        tokenizer,
        DecodingOptions(beam_size=1, max_batch_sentences=4),
    )
    words = "ein hund läuft das gras der mann eine katze".split()
    sentences = [" ".join(words[: n % 8 + 1] * (n // 8 + 1)) for n in range(30)]
    translator.translate(sentences)
    lengths = {len(ids) for ids in tokenizer.tokenize(sentences).to_list()}
    traces = translator.graph.decode_ids.experimental_get_tracing_count()
    assert translator.graph.serve.experimental_get_tracing_count() == 1
    # One per (batch size, bucket width) met, not one per input length.
    assert traces <= 4 * len(bucket_boundaries(SMALL.max_length))
    assert traces < len(lengths)


def _event_values(directory):
    """{tag: [summary value]} of every event file in `directory`."""
    values = {}
    for name in os.listdir(directory):
        for event in tf.compat.v1.train.summary_iterator(os.path.join(directory, name)):
            for value in event.summary.value:
                values.setdefault(value.tag, []).append(value)
    return values


def test_no_attention_images_for_a_dev_sentence_with_nothing_to_translate(
    toy_run_dir, tmp_path
):
    """A byte order mark alone passes the data checks (it is not
    whitespace) but tokenizes to nothing: no images, and no error that
    would stop training."""
    model, evaluator = learnable_run_evaluator(
        toy_run_dir, toy_pairs().take(2), str(tmp_path)
    )
    for name, sentence in [("nothing", "\ufeff"), ("something", "ein hund")]:
        with tf.summary.create_file_writer(str(tmp_path / name)).as_default(step=1):
            evaluator._write_attention_images(model, sentence)
    assert not _event_values(str(tmp_path / "nothing"))
    written = _event_values(str(tmp_path / "something"))
    assert any(tag.startswith("attention/") for tag in written)


def test_tensorboard_curves_and_dev_evaluation(tmp_path):
    trainer = toy_trainer(
        tmp_path / "tb", 10, eval_every=10, dev_pairs=toy_pairs().take(8)
    )
    trainer.train()
    assert {
        "loss",
        "accuracy",
        "learning_rate",
        "grad_norm",
        "tokens_per_second",
        "padding_efficiency",
    } <= set(_event_values(str(tmp_path / "tb" / "train")))
    dev = _event_values(str(tmp_path / "tb" / "dev"))
    assert {"loss", "bleu", "translations"} <= set(dev)
    # One image per head of the last layer, 30 pixels per subword piece
    # of the first dev sentence (with EOS).
    sentence = next(toy_pairs().take(1).as_numpy_iterator())[0]
    pieces = len(make_tokenizer(tiny_vocab()).tokenize([sentence])[0]) + 1
    images = {tag for tag in dev if tag.startswith("attention/")}
    assert images == {
        f"attention/{kind}/head_{head}"
        for head in (0, 1)
        for kind in ("encoder_self", "decoder_self", "encoder_decoder")
    }
    for tag in images:
        # An image summary: width, height, then the PNG.
        width, height = (int(x) for x in dev[tag][0].tensor.string_val[:2])
        if "encoder" in tag:
            assert min(width, height) >= 30 * pieces, tag
    with open(tmp_path / "tb" / "config.json") as handle:
        assert json.load(handle)["d_model"] == 16
    assert tf.train.latest_checkpoint(str(tmp_path / "tb")).endswith("ckpt-10")


@pytest.mark.slow
def test_dev_evaluations_do_not_change_what_is_trained(tmp_path):
    # How often the dev set is scored is a monitoring choice: it must
    # not move the dropout masks or the data order, or the recipes'
    # --eval_every would be a hidden hyper-parameter.
    def trained_weights(name, **evaluation):
        trainer = toy_trainer(tmp_path / name, 10, **evaluation)
        trainer.train()
        return [w.numpy() for w in trainer.model.trainable_weights]

    assert SMALL.dropout > 0 and SMALL.attention_dropout > 0
    unevaluated = trained_weights("none")
    evaluated = trained_weights("every_3", eval_every=3, dev_pairs=toy_pairs().take(4))
    assert len(evaluated) == len(unevaluated)
    for a, b in zip(evaluated, unevaluated):
        np.testing.assert_array_equal(a, b)
