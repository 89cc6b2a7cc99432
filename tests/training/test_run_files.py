"""The run directory's files, damaged or changed under it: each is named in
one line, nothing outside the run is touched, and what can go on does (the
bad-input matrix, tests/helpers/bad_inputs.py, checks the tools' exit)."""

import json
import logging
import math
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest
import tensorflow as tf

from helpers.toy_run import SMALL, toy_pairs, toy_trainer
from helpers.train_command import run_train
from helpers.vocab_for_tests import tiny_vocab
from t2t_repro import run_lock
from t2t_repro.best_checkpoints import BestCheckpoints
from t2t_repro.checkpoints import (
    _set_aside,
    check_intact,
    checkpoint_manager,
    checkpoint_to_resume,
    latest_checkpoint,
    listed_checkpoints,
    load_model,
)
from t2t_repro.config import ConfigError, TrainingOptions
from t2t_repro.data.sources import Corpus
from t2t_repro.data.text_files import text_file_pairs
from t2t_repro.files import write_atomically
from t2t_repro.run_dir import RunDir
from t2t_repro.training import TrainingError
from t2t_repro.training.evaluator import DevEvaluator, perplexity_of
from t2t_repro.training.input_state import data_identity, record_start
from t2t_repro.training.prepare import prepare_run


@pytest.fixture
def run(toy_run_dir, tmp_path):
    """A copy of the trained toy run, free to damage."""
    copy = tmp_path / "run"
    shutil.copytree(toy_run_dir, copy)
    return copy


def _cut(path, keep):
    """Truncates `path` to `keep` of its bytes (a fraction)."""
    with open(path, "r+b") as handle:
        handle.truncate(int(os.path.getsize(path) * keep))


def _scores(best):
    return json.dumps(
        {
            "evaluations": [{"step": 200, "bleu": 1.0, "minutes": 0.1}],
            "best": best,
            "stopped_early_at": None,
        }
    )


# Damaged run files -----------------------------------------------------


def _read_config(run):
    RunDir(str(run)).load_config()


def _read_training_options(run):
    RunDir(str(run)).load_training_options()


def _read_scores(run):
    BestCheckpoints(str(run))


def _read_vocabulary(run):
    RunDir(str(run)).load_vocabulary()


@pytest.mark.parametrize("keep", [0, 0.5], ids=["empty", "half"])
@pytest.mark.parametrize(
    "name, read",
    [
        ("config.json", _read_config),
        ("training.json", _read_training_options),
        ("best/scores.json", _read_scores),
        ("spm.model", _read_vocabulary),
    ],
)
def test_a_truncated_run_file_is_named_as_corrupt(run, name, read, keep):
    (run / "best").mkdir(exist_ok=True)
    (run / "best/scores.json").write_text(_scores([]))
    _cut(run / name, keep)
    with pytest.raises(
        ConfigError,
        match=(
            rf"^{run}/{name}: corrupt \((empty file|not JSON: .*|not a "
            r"SentencePiece model)\)$"
        ),
    ):
        read(run)


def test_an_unknown_key_in_config_json_is_named(run):
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**config, "d_modle": 32}))
    with pytest.raises(
        ConfigError,
        match=(
            rf"^{run}/config.json: unknown key 'd_modle' \(not a "
            r"TransformerConfig field"
        ),
    ):
        RunDir(str(run)).load_config()


@pytest.mark.parametrize("outside", ["../victim", "{run}/victim"])
def test_scores_json_naming_a_file_outside_best_deletes_nothing(run, outside):
    outside = outside.format(run=run)
    (run / "victim.index").write_text("not a checkpoint of best/")
    (run / "best").mkdir()
    (run / "best/scores.json").write_text(
        _scores([{"step": 250, "bleu": 9.0, "path": outside}])
    )
    with pytest.raises(
        ConfigError,
        match=(
            rf"^{run}/best/scores.json: names checkpoint '{outside}', outside "
            rf"{run}/best$"
        ),
    ):
        # Resumed at step 200, forgets (deletes) what came after it.
        BestCheckpoints(str(run), keep=1).forget_after(200)
    assert (run / "victim.index").exists()


