"""t2t-eval scoring, t2t-average, t2t-attention."""

import json
import os
import shutil

import numpy as np
import pytest
import sacrebleu
import tensorflow as tf

from helpers.processes import run_python
from helpers.toy_run import LEARNABLE_STEPS, SMALL, toy_pairs
from helpers.vocab_for_tests import tiny_vocab
from t2t_repro.averaging import average_checkpoints
from t2t_repro.checkpoints import checkpoint_manager, load_model, model_checkpoint
from t2t_repro.data.vocabulary import make_tokenizer
from t2t_repro.evaluation import paper_tokenized, split_compounds
from t2t_repro.model import Transformer
from t2t_repro.run_dir import RunDir
from t2t_repro.visualization import attention_maps, plot_attention, plot_attention_lines


def _cli(tool, *flags):
    return run_python(["-m", "t2t_repro.cli", tool, *flags])


def test_compound_splitting_like_get_ende_bleu():
    assert (
        split_compounds("ein Hand-made Stuhl , 2014-2015")
        == "ein Hand ##AT##-##AT## made Stuhl , 2014 ##AT##-##AT## 2015"
    )
    assert paper_tokenized(["Ein Hund, der läuft."], "de") == ["Ein Hund , der läuft ."]


def test_eval_cli_writes_hypotheses_scores_and_summaries(toy_run_dir, tmp_path):
    pairs = [
        (s.decode(), t.decode()) for s, t in toy_pairs().take(20).as_numpy_iterator()
    ]
    (tmp_path / "test.de").write_text("".join(s + "\n" for s, _ in pairs))
    (tmp_path / "test.en").write_text("".join(t + "\n" for _, t in pairs))
    result = _cli(
        "eval",
        "--flagfile=flags/tiny.cfg",
        f"--model_dir={toy_run_dir}",
        f"--test_src={tmp_path}/test.de",
        f"--test_tgt={tmp_path}/test.en",
        "--target_lang=en",
        f"--output_dir={tmp_path}/out",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    output = f"{tmp_path}/out/test.de.step{LEARNABLE_STEPS}"
    with open(output + ".json") as handle:
        scores = json.load(handle)
    with open(output + ".hyp") as handle:
        hypotheses = handle.read().splitlines()
    assert len(hypotheses) == 20
    expected = sacrebleu.corpus_bleu(hypotheses, [[t for _, t in pairs]])
    assert scores["sacrebleu"] == round(expected.score, 2)
    assert scores["sacrebleu"] > 20  # an untrained model scores about 0
    assert scores["sacrebleu_signature"].startswith("nrefs:1|case:mixed")
    assert 0 < scores["chrf"] <= 100 and 0 < scores["tokenized_bleu"] <= 100
    assert "NOT comparable to sacreBLEU" in result.stdout
    assert f"sacreBLEU {scores['sacrebleu']:.2f}" in result.stdout
    events = tf.io.gfile.glob(os.path.join(toy_run_dir, "eval", "events*"))
    tags = {
        value.tag
        for path in events
        for event in tf.compat.v1.train.summary_iterator(path)
        for value in event.summary.value
    }
    assert {"sacrebleu", "chrf", "tokenized_bleu"} <= tags


def test_average_of_known_weights_is_exact(tmp_path):
    run = tmp_path / "run"
    RunDir(str(run)).save_config(SMALL)
    RunDir(str(run)).save_vocabulary(tiny_vocab())
    model = Transformer(SMALL, name="transformer")
    manager = checkpoint_manager(model_checkpoint(model), str(run), 5)
    # The oldest is not among the last three and must not count.
    for step, value in [(10, 100.0), (20, 1.0), (30, 2.0), (40, 6.0)]:
        for variable in model.weights:
            if "float" in str(variable.dtype):
                variable.assign(np.full(variable.shape, value))
        manager.save(checkpoint_number=step)
    saved = average_checkpoints(str(run), str(tmp_path / "avg"), 3)
    assert saved.endswith("ckpt-40")
    averaged, _, _ = load_model(str(tmp_path / "avg"))
    floats = [w for w in averaged.weights if "float" in str(w.dtype)]
    assert len(floats) > 10
    for weight in floats:
        np.testing.assert_array_equal(weight.numpy(), 3.0)
    with pytest.raises(ValueError, match="holds 4 checkpoint"):
        average_checkpoints(str(run), str(tmp_path / "avg5"), 5)


def test_average_cli_output_is_a_usable_run(toy_run_dir, tmp_path):
    result = _cli(
        "average",
        f"--model_dir={toy_run_dir}",
        f"--output_dir={tmp_path}/avg",
        "--num_checkpoints=3",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    paths = tf.train.get_checkpoint_state(toy_run_dir).all_model_checkpoint_paths[-3:]
    runs = [load_model(toy_run_dir, p)[0] for p in paths]
    averaged, _, _ = load_model(str(tmp_path / "avg"))
    for index, weight in enumerate(averaged.trainable_weights):
        mean = np.mean(
            [m.trainable_weights[index].numpy().astype(np.float64) for m in runs],
            axis=0,
        ).astype(np.float32)
        np.testing.assert_allclose(weight.numpy(), mean, rtol=1e-7, atol=1e-9)


def test_attention_maps_are_the_models_and_plotted_as_is(toy_run_dir):
    model, proto, _ = load_model(toy_run_dir)
    tokenizer = make_tokenizer(proto)
    output = [10, 11, 12, 3]
    maps = attention_maps(model, tokenizer, "ein hund läuft", output)
    source = tokenizer.tokenize(["ein hund läuft"]).to_tensor()
    _, expected = model.encode(source, training=False, return_attention_scores=True)
    weights, queries, keys = maps["encoder_self"]
    np.testing.assert_allclose(weights[0], expected[0][0].numpy(), atol=1e-6)
    assert weights.shape[2:] == (len(queries), len(keys))
    assert maps["encoder_decoder"][0].shape[2:] == (4, source.shape[1])
    assert maps["decoder_self"][1][-1] == "</s>"
    for kind, (weights, _, _) in maps.items():
        np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5, err_msg=kind)
    cross, queries, keys = maps["encoder_decoder"]
    figure = plot_attention(cross, queries, keys, layers=[0], heads=[0, 1], title="t")
    np.testing.assert_array_equal(figure.axes[1].images[0].get_array(), cross[0, 1])
    # Connection plot: a line per (head, query, key), opacity = weight.
    figure = plot_attention_lines(
        cross, queries, keys, layer=0, heads=[0, 1], queries=[1, 2], title="t"
    )
    lines = figure.axes[0].lines
    assert len(lines) == 2 * 2 * len(keys)
    expected = [
        cross[0, head, query, key]
        for head in (0, 1)
        for query in (1, 2)
        for key in range(len(keys))
    ]
    np.testing.assert_allclose(
        [line.get_alpha() for line in lines], expected, rtol=1e-6
    )
    assert [line.get_ydata()[1] for line in lines[: len(keys)]] == list(
        range(len(keys))
    )
    assert len({line.get_color() for line in lines}) == 2


@pytest.mark.slow  # 29 s
def test_attention_cli_writes_pngs(toy_run_dir, tmp_path):
    result = _cli(
        "attention",
        f"--model_dir={toy_run_dir}",
        "--sentence=ein hund läuft das gras",
        "--heads=0,1",
        f"--output_prefix={tmp_path}/dog",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for kind in ("encoder_self", "decoder_self", "encoder_decoder"):
        png = (tmp_path / f"dog_{kind}.png").read_bytes()
        assert png.startswith(b"\x89PNG") and len(png) > 5000
    result = _cli(
        "attention",
        f"--model_dir={toy_run_dir}",
        "--sentence=ein hund läuft das gras",
        "--style=lines",
        "--layers=0",
        "--queries=0",
        f"--output_prefix={tmp_path}/l",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.glob("l_*")) == [
        f"l_{kind}_layer0.png"
        for kind in ("decoder_self", "encoder_decoder", "encoder_self")
    ]
    result = _cli(
        "attention", f"--model_dir={toy_run_dir}", "--sentence=x", "--heads=5"
    )
    assert result.returncode != 0
    assert "--heads=5: [5] out of range; the model has 2 heads" in result.stderr


def test_eval_results_replacing_those_of_other_settings_say_so(tmp_path, caplog):
    """t2t-eval names its results after the test set and the step: a beam
    size sweep into one --output_dir keeps the last, and says which it
    replaced."""
    from t2t_repro.cli.eval import write_results

    scores = {"checkpoint": "run/ckpt-9", "beam_size": 1, "alpha": 0.6, "bleu": 1.0}
    write_results(str(tmp_path), "test.step9", ["a"], scores)
    write_results(str(tmp_path), "test.step9", ["b"], scores)
    assert "replacing" not in caplog.text  # the same settings, again
    write_results(str(tmp_path), "test.step9", ["c"], {**scores, "beam_size": 4})
    assert (
        f"replacing {tmp_path}/test.step9.hyp and .json, the results of "
        "checkpoint run/ckpt-9, beam_size 1, alpha 0.6"
    ) in caplog.text
    assert (tmp_path / "test.step9.hyp").read_text() == "c\n"
    assert json.loads((tmp_path / "test.step9.json").read_text())["beam_size"] == 4
    assert sorted(os.listdir(tmp_path)) == ["test.step9.hyp", "test.step9.json"]
    # The same step of another run (an average of this one) is other weights.
    caplog.clear()
    later = {**scores, "beam_size": 4}
    write_results(str(tmp_path), "test.step9", ["d"], later)
    assert "replacing" not in caplog.text
    write_results(
        str(tmp_path),
        "test.step9",
        ["e"],
        {**later, "checkpoint": "run/average/ckpt-9"},
    )
    assert "the results of checkpoint run/ckpt-9, beam_size 4" in caplog.text
    # Another test set of the same file name.
    caplog.clear()
    sets = [{**later, "test_source": f"/data/{year}/test.de"} for year in (16, 17)]
    write_results(str(tmp_path), "test.step9", ["f"], sets[0])
    write_results(str(tmp_path), "test.step9", ["g"], sets[1])
    assert "test_source /data/16/test.de" in caplog.text


def _eval_one_pair(directory, model_dir, output_dir):
    """t2t-eval of `model_dir` on one pair written to DIRECTORY/test.*,
    its results to `output_dir`."""
    for lang, line in (("de", "ein hund"), ("en", "a dog")):
        (directory / f"test.{lang}").write_text(f"{line}\n", "utf-8")
    return run_python(
        [
            "-m",
            "t2t_repro.cli",
            "eval",
            f"--model_dir={model_dir}",
            f"--test_src={directory}/test.de",
            f"--test_tgt={directory}/test.en",
            f"--output_dir={output_dir}",
        ]
    )


@pytest.mark.slow
def test_eval_of_a_run_it_cannot_write_to_leaves_out_the_summaries(
    toy_run_dir, tmp_path
):
    """A file named eval in the run (where TensorBoard's summaries go)
    stands for a run this user cannot write to, root included."""
    run = tmp_path / "run"
    shutil.copytree(toy_run_dir, run)
    shutil.rmtree(run / "eval", ignore_errors=True)  # another test's t2t-eval
    (run / "eval").write_text("not a directory")
    result = _eval_one_pair(tmp_path, run, tmp_path / "out")
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"{run}/eval: cannot be written (" in result.stderr
    assert "no TensorBoard summaries of this evaluation" in result.stderr
    assert [p.suffix for p in sorted((tmp_path / "out").iterdir())] == [".hyp", ".json"]


def test_eval_refuses_an_unwritable_output_before_translating(toy_run_dir, tmp_path):
    """/proc takes no new file, whoever runs the test (root included)."""
    result = _eval_one_pair(tmp_path, toy_run_dir, "/proc")
    assert result.returncode == 2, result.stderr[-2000:]
    assert "translated" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("t2t-eval: error: /proc/")
