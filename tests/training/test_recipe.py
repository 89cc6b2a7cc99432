"""Small-data recipe options: best checkpoints by dev BLEU, early stopping,
subword sampling, decoupled weight decay, R-Drop, and their flags."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers.one_training_step import (
    CONFIG,
    direct_gradient_norm,
    global_batch,
    one_step,
)
from helpers.toy_run import SMALL, toy_pairs, toy_trainer
from helpers.train_command import MULTI30K_VAL, multi30k_test_set, run_train
from helpers.vocab_for_tests import tiny_vocab
from t2t_repro.averaging import average_checkpoints
from t2t_repro.best_checkpoints import BestCheckpoints
from t2t_repro.checkpoints import load_model, model_checkpoint
from t2t_repro.config import TrainingOptions
from t2t_repro.data import pipeline
from t2t_repro.data.vocabulary import make_tokenizer
from t2t_repro.model import Transformer
from t2t_repro.training import step as training_step
from t2t_repro.training.losses import (
    consistency_loss_sum,
)
from t2t_repro.training.prepare import prepare_run
from t2t_repro.training.schedule import TransformerSchedule, paper_adam


class ScriptedBleuTrainer:
    """A toy Trainer whose dev BLEU at evaluation k is `scores[k]`: which
    checkpoints are best then does not depend on how training went."""

    def __new__(cls, model_dir, steps, scores, **options):
        trainer = toy_trainer(
            model_dir,
            steps,
            dev_pairs=toy_pairs().take(2),
            **{
                "eval_every": 5,
                "checkpoint_every": 5,
                "dev_bleu_sentences": 2,
                **options,
            },
        )
        by_step = dict(zip(range(5, 5 * len(scores) + 1, 5), scores))
        trainer.evaluator.bleu = lambda hypotheses, references: (
            by_step[trainer.step],
            "scripted",
        )
        return trainer


def _weights(model):
    return [w.numpy() for w in model.trainable_weights]


@pytest.mark.slow
def test_best_checkpoints_are_kept_resumed_and_averaged(tmp_path):
    run = str(tmp_path / "run")
    scores = [1.0, 3.0, 2.0, 2.5, 4.0, 0.5]
    trainer = ScriptedBleuTrainer(run, 20, scores, keep_best=2)
    assert trainer.train() == 20
    saved_at = {
        step: _weights(load_model(run, os.path.join(run, f"ckpt-{step}"))[0])
        for step in (10, 20)
    }
    best = BestCheckpoints(run)
    assert [(e["step"], e["bleu"]) for e in best.best] == [(10, 3.0), (20, 2.5)]
    assert sorted(os.listdir(os.path.join(run, "best"))) == sorted(
        [
            "scores.json",
            "ckpt-10.index",
            "ckpt-10.data-00000-of-00001",
            "ckpt-20.index",
            "ckpt-20.data-00000-of-00001",
        ]
    )
    for step in (10, 20):  # the best files hold that step's weights
        model = Transformer(SMALL, name="transformer")
        model_checkpoint(model).restore(
            os.path.join(run, "best", f"ckpt-{step}")
        ).expect_partial().assert_existing_objects_matched()
        for got, want in zip(_weights(model), saved_at[step]):
            np.testing.assert_array_equal(got, want)

    # Killed after evaluating step 20 but before its checkpoint landed: the
    # resumed run starts at 15, forgets step 20's score and its best file,
    # and evaluates 20 again (scored 2.5 again) and 25 (4.0, a new best).
    for name in tf.io.gfile.glob(os.path.join(run, "ckpt-20.*")):
        os.remove(name)
    state = tf.train.get_checkpoint_state(run)
    tf.compat.v1.train.update_checkpoint_state(
        run,
        os.path.join(run, "ckpt-15"),
        [p for p in state.all_model_checkpoint_paths if not p.endswith("-20")],
    )
    resumed = ScriptedBleuTrainer(run, 30, scores, keep_best=2)
    assert resumed.step == 15
    assert [e["step"] for e in resumed.best.evaluations] == [5, 10, 15]
    assert not os.path.exists(os.path.join(run, "best", "ckpt-20.index"))
    assert resumed.train() == 30
    best = BestCheckpoints(run)
    assert [(e["step"], e["bleu"]) for e in best.best] == [(25, 4.0), (10, 3.0)]
    assert [e["step"] for e in best.evaluations] == [5, 10, 15, 20, 25, 30]
    minutes = [e["minutes"] for e in best.evaluations]
    assert minutes == sorted(minutes) and minutes[-1] > 0

    output = average_checkpoints(run, str(tmp_path / "avg"), 2, "best")
    assert output.endswith("ckpt-25")  # named after the best
    averaged = _weights(load_model(str(tmp_path / "avg"))[0])
    pair = [
        _weights(load_model(run, os.path.join(run, "best", f"ckpt-{s}"))[0])
        for s in (25, 10)
    ]
    for got, a, b in zip(averaged, *pair):
        np.testing.assert_allclose(
            got, (a.astype(np.float64) + b) / 2, rtol=1e-6, atol=1e-7
        )
    with pytest.raises(ValueError, match="holds 2 best checkpoint"):
        average_checkpoints(run, str(tmp_path / "avg3"), 3, "best")


@pytest.mark.slow  # 41 s
def test_early_stopping_after_patience_and_it_stays_stopped(tmp_path):
    run = str(tmp_path / "run")
    # Best at the 2nd evaluation; 3 evaluations without a gain stop it.
    scores = [1.0, 3.0, 2.0, 3.0, 2.9, 5.0]
    trainer = ScriptedBleuTrainer(run, 100, scores, keep_best=1, patience=3)
    assert trainer.train() == 25
    assert BestCheckpoints(run).stopped_early_at == 25
    assert tf.train.latest_checkpoint(run).endswith("ckpt-25")
    again = ScriptedBleuTrainer(run, 100, scores, keep_best=1, patience=3)
    assert again.train() == 25  # the same command does not train on


def test_subword_sampling_varies_training_segmentations_only(tmp_path):
    trainer = toy_trainer(
        tmp_path / "run", 1, dev_pairs=toy_pairs().take(1), subword_sampling=0.3
    )
    proto = tiny_vocab()
    sentence = tf.constant(["ein hund läuft über das gras"] * 40)
    plain = make_tokenizer(proto)
    sampled = make_tokenizer(proto, sampling=0.3)
    best = plain.tokenize(sentence).to_list()
    assert all(ids == best[0] for ids in best)  # off: deterministic
    samples = sampled.tokenize(sentence).to_list()
    # Unseeded; 40 identical samples at a 0.3 dropout rate would take
    # odds below 1e-12.
    assert len({tuple(ids) for ids in samples}) > 1
    assert all(ids[-1] == best[0][-1] for ids in samples)  # EOS kept
    assert set(plain.detokenize(sampled.tokenize(sentence)).numpy()) == {
        "ein hund läuft über das gras".encode()
    }

    batches = [
        b
        for b in pipeline.shuffled_batches(
            toy_pairs(),
            trainer.input_state.tokenizer,
            batch_tokens=128,
            max_length=32,
            shuffle_buffer=1,
        ).as_numpy_iterator()
    ]
    sampled_sources = {tuple(row[row != 0]) for b in batches for row in b[0][0]}
    plain_sources = {
        tuple(row)
        for row in plain.tokenize(
            [s for s, _ in toy_pairs().as_numpy_iterator()]
        ).to_list()
    }
    assert sampled_sources - plain_sources  # training sees new splits
    # Evaluation, decoding and export use the deterministic tokenizer.
    trainer.evaluator.loss(trainer.model)  # makes the evaluator's
    assert trainer.evaluator.tokenizer.tokenize(sentence).to_list() == best


@pytest.mark.parametrize("made", ["here", "from its config"])
def test_weight_decay_shrinks_matrices_only(made):
    """Also in an optimizer made from its config, as keras.saving.load_model
    makes a compiled model's (Keras' config keeps no exclusions)."""
    model = Transformer(SMALL)
    schedule = TransformerSchedule(SMALL.d_model, 10, 1.0)
    optimizer = paper_adam(schedule, weight_decay=0.5)
    if made == "from its config":
        optimizer = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    variables = model.trainable_variables
    before = [v.numpy() for v in variables]
    # Zero gradients: Adam moves nothing, so only the decay shows.
    optimizer.apply_gradients([(tf.zeros_like(v), v) for v in variables])
    rate = float(schedule(0))  # the first update's
    decayed = kept = 0
    for variable, old in zip(variables, before):
        if variable.name in ("bias", "gamma", "beta", "embeddings"):
            np.testing.assert_array_equal(variable.numpy(), old)
            kept += 1
        else:
            np.testing.assert_allclose(
                variable.numpy(), old * (1 - 0.5 * rate), rtol=1e-6
            )
            decayed += 1
    assert decayed >= 10 and kept >= 10


def test_recipe_flags_are_validated(tmp_path):
    run = f"--model_dir={tmp_path}/run"
    result = run_train(run, "--train_src=x", "--train_tgt=y", "--subword_sampling=1.5")
    assert result.returncode != 0
    assert "subword_sampling" in result.stderr
    assert "Traceback" not in result.stderr
    data = tmp_path / "pairs"
    (data.with_suffix(".en")).write_text("a dog\n", "utf-8")
    (data.with_suffix(".de")).write_text("ein hund\n", "utf-8")
    result = run_train(
        run, f"--train_src={data}.en", f"--train_tgt={data}.de", "--keep_best=3"
    )
    assert result.returncode != 0
    assert "--keep_best and --patience rank checkpoints by dev BLEU" in result.stderr
    assert "Traceback" not in result.stderr
    assert not os.path.exists(tmp_path / "run" / "best")


@pytest.mark.slow  # 43 s; averaging itself is checked by the best-N test
def test_train_cli_scores_the_average_of_the_last_checkpoints(tmp_path):
    run = tmp_path / "run"
    common = [
        f"--model_dir={run}",
        *MULTI30K_VAL,
        *multi30k_test_set(tmp_path, 5),
        "--train_steps=6",
        "--checkpoint_every=3",
        "--batch_tokens=256",
    ]
    result = run_train(*common, "--average_last=2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"average of steps 3, 6 in {run}/average" in result.stdout
    averaged = _weights(load_model(str(run / "average"))[0])
    pair = [_weights(load_model(str(run), str(run / f"ckpt-{s}"))[0]) for s in (3, 6)]
    for got, a, b in zip(averaged, *pair):
        np.testing.assert_allclose(
            got, (a.astype(np.float64) + b) / 2, rtol=1e-6, atol=1e-7
        )
    result = run_train(*common, "--average_last=3", "--keep_checkpoints=2")
    assert result.returncode != 0
    assert "--average_last cannot exceed --keep_checkpoints" in result.stderr


def _log_softmax(logits):
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def test_consistency_loss_is_the_mean_of_both_kl_divergences_over_real_tokens():
    rng = np.random.default_rng(0)
    logits_a, logits_b = rng.normal(size=(2, 2, 3, 7)).astype(np.float32)
    labels = np.array([[5, 6, 0], [4, 0, 0]], np.int32)  # 0 is PAD
    log_p, log_q = _log_softmax(logits_a), _log_softmax(logits_b)
    kl_pq = (np.exp(log_p) * (log_p - log_q)).sum(-1)
    kl_qp = (np.exp(log_q) * (log_q - log_p)).sum(-1)
    want = ((kl_pq + kl_qp) / 2 * (labels != 0)).sum()
    got = consistency_loss_sum(labels, logits_a, logits_b)
    np.testing.assert_allclose(float(got), want, rtol=1e-5)
    assert float(consistency_loss_sum(labels, logits_a, logits_a)) == pytest.approx(
        0.0, abs=1e-6
    )


def test_rdrop_without_dropout_takes_the_plain_step(tmp_path, caplog):
    # Without dropout both passes predict alike (no consistency term) and
    # the doubled batch has the plain one's mean token loss: any stray
    # term or wrong normaliser changes the gradient norm.
    assert (
        CONFIG.dropout
        == CONFIG.attention_dropout
        == CONFIG.relu_dropout
        == CONFIG.source_word_dropout
        == CONFIG.layer_dropout
        == 0
    )
    strategy = tf.distribute.MirroredStrategy()
    plain = one_step(strategy, str(tmp_path / "plain"), [global_batch()])
    rdrop = one_step(
        strategy, str(tmp_path / "rdrop"), [global_batch()], rdrop_weight=5.0
    )
    np.testing.assert_allclose(rdrop["loss"], plain["loss"], rtol=1e-5)
    # (A doubled batch sums in another order: round-off of ~1e-4.)
    np.testing.assert_allclose(rdrop["grad_norm"], plain["grad_norm"], rtol=1e-3)
    assert "--rdrop_weight=5 without dropout" in caplog.text


def test_rdrop_weighs_its_term_per_target_token(tmp_path, monkeypatch):
    # Without dropout the real term is 0 (the test above); a stand-in that
    # grows with the logits shows how the step weighs and normalises it.
    def stand_in(labels, logits_a, logits_b):
        return 1e-2 * tf.reduce_sum(tf.square(tf.cast(logits_a, tf.float32)))

    monkeypatch.setattr(training_step, "consistency_loss_sum", stand_in)
    weight = 3.0
    (source, target_input), target = global_batch()
    options = TrainingOptions(
        model_dir=str(tmp_path),
        train_steps=1,
        warmup_steps=1,
        rdrop_weight=weight,
        mixed_precision="fp32",
    )
    trainer = prepare_run(
        CONFIG, options, tf.distribute.MirroredStrategy(), tiny_vocab()
    )
    # The doubled batch: twice the loss over twice the tokens, the term
    # once.
    want, _ = direct_gradient_norm(
        trainer,
        global_batch(),
        lambda logits, loss_sum, count: (
            (2 * loss_sum + weight * stand_in(None, logits, logits)) / (2 * count)
        ),
    )
    batch = (tf.constant(source), tf.constant(target_input)), tf.constant(target)
    step = trainer.compile_step(
        tf.nest.map_structure(lambda t: tf.TensorSpec([None, None], t.dtype), batch)
    )
    outputs = step((batch,))
    np.testing.assert_allclose(float(outputs["grad_norm"]), want, rtol=2e-3)


def test_rdrop_with_dropout_adds_the_consistency_gradient(tmp_path):
    strategy = tf.distribute.MirroredStrategy()
    norms = [
        one_step(
            strategy,
            str(tmp_path / str(weight)),
            [global_batch()],
            config=SMALL,
            rdrop_weight=weight,
        )["grad_norm"]
        for weight in (1e-9, 100.0)
    ]
    # The same two passes (same seed, same doubled batch); only the weight
    # of their disagreement differs.
    assert norms[1] > 1.5 * norms[0]