def test_a_corrupt_checkpoint_list_is_an_error_not_a_new_run(run):
    (run / "checkpoint").write_text("")
    with pytest.raises(
        ConfigError,
        match=(rf"^{run}/checkpoint: corrupt \(not a list of checkpoints\)$"),
    ):
        checkpoint_to_resume(str(run), is_chief=True)


# Corrupt checkpoints ---------------------------------------------------


@pytest.mark.parametrize("suffix", [".index", ".data-00000-of-00001"])
def test_the_tools_refuse_a_corrupt_checkpoint_naming_the_intact_one(run, suffix):
    newest, previous = listed_checkpoints(str(run))[-1:-3:-1]
    _cut(newest + suffix, 0.5)
    with pytest.raises(
        ConfigError,
        match=(
            rf"^{newest}: corrupt checkpoint \(.+\); the newest intact one "
            rf"is {previous} \(--checkpoint={previous}\)$"
        ),
    ):
        load_model(str(run))
    # Read-only: nothing moved.
    assert os.path.exists(newest + suffix)
    assert load_model(str(run), previous)[2] == previous


def test_a_checkpoint_rotated_out_after_it_was_picked_is_not_called_corrupt(
    run, tmp_path
):
    """t2t-average or t2t-export beside a run still training: the run's
    checkpoint manager can delete the oldest checkpoint a tool picked."""
    listed = listed_checkpoints(str(run))
    oldest, newest = listed[0], listed[-1]
    _set_aside(str(run), [oldest], str(tmp_path / "away"))  # as a rotation
    with pytest.raises(
        ConfigError,
        match=(
            rf"^{oldest}: deleted since it was picked \(.+\); the newest "
            rf"intact one is {newest} "
        ),
    ):
        check_intact(str(run), oldest)
    # A checkpoint of best/ is not one the run's rotation deletes.
    with pytest.raises(ConfigError, match="corrupt checkpoint"):
        check_intact(str(run), str(run / "best" / "ckpt-1"))


def test_a_model_loads_from_a_checkpoint_damaged_outside_its_weights(run):
    """The tools read a run's weights alone: damaged Adam moments in the
    newest checkpoint do not stop them; a damaged weight does."""
    newest = listed_checkpoints(str(run))[-1]
    reader = tf.train.load_checkpoint(newest)
    shapes = reader.get_variable_to_shape_map()
    data_path = newest + ".data-00000-of-00001"
    with open(data_path, "rb") as handle:
        intact = handle.read()

    def damage(prefix):
        """Flips a byte of the biggest tensor under `prefix`."""
        key = max(
            (k for k in shapes if k.startswith(prefix)),
            key=lambda k: math.prod(shapes[k]),
        )
        stored = reader.get_tensor(key).tobytes()
        at = intact.find(stored)
        assert at >= 0, key
        with open(data_path, "wb") as handle:
            handle.write(intact[:at] + bytes([intact[at] ^ 0xFF]) + intact[at + 1 :])

    damage("optimizer/_variables/")  # an Adam moment
    assert load_model(str(run))[2] == newest
    damage("model/")
    with pytest.raises(ConfigError, match=rf"^{newest}: corrupt checkpoint \("):
        load_model(str(run))


def _tiny_run(directory, steps):
    """A run directory with checkpoints of one small variable at `steps`."""
    checkpoint = tf.train.Checkpoint(v=tf.Variable(tf.range(1000.0)))
    manager = checkpoint_manager(checkpoint, str(directory), 5)
    for step in steps:
        manager.save(checkpoint_number=step)
    return [str(directory / f"ckpt-{step}") for step in steps]


def test_a_worker_falls_back_like_the_chief_but_moves_nothing(tmp_path):
    older, newest = _tiny_run(tmp_path, [1, 2])
    _cut(newest + ".index", 0.5)
    assert checkpoint_to_resume(str(tmp_path), is_chief=False) == (older)
    assert os.path.exists(newest + ".index")
    assert listed_checkpoints(str(tmp_path)) == [older, newest]


