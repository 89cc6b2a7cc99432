"""Fine-tuning (`t2t-train --init_from`): a new run from another run's
weights and vocabulary, which is only read."""

import hashlib
import os
import pathlib
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers.processes import run_python
from helpers.toy_run import LEARNABLE, LEARNABLE_STEPS, toy_pairs, toy_trainer
from t2t_repro import fine_tuning
from t2t_repro.averaging import average_checkpoints, newest_checkpoints
from t2t_repro.checkpoints import latest_checkpoint, load_model
from t2t_repro.config import ConfigError


def _file_hashes(directory):
    hashes = {}
    for parent, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(parent, name)
            with open(path, "rb") as handle:
                hashes[path] = hashlib.sha256(handle.read()).hexdigest()
    return hashes


def _fine_tuning_trainer(source_dir, model_dir, steps, optimizer_slots):
    source, checkpoint = fine_tuning.source_of(source_dir)
    # The source's model and vocabulary (tiny_vocab()), as t2t-train does.
    trainer = toy_trainer(
        model_dir, steps, config=source.load_config(), batch_tokens=256
    )
    fine_tuning.initialize(trainer, checkpoint, optimizer_slots)
    return trainer, checkpoint


def test_new_run_starts_at_step_0_from_the_source_weights_then_moves(
    toy_run_dir, tmp_path
):
    before = _file_hashes(toy_run_dir)
    trainer, checkpoint = _fine_tuning_trainer(
        toy_run_dir, tmp_path / "new", 3, optimizer_slots=False
    )
    assert checkpoint == latest_checkpoint(toy_run_dir)
    source_model, _, _ = load_model(toy_run_dir, checkpoint)
    assert trainer.model.config == LEARNABLE and trainer.step == 0
    for weight, source_weight in zip(trainer.model.weights, source_model.weights):
        np.testing.assert_array_equal(
            weight.numpy(), source_weight.numpy(), err_msg=weight.path
        )
    # A fresh optimizer: no moments, and the schedule's warm-up from 0.
    assert int(trainer.optimizer.iterations.numpy()) == 0
    assert all(not np.any(v.numpy()) for v in trainer.optimizer.variables)

    trainer.train()
    assert trainer.step == 3
    assert int(trainer.optimizer.iterations.numpy()) == 3
    moved = [
        not np.array_equal(w.numpy(), s.numpy())
        for w, s in zip(trainer.model.trainable_weights, source_model.trainable_weights)
    ]
    assert sum(moved) > len(moved) // 2
    assert latest_checkpoint(str(tmp_path / "new")).endswith("ckpt-3")
    assert _file_hashes(toy_run_dir) == before


def test_optimizer_slots_are_the_sources_adam_moments_but_not_its_step(
    toy_run_dir, tmp_path
):
    trainer, checkpoint = _fine_tuning_trainer(
        toy_run_dir, tmp_path / "new", 1, optimizer_slots=True
    )
    saved = tf.train.load_checkpoint(checkpoint)
    assert (
        saved.get_tensor("optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE")
        == LEARNABLE_STEPS
    )
    assert int(trainer.optimizer.iterations.numpy()) == 0
    # The optimizer's variables: its step, then each weight's moments.
    moments = trainer.optimizer.variables[1:]
    assert len(moments) == 2 * len(trainer.model.trainable_weights)
    for index, moment in enumerate(moments, start=1):
        np.testing.assert_array_equal(
            moment.numpy(),
            saved.get_tensor(
                f"optimizer/_variables/{index}/.ATTRIBUTES/VARIABLE_VALUE"
            ),
        )


def test_init_from_names_a_run_or_one_of_its_checkpoints(toy_run_dir, tmp_path):
    latest = latest_checkpoint(toy_run_dir)
    assert fine_tuning.source_of(toy_run_dir)[1] == latest
    older = newest_checkpoints(toy_run_dir, 2)[0]
    source, checkpoint = fine_tuning.source_of(older)
    assert (source.path, checkpoint) == (toy_run_dir, older)
    # A best checkpoint (t2t-train --keep_best) is in RUN/best/.
    best = tmp_path / "run" / "best"
    best.mkdir(parents=True)
    for path in tf.io.gfile.glob(latest + ".*"):
        shutil.copy(path, best)
    best_checkpoint = f"{best}/ckpt-{LEARNABLE_STEPS}"
    source, checkpoint = fine_tuning.source_of(best_checkpoint)
    assert (source.path, checkpoint) == (str(tmp_path / "run"), best_checkpoint)
    with pytest.raises(FileNotFoundError, match="no checkpoint found"):
        fine_tuning.source_of(str(tmp_path))
    # A run of its own named "best" (it has a config.json) is that run.
    named_best = tmp_path / "runs" / "best"
    shutil.copytree(toy_run_dir, named_best)
    checkpoint = f"{named_best}/{os.path.basename(latest)}"
    assert fine_tuning.source_of(checkpoint)[0].path == str(named_best)


