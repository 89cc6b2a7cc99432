"""Distributed equivalence, exact resume, TensorBoard output, CLI errors."""

import itertools
import json
import os
import signal
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers.margins import teacher_forced_margins
from helpers.one_training_step import global_batch, one_step
from helpers.processes import (
    HELPERS,
    REPO,
    free_port,
    quiet_environment,
    run_python,
    signal_after_step,
)
from helpers.shared_data import multi30k
from helpers.toy_run import SMALL, toy_pairs
from helpers.toy_run import toy_trainer as _trainer
from helpers.vocab_for_tests import tiny_vocab
from t2t_repro.checkpoints import load_model
from t2t_repro.config import DecodingOptions, TrainingOptions, TransformerConfig
from t2t_repro.data import text_files
from t2t_repro.data.pipeline import bucket_boundaries
from t2t_repro.data.vocabulary import make_tokenizer
from t2t_repro.decoding.precision import in_precision
from t2t_repro.inference.translators import ModelTranslator
from t2t_repro.training.precision import POLICIES
from t2t_repro.training.prepare import prepare_run


def _one_step(tmp_path, name, cpu_devices):
    out = str(tmp_path / f"{name}.npz")
    result = run_python(
        [
            os.path.join(HELPERS, "one_training_step.py"),
            out,
            str(cpu_devices),
            str(tmp_path / name),
        ]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(np.load(out))


def _assert_same_step(single, mirrored, replicas):
    assert int(mirrored["replicas"]) == replicas
    np.testing.assert_allclose(mirrored["loss"], single["loss"], atol=1e-5)
    # Adam's first update is nearly scale-free; the global gradient norm
    # catches a loss normalised per replica or summed twice.
    np.testing.assert_allclose(mirrored["grad_norm"], single["grad_norm"], rtol=1e-5)
    # The key projection's bias has an exactly zero gradient (softmax is
    # shift-invariant per query): its Adam update is amplified round-off.
    weights = [
        k
        for k in single
        if k not in ("loss", "replicas", "grad_norm") and not k.endswith("/key/bias")
    ]
    assert len(weights) > 20
    for key in weights:
        np.testing.assert_allclose(mirrored[key], single[key], atol=1e-5, err_msg=key)


def test_two_mirrored_replicas_match_one_device(tmp_path):
    single = _one_step(tmp_path, "single", 1)
    mirrored = _one_step(tmp_path, "mirrored", 2)
    _assert_same_step(single, mirrored, replicas=2)


@pytest.mark.parametrize(
    "layout",
    [
        # The Kubernetes TFJob / Vertex AI layout; it once trained as two
        # unsynchronised one-process runs.
        ("chief", "worker"),
        pytest.param(("worker", "worker"), marks=pytest.mark.slow),
    ],
)
def test_two_worker_processes_match_one_device(tmp_path, layout):
    single = _one_step(tmp_path, "single", 1)
    addresses = [f"127.0.0.1:{free_port()}" for _ in layout]
    cluster = {}
    tasks = []
    for kind, address in zip(layout, addresses):
        tasks.append({"type": kind, "index": len(cluster.get(kind, []))})
        cluster.setdefault(kind, []).append(address)
    processes = []
    for index, task in enumerate(tasks):
        tf_config = json.dumps({"cluster": cluster, "task": task})
        out = str(tmp_path / f"task{index}.npz")
        processes.append(
            (
                out,
                subprocess.Popen(
                    [
                        sys.executable,
                        os.path.join(HELPERS, "one_training_step.py"),
                        out,
                        "1",
                        str(tmp_path / "multiworker"),
                    ],
                    env=quiet_environment(TF_CONFIG=tf_config),
                    stderr=subprocess.PIPE,
                    text=True,
                ),
            )
        )
    for out, process in processes:
        _, stderr = process.communicate(timeout=600)
        assert process.returncode == 0, stderr[-3000:]
        _assert_same_step(single, dict(np.load(out)), replicas=2)


def _two_workers(model_dir, steps, outputs):
    """Runs worker_training.py as both workers of a 2-worker cluster;
    returns each worker's saved step and weights."""
    workers = [f"127.0.0.1:{free_port()}" for _ in range(2)]
    processes = []
    for index in range(2):
        tf_config = json.dumps(
            {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        )
        out = str(outputs / f"{os.path.basename(model_dir)}_{steps}_{index}.npz")
        processes.append(
            (
                out,
                subprocess.Popen(
                    [
                        sys.executable,
                        os.path.join(HELPERS, "worker_training.py"),
                        str(model_dir),
                        str(steps),
                        out,
                    ],
                    env=quiet_environment(TF_CONFIG=tf_config),
                    stderr=subprocess.PIPE,
                    text=True,
                ),
            )
        )
    results = []
    for out, process in processes:
        _, stderr = process.communicate(timeout=600)
        assert process.returncode == 0, stderr[-3000:]
        results.append(dict(np.load(out)))
    return results


def _assert_same_weights(got, want):
    for key, value in want.items():
        if key not in ("step", "replayed"):
            np.testing.assert_allclose(got[key], value, atol=1e-5, err_msg=key)


@pytest.mark.slow
def test_two_workers_resume_from_the_chiefs_checkpoint(tmp_path):
    straight = _two_workers(tmp_path / "straight", 6, tmp_path)
    _two_workers(tmp_path / "resumed", 4, tmp_path)
    # Worker 1 keeps its input state beside the chief's checkpoints.
    assert (tmp_path / "resumed" / "input" / "worker-1" / "ckpt-4.index").exists()
    resumed = _two_workers(tmp_path / "resumed", 6, tmp_path)
    for worker in (0, 1):
        assert int(resumed[worker]["step"]) == 6
        # O(1): both workers' iterators came back from their checkpoints.
        assert int(resumed[worker]["replayed"]) == 0
        _assert_same_weights(resumed[worker], straight[0])


def _mirrored_training(model_dir, steps, out):
    result = run_python(
        [
            os.path.join(HELPERS, "worker_training.py"),
            str(model_dir),
            str(steps),
            str(out),
            "2",
        ]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(np.load(out))


@pytest.mark.slow  # 76 s; a single device's resume is in the default suite
def test_two_replicas_resume_from_the_saved_input_state(tmp_path):
    straight = _mirrored_training(tmp_path / "straight", 6, tmp_path / "straight.npz")
    _mirrored_training(tmp_path / "resumed", 4, tmp_path / "first.npz")
    resumed = _mirrored_training(tmp_path / "resumed", 6, tmp_path / "resumed.npz")
    assert int(resumed["step"]) == 6
    assert int(resumed["replayed"]) == 0  # O(1) in the step
    _assert_same_weights(resumed, straight)


def test_resume_reproduces_an_uninterrupted_run(tmp_path):
    straight = _trainer(tmp_path / "straight", 20)
    straight.train()
    expected = [w.numpy() for w in straight.model.weights]

    first_half = _trainer(tmp_path / "resumed", 10)
    assert first_half.train() == 10
    del first_half
    resumed = _trainer(tmp_path / "resumed", 20)
    assert resumed.step == 10
    assert resumed.train() == 20
    for want, got in zip(expected, resumed.model.weights):
        np.testing.assert_allclose(got.numpy(), want, atol=1e-5)
    assert int(resumed.optimizer.iterations.numpy()) == 20


def test_accumulated_micro_batches_equal_one_big_batch(tmp_path):
    # Halves with different token counts (rows grow longer): the normaliser
    # must be the count over both micro-batches, not a mean of their means.
    (source, target_input), target = global_batch()
    halves = [
        ((source[rows], target_input[rows]), target[rows])
        for rows in (slice(0, 4), slice(4, None))
    ]
    strategy = tf.distribute.MirroredStrategy()
    whole = one_step(strategy, str(tmp_path / "whole"), [global_batch()])
    accumulated = one_step(strategy, str(tmp_path / "halves"), halves)
    _assert_same_step(whole, accumulated, replicas=1)


@pytest.mark.parametrize(
    "precision, jit_compile, rtol", [("fp32", True, 1e-5), ("bf16", False, 2e-2)]
)
def test_xla_and_bf16_steps_match_float32(tmp_path, precision, jit_compile, rtol):
    strategy = tf.distribute.MirroredStrategy()
    plain = one_step(strategy, str(tmp_path / "plain"), [global_batch()])
    other = one_step(
        strategy,
        str(tmp_path / "other"),
        [global_batch()],
        mixed_precision=precision,
        jit_compile=jit_compile,
    )
    np.testing.assert_allclose(other["loss"], plain["loss"], rtol=rtol)
    np.testing.assert_allclose(other["grad_norm"], plain["grad_norm"], rtol=rtol)
    # Adam's first update is +-lr per weight: bf16 may flip the sign of a
    # near-zero gradient, but almost every weight must move the same way.
    same = [
        np.abs(other[k] - plain[k]) <= 1e-5
        for k in plain
        if k not in ("loss", "replicas", "grad_norm") and not k.endswith("/key/bias")
    ]
    fraction = np.mean(np.concatenate([s.ravel() for s in same]))
    assert fraction > (0.999 if precision == "fp32" else 0.95), fraction


# fp16 is emulated on CPU (18 s): slow.
@pytest.mark.parametrize(
    "precision", ["bf16", pytest.param("fp16", marks=pytest.mark.slow)]
)
def test_mixed_precision_trains_and_counts_skipped_steps(tmp_path, precision):
    trainer = _trainer(tmp_path / precision, 12, mixed_precision=precision)
    assert (
        trainer.model.compute_dtype
        == {"bf16": "bfloat16", "fp16": "float16"}[precision]
    )
    assert trainer.train() == 12
    updates = int(trainer.optimizer.iterations.numpy())
    if precision == "fp16":
        # The loss scale halves on each skipped (overflowing) step and
        # cannot grow back within 12 steps.
        scale = float(trainer.optimizer.dynamic_scale.numpy())
        assert 0 < updates <= 12
        assert scale == 2.0**15 / 2 ** (12 - updates)
    else:
        assert updates == 12
    assert os.path.exists(tmp_path / precision / "ckpt-12.index")
    # Models built afterwards are float32 again.
    assert keras.mixed_precision.global_policy().name == "float32"
    resumed = _trainer(tmp_path / precision, 12, mixed_precision=precision)
    assert resumed.step == 12
    assert int(resumed.optimizer.iterations.numpy()) == updates


@pytest.mark.parametrize("precision", ["bf16", "fp16", "bf16 weights"])
def test_mixed_precision_decodes_as_float32_does(toy_run_dir, precision):
    # A run trained in 16 bits evaluates its dev BLEU with that model. On
    # the toy run, bf16's log-probabilities of the targets are float32's
    # to 0.005 nats (fp16's to 0.0005), and every token still wins by 3+
    # nats (2026-11-25). So: a margin of a nat in 16 bits too, then greedy
    # exactly as float32 (which the margin makes safe on any CPU), and beam
    # search on 90% of the sentences or more (all, when written). A
    # 16-bit-only bug (an embedding scale, a mask value or a cache that
    # rounds badly) costs the margin or many sentences.
    pairs = [(s.decode(), t.decode()) for s, t in toy_pairs().as_numpy_iterator()]
    sources, targets = (list(x) for x in zip(*pairs))
    model, proto, _ = load_model(toy_run_dir)
    tokenizer = make_tokenizer(proto)
    if precision == "bf16 weights":  # --precision=bf16 of the decoders
        low = in_precision(model, "bf16")
        assert {v.dtype for v in low.trainable_weights} == {"bfloat16"}
    else:  # a run trained in 16 bits
        keras.mixed_precision.set_global_policy(POLICIES[precision])
        try:
            low, _, _ = load_model(toy_run_dir)
        finally:
            keras.mixed_precision.set_global_policy("float32")
    assert (
        low.compute_dtype
        == {"bf16": "bfloat16", "fp16": "float16", "bf16 weights": "bfloat16"}[
            precision
        ]
    )
    margins = teacher_forced_margins(
        low,
        tokenizer.tokenize(sources).to_tensor(),
        tokenizer.tokenize(targets).to_tensor().numpy(),
    )
    assert margins.min() > 1.0, np.sort(margins)[:5]
    greedy = DecodingOptions(beam_size=1)
    assert ModelTranslator(model, tokenizer, greedy).translate(sources) == targets
    assert ModelTranslator(low, tokenizer, greedy).translate(sources) == targets
    beam = DecodingOptions(beam_size=4)
    full = ModelTranslator(model, tokenizer, beam).translate(sources)
    half = ModelTranslator(low, tokenizer, beam).translate(sources)
    same = np.mean([a == b for a, b in zip(full, half)])
    assert same >= 0.9, (same, [(a, b) for a, b in zip(full, half) if a != b][:5])


def _event_values(directory):
    """{tag: [summary value]} of every event file in `directory`."""
    values = {}
    for name in os.listdir(directory):
        for event in tf.compat.v1.train.summary_iterator(os.path.join(directory, name)):
            for value in event.summary.value:
                values.setdefault(value.tag, []).append(value)
    return values


def _event_tags(directory):
    return set(_event_values(directory))


def test_tensorboard_curves_and_dev_evaluation(tmp_path):
    trainer = _trainer(
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
    } <= _event_tags(str(tmp_path / "tb" / "train"))
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


def test_changed_model_flags_do_not_resume_silently(tmp_path):
    _trainer(tmp_path / "run", 1).train()
    other = TransformerConfig(**{**SMALL.__dict__, "d_model": 32})
    with pytest.raises(ValueError, match="different model config"):
        prepare_run(
            other,
            TrainingOptions(
                model_dir=str(tmp_path / "run"), train_steps=2, mixed_precision="fp32"
            ),
            tf.distribute.MirroredStrategy(),
            tiny_vocab(),
            toy_pairs(),
        )


def test_changed_data_order_options_do_not_resume_silently(tmp_path):
    _trainer(tmp_path / "run", 1).train()
    with pytest.raises(
        ValueError,
        match=r"changed \(old, new\): "
        r"\{'batch_tokens': \(128, 256\), 'seed': \(3, 4\)\}",
    ):
        _trainer(tmp_path / "run", 2, batch_tokens=256, seed=4)
    assert (
        _trainer(
            tmp_path / "run", 2, batch_tokens=256, seed=4, allow_option_changes=True
        ).train()
        == 2
    )
    assert (
        _trainer(tmp_path / "run", 2, batch_tokens=256, seed=4).step == 2
    )  # the new options are the run's now


def _train_cli(*flags, timeout=600):
    return run_python(
        ["-m", "t2t_repro.cli", "train", "--flagfile=flags/tiny.cfg", *flags],
        timeout=timeout,
    )


def test_cli_rejects_bad_flags_clearly(tmp_path):
    result = _train_cli(
        f"--model_dir={tmp_path}/a",
        "--d_model=30",
        "--num_heads=4",
        f"--train_src={multi30k('val', 'en')}",
        f"--train_tgt={multi30k('val', 'de')}",
    )
    assert result.returncode != 0
    assert "d_model=30 is not divisible by num_heads=4" in result.stderr
    result = _train_cli(
        f"--model_dir={tmp_path}/b", f"--train_src={multi30k('val', 'en')}"
    )
    assert result.returncode != 0
    assert "--train_src and --train_tgt go together" in result.stderr
    result = _train_cli(
        f"--model_dir={tmp_path}/c",
        f"--train_src={multi30k('val', 'en')}",
        f"--train_tgt={multi30k('train', 'de')}",
    )
    assert result.returncode != 0
    assert "parallel files must be line-aligned" in result.stderr


def test_data_that_yields_no_batch_is_an_error_not_a_hang(tmp_path):
    # Every pair longer than --max_length: the repeated, filtered input
    # used to wait forever for a first batch.
    result = _train_cli(
        f"--model_dir={tmp_path}/long",
        "--max_length=2",
        f"--train_src={multi30k('val', 'en')}",
        f"--train_tgt={multi30k('val', 'de')}",
        timeout=120,
    )
    assert result.returncode != 0
    assert f"{multi30k('val', 'en')}: no pair fits --max_length=2" in result.stderr
    assert "Traceback" not in result.stderr
    blank = tmp_path / "blank.en"
    blank.write_text(" \n\t\n  \n", "utf-8")
    (tmp_path / "words.de").write_text("ein\nzwei\ndrei\n", "utf-8")
    result = _train_cli(
        f"--model_dir={tmp_path}/blank",
        f"--train_src={blank}",
        f"--train_tgt={tmp_path}/words.de",
        timeout=120,
    )
    assert result.returncode != 0
    assert "every one of the 3 lines has an empty" in result.stderr
    assert "Traceback" not in result.stderr


def test_sigterm_checkpoints_and_the_same_command_resumes(tmp_path):
    for lang in ("en", "de"):
        (tmp_path / f"test.{lang}").write_text(
            "".join(
                line + "\n"
                for line in text_files.read_lines(multi30k("test_2016_flickr", lang))[
                    :10
                ]
            ),
            "utf-8",
        )
    flags = [
        f"--model_dir={tmp_path}/run",
        "--train_steps=400",
        "--checkpoint_every=1000",
        "--log_every=1",
        f"--train_src={multi30k('val', 'en')}",
        f"--train_tgt={multi30k('val', 'de')}",
        f"--test_src={tmp_path}/test.en",
        f"--test_tgt={tmp_path}/test.de",
    ]
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "t2t_repro.cli",
            "train",
            "--flagfile=flags/tiny.cfg",
            *flags,
        ],
        cwd=REPO,
        env=quiet_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    output, rest = signal_after_step(process, signal.SIGTERM)
    # Saved, told the scheduler it did not finish, and did not go on to
    # translate the test set.
    assert process.returncode == 128 + signal.SIGTERM, rest[-2000:]
    assert "the same command resumes" in rest and "sacreBLEU" not in output
    checkpoint = tf.train.latest_checkpoint(str(tmp_path / "run"))
    stopped_at = int(checkpoint.rsplit("-", 1)[1])
    assert 5 <= stopped_at < 400
    result = _train_cli(*[f.replace("400", str(stopped_at + 3)) for f in flags])
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"resumed from {checkpoint} at step {stopped_at}" in result.stderr
    assert tf.train.latest_checkpoint(str(tmp_path / "run")).endswith(
        f"ckpt-{stopped_at + 3}"
    )
    assert "sacreBLEU" in result.stdout  # finished: the test set is scored


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


def test_a_fresh_model_restores_every_trained_weight(tmp_path):
    # Keras 3 hides list-held sublayers from tf.train.Checkpoint: a model
    # checkpoint that saved the embedding alone once passed every resume
    # test, because the optimizer also tracks the variables.
    trainer = _trainer(tmp_path / "run", 5)
    trainer.train()
    restored, proto, checkpoint = load_model(str(tmp_path / "run"))
    assert checkpoint.endswith("ckpt-5") and proto == tiny_vocab()
    assert len(restored.weights) == len(trainer.model.weights) > 20
    for want, got in zip(trainer.model.weights, restored.weights):
        np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=want.path)


def test_auto_precision_follows_the_measured_bf16_speedup(monkeypatch, tmp_path):
    from t2t_repro.training import precision

    for forced in ("fp32", "bf16", "fp16"):
        assert precision.resolve_precision(forced) == forced
    for speedup, expected in [(2.0, "bf16"), (1.31, "bf16"), (1.1, "fp32")]:
        monkeypatch.setattr(
            precision, "bf16_matmul_speedup", lambda value=speedup: value
        )
        assert precision.resolve_precision("auto") == expected
    # A resumed run keeps the precision it started with, whichever way
    # today's measurement would choose.
    for started, speedup in [("bf16", 1.1), ("fp32", 2.0)]:
        run = str(tmp_path / started)
        _trainer(run, 1, mixed_precision=started).train()
        monkeypatch.setattr(
            precision, "bf16_matmul_speedup", lambda value=speedup: value
        )
        assert precision.resolve_precision("auto") != started
        assert precision.resolve_precision("auto", run) == started
    # The measurement itself: a positive ratio of two real timings.
    monkeypatch.undo()
    assert 0.1 < precision.bf16_matmul_speedup() < 20


@pytest.mark.parametrize(
    "speedups, expected",
    [
        ({"bfloat16": 2.0, "float16": 2.5}, "bf16"),  # Ampere and later
        ({"bfloat16": 0.0, "float16": 3.0}, "fp16"),  # no bf16 (Volta, T4)
        ({"bfloat16": 0.9, "float16": 1.1}, "fp32"),  # no fast 16-bit math
    ],
)
def test_auto_precision_measures_on_the_gpu(monkeypatch, speedups, expected):
    """No GPU here: the device list and the measurement are faked, and the
    test checks the rule and that the GPU, not the CPU, is measured."""
    from t2t_repro.training import precision

    real_devices = tf.config.list_physical_devices
    monkeypatch.setattr(
        tf.config,
        "list_physical_devices",
        lambda kind=None: (
            [tf.config.PhysicalDevice("/physical_device:GPU:0", "GPU")]
            if kind == "GPU"
            else real_devices(kind)
        ),
    )
    measured = []

    def fake_speedup(dtype, device):
        measured.append(device)
        return speedups[dtype]

    monkeypatch.setattr(precision, "matmul_speedup", fake_speedup)
    assert precision.resolve_precision("auto") == expected
    assert set(measured) == {"/GPU:0"}


def test_the_step_and_the_decoders_trace_a_bounded_number_of_times(tmp_path):
    # 40 steps over length-bucketed batches of several shapes, then
    # translations of 1 to 30-word inputs in batches of 1 to 4 sentences.
    trainer = _trainer(tmp_path, 40, config=SMALL, batch_tokens=200)
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