def test_with_no_intact_checkpoint_the_run_refuses_to_start_over(tmp_path):
    (only,) = _tiny_run(tmp_path, [1])
    _cut(only + ".data-00000-of-00001", 0)
    with pytest.raises(
        ConfigError,
        match=(
            rf"^{only}: corrupt checkpoint \(.+\), and no older checkpoint is "
            "intact: nothing to resume from$"
        ),
    ):
        checkpoint_to_resume(str(tmp_path), is_chief=True)
    assert os.path.exists(only + ".data-00000-of-00001")


# Data identity -----------------------------------------------------------


def _write_pairs(directory):
    """The toy pairs as aligned text files; their Corpus."""
    sources, targets = zip(*toy_pairs().as_numpy_iterator())
    corpus = Corpus(
        source_path=str(directory / "train.de"), target_path=str(directory / "train.en")
    )
    for path, lines in ((corpus.source_path, sources), (corpus.target_path, targets)):
        with open(path, "wb") as handle:
            handle.writelines(line + b"\n" for line in lines)
    return corpus


def _file_trainer(model_dir, corpus, steps, **overrides):
    options = TrainingOptions(
        **{
            "model_dir": str(model_dir),
            "train_steps": steps,
            "batch_tokens": 128,
            "warmup_steps": 5,
            "checkpoint_every": 1,
            "shuffle_buffer": 64,
            "seed": 3,
            "mixed_precision": "fp32",
            **overrides,
        }
    )
    return prepare_run(
        SMALL,
        options,
        tf.distribute.MirroredStrategy(),
        tiny_vocab(),
        text_file_pairs(corpus.source_path, corpus.target_path),
        data_sources={"train": corpus, "dev": None},
    )


def test_resuming_on_a_changed_training_file_is_refused_unless_allowed(
    tmp_path, caplog
):
    corpus = _write_pairs(tmp_path)
    _file_trainer(tmp_path / "run", corpus, 2).train()
    recorded = json.loads((tmp_path / "run/training.json").read_text())
    assert recorded["data"] == data_identity({"train": corpus})
    with open(corpus.source_path, "a") as handle:
        handle.write("ein hund läuft\n")

    with pytest.raises(
        ConfigError,
        match=(
            rf"^{corpus.source_path} changed since the run started \(sha256 "
            r"\w{12} -> \w{12}, size \d+ -> \d+\): resuming would "
            "misalign the data; pass --allow_option_changes to resume "
            "anyway$"
        ),
    ):
        _file_trainer(tmp_path / "run", corpus, 3)

    with caplog.at_level(logging.WARNING, logger="absl"):
        resumed = _file_trainer(tmp_path / "run", corpus, 3, allow_option_changes=True)
    assert f"{corpus.source_path} changed since the run started" in (caplog.text)
    assert resumed.step == 2
    # Recorded anew: the next resume compares with the changed file.
    recorded = json.loads((tmp_path / "run/training.json").read_text())
    assert recorded["data"] == data_identity({"train": corpus})


def test_a_moved_file_of_the_same_content_is_the_same_data(tmp_path):
    corpus = _write_pairs(tmp_path)
    run_dir = RunDir(str(tmp_path / "run"))
    options = TrainingOptions(model_dir=run_dir.path)
    record_start(
        run_dir,
        options,
        tf.distribute.InputContext(),
        data=data_identity({"train": corpus}),
    )
    moved = Corpus(
        source_path=shutil.move(corpus.source_path, f"{tmp_path}/moved.de"),
        target_path=corpus.target_path,
    )
    assert (
        record_start(
            run_dir,
            options,
            tf.distribute.InputContext(),
            data=data_identity({"train": moved}),
        )
        == []
    )