def test_adam_moments_are_taken_only_from_a_run_of_the_same_optimizer(
    toy_run_dir, tmp_path
):
    """An fp16 run's optimizer (Keras' LossScaleOptimizer) keeps Adam's
    moments under inner_optimizer/: they do not fit a float32 or bf16
    run's Adam, nor the reverse, which is named before restoring."""
    latest = latest_checkpoint(toy_run_dir)
    assert fine_tuning.check_has_optimizer_slots(latest, latest) == "plain"
    variable = keras.Variable(tf.ones([2, 2]))
    loss_scaled = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam())
    loss_scaled.apply_gradients([(tf.ones([2, 2]), variable)])
    fp16 = tf.train.Checkpoint(optimizer=loss_scaled).save(str(tmp_path / "fp16/c"))
    assert fine_tuning.check_has_optimizer_slots(fp16, fp16) == "loss-scaled"

    source = fine_tuning.source_of(toy_run_dir)[0]
    trainer = toy_trainer(
        tmp_path / "new", 1, config=source.load_config(), mixed_precision="fp16"
    )
    with pytest.raises(ConfigError) as refused:
        fine_tuning.initialize(trainer, latest, optimizer_slots=True)
    assert str(refused.value) == (
        f"--init_optimizer_slots: {latest} was trained in fp32 or bf16 and this "
        "run trains in fp16: fp16's loss-scaled optimizer keeps its moments "
        "apart; give the source's --mixed_precision, or drop --init_optimizer_slots"
    )


def test_a_damaged_source_is_named_in_one_line(toy_run_dir, tmp_path):
    shutil.copytree(toy_run_dir, tmp_path / "run")
    checkpoint = str(
        tmp_path / "run" / os.path.basename(latest_checkpoint(toy_run_dir))
    )
    with open(checkpoint + ".index", "r+b") as handle:
        handle.truncate(20)
    with pytest.raises(ConfigError, match="^--init_from=RUN: ") as refused:
        fine_tuning.check_has_optimizer_slots("RUN", checkpoint)
    assert "\n" not in str(refused.value)


def _train_cli(tmp_path, *flags):
    pairs = [(s.decode(), t.decode()) for s, t in toy_pairs().as_numpy_iterator()]
    (tmp_path / "train.de").write_text("".join(s + "\n" for s, _ in pairs))
    (tmp_path / "train.en").write_text("".join(t + "\n" for _, t in pairs))
    return run_python(
        [
            "-m",
            "t2t_repro.cli",
            "train",
            f"--train_src={tmp_path}/train.de",
            f"--train_tgt={tmp_path}/train.en",
            "--train_steps=2",
            "--batch_tokens=256",
            "--warmup_steps=5",
            "--mixed_precision=fp32",
            *flags,
        ]
    )


@pytest.mark.slow
def test_cli_fine_tunes_a_copy_and_refuses_another_model(toy_run_dir, tmp_path):
    before = _file_hashes(toy_run_dir)
    new = tmp_path / "new"
    result = _train_cli(tmp_path, f"--init_from={toy_run_dir}", f"--model_dir={new}")
    assert result.returncode == 0, result.stderr[-3000:]
    for name in ("config.json", "spm.model"):
        assert (new / name).read_bytes() == pathlib.Path(toy_run_dir, name).read_bytes()
    assert latest_checkpoint(str(new)).endswith("ckpt-2")
    assert "step 2/2 loss" in result.stderr

    # A model flag that differs from the source's config.json.
    refused = _train_cli(
        tmp_path,
        f"--init_from={toy_run_dir}",
        f"--model_dir={tmp_path}/other",
        "--d_model=64",
        "--num_heads=2",
    )
    assert refused.returncode == 2
    assert refused.stderr.splitlines()[-1] == (
        f"t2t-train: error: --init_from: the model differs from "
        f"{toy_run_dir}/config.json: d_model 64 != 32"
    )

    # On a run with checkpoints the resume wins, and its config.json is
    # the model.
    resumed = _train_cli(
        tmp_path, f"--init_from={toy_run_dir}", f"--model_dir={new}", "--d_model=64"
    )
    assert resumed.returncode == 2
    assert (
        f"--init_from ignored: {new} has checkpoints, resuming from them"
    ) in resumed.stderr
    assert resumed.stderr.splitlines()[-1] == (
        f"t2t-train: error: --init_from: the model differs from "
        f"{new}/config.json: d_model 64 != 32"
    )
    # An average (as a best/ checkpoint) holds no Adam moments: refused
    # before anything is written into the new run directory.
    average = average_checkpoints(toy_run_dir, str(tmp_path / "average"), 2)
    refused = _train_cli(
        tmp_path,
        f"--init_from={tmp_path}/average",
        "--init_optimizer_slots",
        f"--model_dir={tmp_path}/from_average",
    )
    assert refused.returncode == 2
    assert refused.stderr.splitlines()[-1] == (
        f"t2t-train: error: --init_from={tmp_path}/average: {average} holds weights "
        "only (a best/ or averaged checkpoint has no Adam moments): drop "
        "--init_optimizer_slots, or name a checkpoint of the run itself, RUN/ckpt-N"
    )
    assert not list((tmp_path / "from_average").iterdir())
    assert _file_hashes(toy_run_dir) == before