def test_tfds_data_is_identified_by_builder_split_version_and_direction(
    tmp_path, monkeypatch
):
    import tensorflow_datasets as tfds

    def corpus(source_lang="en", target_lang="de"):
        return Corpus(
            tfds_name="wmt14_translate/de-en",
            tfds_split="train",
            source_lang=source_lang,
            target_lang=target_lang,
        )

    def start(run_dir, identity):
        options = TrainingOptions(model_dir=run_dir.path)
        return record_start(
            run_dir, options, tf.distribute.InputContext(), data=identity
        )

    run_dir = RunDir(str(tmp_path / "run"))
    for version in ("1.0.0", "1.1.0"):
        monkeypatch.setattr(
            tfds,
            "builder",
            lambda name, data_dir: type("Builder", (), {"version": version}),
        )
        identity = data_identity({"train": corpus()})
        assert identity == {
            "train": [
                {
                    "tfds": "wmt14_translate/de-en",
                    "split": "train",
                    "version": version,
                    "direction": "en-de",
                }
            ]
        }
        if version == "1.0.0":
            start(run_dir, identity)
    with pytest.raises(
        ConfigError,
        match=(
            r"^TFDS wmt14_translate/de-en split train changed since the run "
            r"started \(version 1.0.0 -> 1.1.0\): resuming would misalign"
        ),
    ):
        start(run_dir, identity)
    # The same split read the other way round is other data.
    with pytest.raises(ConfigError, match=r"\(direction en-de -> de-en, version"):
        start(run_dir, data_identity({"train": corpus("de", "en")}))
    # A run recorded before identities named the direction resumes.
    recorded = {"train": [{k: v for k, v in identity["train"][0].items()}]}
    del recorded["train"][0]["direction"]
    earlier = RunDir(str(tmp_path / "earlier"))
    start(earlier, recorded)
    assert start(earlier, identity) == []


# Slow: three processes of t2t-train (about a minute on a loaded machine).
@pytest.mark.slow
def test_t2t_train_refuses_to_resume_on_a_changed_training_file(tmp_path):
    corpus = _write_pairs(tmp_path)

    def train(*flags):
        return run_train(
            f"--model_dir={tmp_path}/run",
            f"--train_src={corpus.source_path}",
            f"--train_tgt={corpus.target_path}",
            "--train_steps=2",
            "--mixed_precision=fp32",
            "--vocab_size=64",
            *flags,
        )

    first = train()
    assert first.returncode == 0, first.stderr[-3000:]
    # A pair, as t2t-train checks that the files stay aligned.
    for path, line in (
        (corpus.source_path, "ein hund läuft\n"),
        (corpus.target_path, "a dog runs\n"),
    ):
        with open(path, "a") as handle:
            handle.write(line)
    refused = train("--train_steps=3")
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert (
        refused.stderr.strip()
        .splitlines()[-1]
        .startswith(
            f"t2t-train: error: {corpus.source_path} changed since the run "
            "started (sha256 "
        )
    )
    allowed = train("--train_steps=3", "--allow_option_changes")
    assert allowed.returncode == 0, allowed.stderr[-3000:]
    assert "resumed from" in allowed.stderr


# A worker waiting for the chief's vocabulary ---------------------------


def _lock(run_dir, pid, host=None):
    with open(run_dir.file(run_lock.LOCK_FILENAME), "w") as handle:
        json.dump({"pid": pid, "host": host or socket.gethostname()}, handle)


def _wait(run_dir, chief_start_seconds=600):
    return run_dir.existing_or_new_vocabulary(
        None, is_chief=False, chief_start_seconds=chief_start_seconds, poll_seconds=0.02
    )


def _later(seconds, action):
    threading.Timer(seconds, action).start()


# A broken wait would hang: these fail after a minute instead.
@pytest.mark.timeout(60)
def test_a_worker_waits_while_the_chief_holds_its_lock(tmp_path):
    run_dir = RunDir(str(tmp_path))
    _lock(run_dir, os.getppid())  # a live process, not this one
    # Longer than a chief that had not locked the run would be given.
    _later(0.5, lambda: write_atomically(run_dir.vocab_path, tiny_vocab()))
    assert _wait(run_dir, chief_start_seconds=0.1) == tiny_vocab()


@pytest.mark.timeout(60)
def test_a_worker_gives_up_once_the_chiefs_lock_is_gone(tmp_path):
    run_dir = RunDir(str(tmp_path))
    _lock(run_dir, os.getppid())  # a live process, not this one
    _later(0.3, lambda: os.remove(run_dir.file(run_lock.LOCK_FILENAME)))
    with pytest.raises(
        ConfigError,
        match=(
            rf"^{run_dir.vocab_path}: the chief let go of .*train.lock "
            "without writing the vocabulary"
        ),
    ):
        _wait(run_dir)


@pytest.mark.timeout(60)
def test_a_dead_chiefs_lock_is_not_held(tmp_path):
    run_dir = RunDir(str(tmp_path))
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()
    _lock(run_dir, dead.pid)
    with pytest.raises(ConfigError, match="no chief holds"):
        _wait(run_dir, chief_start_seconds=0.1)


@pytest.mark.timeout(60)
def test_a_lock_from_another_host_is_held_while_it_is_kept_fresh(tmp_path, monkeypatch):
    monkeypatch.setattr(run_lock, "LOCK_FRESH_SECONDS", 0.5)
    run_dir = RunDir(str(tmp_path))
    lock = run_dir.file(run_lock.LOCK_FILENAME)
    _lock(run_dir, 1, host="another-host")
    refreshing = threading.Event()
    refreshing.set()

    def refresh():
        while refreshing.is_set():
            os.utime(lock)
            time.sleep(0.05)

    threading.Thread(target=refresh, daemon=True).start()
    _later(1.5, refreshing.clear)
    started = time.monotonic()
    with pytest.raises(ConfigError, match="the chief let go of"):
        _wait(run_dir, chief_start_seconds=0.1)
    # Waited while the lock was refreshed (and gave up once it was not).
    assert time.monotonic() - started > 1.5


@pytest.mark.timeout(60)
def test_the_chief_keeps_its_lock_fresh(tmp_path, monkeypatch):
    monkeypatch.setattr(run_lock, "LOCK_REFRESH_SECONDS", 0.05)
    run_dir = RunDir(str(tmp_path))
    with run_lock.training_lock(run_dir.path):
        lock = run_dir.file(run_lock.LOCK_FILENAME)
        os.utime(lock, (0, 0))
        while os.path.getmtime(lock) == 0:
            time.sleep(0.05)


@pytest.mark.timeout(60)
def test_without_a_chief_a_worker_gives_up_after_chief_start_seconds(tmp_path):
    run_dir = RunDir(str(tmp_path))
    with pytest.raises(
        ConfigError,
        match=(
            rf"^{run_dir.vocab_path}: not written after 0.2 s, and no chief "
            rf"holds {run_dir.path}/train.lock"
        ),
    ):
        _wait(run_dir, chief_start_seconds=0.2)


# Non-finite dev scores -------------------------------------------------


def test_perplexity_of_a_huge_loss_is_inf_not_an_overflow():
    assert perplexity_of(2.0) == pytest.approx(math.exp(2.0))
    assert perplexity_of(1000.0) == math.inf
    assert math.isnan(perplexity_of(math.nan))


def test_nan_or_huge_dev_scores_never_end_a_run(tmp_path, monkeypatch, caplog):
    # Scripted scores; decoding (most of an evaluation's time) is left out.
    monkeypatch.setattr(DevEvaluator, "loss", lambda self, model: (1000.0, 1000.0))
    monkeypatch.setattr(
        DevEvaluator,
        "bleu",
        lambda self, hypotheses, references: (math.nan, "scripted"),
    )
    monkeypatch.setattr(
        DevEvaluator, "translations", lambda self, model: (["a"], ["a"], ["a"])
    )
    monkeypatch.setattr(
        DevEvaluator, "_write_attention_images", lambda self, model, sentence: None
    )
    trainer = toy_trainer(
        tmp_path, 1, dev_pairs=toy_pairs().take(1), eval_every=1, keep_best=1
    )
    with caplog.at_level(logging.INFO, logger="absl"):
        assert trainer.train() == 1
    assert "step 1 dev loss 1000.0000 perplexity inf greedy sacreBLEU nan" in (
        caplog.text
    )
    [evaluation] = trainer.best.evaluations
    assert math.isnan(evaluation["bleu"])


def test_a_nan_bleu_ranks_below_every_real_one(tmp_path):
    best = BestCheckpoints(
        str(tmp_path), keep=1, checkpoint=(tf.train.Checkpoint(v=tf.Variable(1.0)))
    )
    best.record(1, math.nan, 0.1)
    best.record(2, 5.0, 0.2)
    assert [e["step"] for e in best.best] == [2]
    assert best.evaluations_since_best() == 0


# A full disk -----------------------------------------------------------


def test_a_full_disk_while_saving_names_the_last_complete_checkpoint(
    tmp_path, monkeypatch
):
    """The save fails as TensorFlow's does on a full disk (a tmpfs of
    40 MB, by hand: ResourceExhaustedError naming the temporary shard,
    with ckpt-N_temp/ left behind): one TrainingError naming the last
    complete checkpoint, and nothing of the unfinished one left."""
    toy_trainer(tmp_path, 10).train()
    resumed = toy_trainer(tmp_path, 12, checkpoint_every=1)

    def full_disk(checkpoint_number):
        shard = tmp_path / f"ckpt-{checkpoint_number}_temp"
        shard.mkdir()
        (shard / "part-00000-of-00001.data-00000-of-00001.tempstate1").write_bytes(
            b"half"
        )
        (tmp_path / f"ckpt-{checkpoint_number}.index").write_bytes(b"half")
        raise tf.errors.ResourceExhaustedError(
            None,
            None,
            "{{function_node __wrapped__SaveV2_dtypes_5_device_"
            f"/job:localhost/replica:0/task:0/device:CPU:0}}}} {shard}/"
            "part-00000-of-00001.data-00000-of-00001.tempstate1; No space "
            "left on device [Op:SaveV2]",
        )

    monkeypatch.setattr(resumed.manager, "save", full_disk)
    with pytest.raises(TrainingError) as raised:
        resumed.train()
    assert str(raised.value) == (
        f"{tmp_path}: saving step 11 failed ({tmp_path}/ckpt-11_temp/"
        "part-00000-of-00001.data-00000-of-00001.tempstate1; No space left "
        f"on device); the last complete checkpoint is {tmp_path}/ckpt-10, "
        "which a rerun resumes from"
    )
    assert not [name for name in os.listdir(tmp_path) if name.startswith("ckpt-11")]
    assert latest_checkpoint(str(tmp_path)) == f"{tmp_path}/ckpt-10"
    _, _, loaded = load_model(str(tmp_path))
    assert loaded == f"{tmp_path}/ckpt-10"


def test_a_resume_on_other_workers_with_the_same_replicas_is_refused(tmp_path):
    """Each worker reads its shard of the data: 2 workers of 1 replica see
    other batches than 1 worker of 2 replicas."""
    run_dir = RunDir(str(tmp_path))
    options = TrainingOptions(model_dir=run_dir.path)
    one_worker = tf.distribute.InputContext(1, 0, num_replicas_in_sync=2)
    two_workers = tf.distribute.InputContext(2, 0, num_replicas_in_sync=2)
    record_start(run_dir, options, one_worker)
    with pytest.raises(
        ConfigError, match=r"changed \(old, new\): \{'input_pipelines': \(1, 2\)\}"
    ):
        record_start(run_dir, options, two_workers)
    assert record_start(run_dir, options, two_workers, allow_changes=True) == [
        "input_pipelines"
    ]


def test_a_worker_starts_from_the_chiefs_dev_history_and_writes_nothing(run):
    """Early stopping must stop every task at one step: each starts from
    the chief's record and adds its own evaluations in memory only."""
    (run / "best").mkdir(exist_ok=True)
    (run / "best/scores.json").write_text(
        _scores([{"step": 200, "bleu": 1.0, "path": "ckpt-200"}])
    )
    (run / "best/ckpt-200.index").write_bytes(b"kept")
    chief = BestCheckpoints(str(run), keep=2, checkpoint=None)
    before = {path: path.read_bytes() for path in run.rglob("*") if path.is_file()}
    worker = BestCheckpoints(str(run), keep=2, read_only=True)
    assert worker.evaluations == chief.evaluations and worker.evaluations
    last = chief.evaluations[-1]["step"]
    worker.forget_after(last - 1)  # a resume from an earlier checkpoint
    worker.record(last, 12.5, 1.0)
    worker.stop_early(last)
    assert worker.evaluations[-1] == {"step": last, "bleu": 12.5, "minutes": 1.0}
    assert worker.stopped_early_at == last and worker.keep == 0
    after = {path: path.read_bytes() for path in run.rglob("*") if path.is_file()}
    assert after == before
