"""t2t-translate on real workloads: streaming in chunks, resuming after a
crash, n-best lists and scores, UTF-8 output whatever the locale, and
progress on stderr."""

import io
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
from sentencepiece import sentencepiece_model_pb2

from helpers.processes import REPO, quiet_environment, run_python
from helpers.toy_run import toy_pairs
from t2t_repro.checkpoints import load_model
from t2t_repro.cli.streaming import (
    refuse_output_over_inputs,
    refuse_output_over_model,
    resume_point,
    skip_done,
)
from t2t_repro.cli.translate import output_line_check
from t2t_repro.config import EOS_ID, DecodingOptions
from t2t_repro.data import DataError
from t2t_repro.data.vocabulary import make_tokenizer, tokenize_sources
from t2t_repro.decoding.decoders import n_best_translations
from t2t_repro.inference.translators import ModelTranslator
from t2t_repro.progress import Progress
from t2t_repro.run_dir import RunDir

# The toy run's training sources, then inputs it never saw: an empty line,
# unknown characters, a sentence over its max_length.
SOURCES = [source.decode() for source, _ in toy_pairs().take(8).as_numpy_iterator()] + [
    "",
    "über das gras läuft ein hund — «schön» 犬",
    " ".join(["ein hund läuft"] * 20),
]


def _translate_cli(*flags):
    return run_python(["-m", "t2t_repro.cli", "translate", "--progress=false", *flags])


@pytest.fixture(scope="module")
def run_dir(toy_run_dir, tmp_path_factory):
    """The toy run with its vocabulary's piece "▁dog" spelt "▁dög": the
    same token ids, so its translations are the toy run's with "dög" for
    "dog", and every output path meets a non-ASCII character."""
    path = str(tmp_path_factory.mktemp("umlaut") / "run")
    shutil.copytree(toy_run_dir, path)
    vocabulary = sentencepiece_model_pb2.ModelProto.FromString(
        RunDir(path).load_vocabulary()
    )
    next(
        piece for piece in vocabulary.pieces if piece.piece == "\u2581dog"
    ).piece = "\u2581dög"
    with open(RunDir(path).vocab_path, "wb") as handle:
        handle.write(vocabulary.SerializeToString())
    return path


@pytest.fixture(scope="module")
def model_and_tokenizer(run_dir):
    model, proto, _ = load_model(run_dir)
    return model, make_tokenizer(proto)


@pytest.fixture(scope="module")
def reference(model_and_tokenizer):
    """(translations, scores) of SOURCES, all at once, in this process."""
    translations, scores = ModelTranslator(*model_and_tokenizer).translate_with_scores(
        SOURCES
    )
    assert "dög" in translations[0]
    return translations, scores


def _with_scores(lines):
    """(translations, scores) of --with_scores lines."""
    fields = [line.split(" ||| ") for line in lines]
    return ([text for _, text in fields], [float(score) for score, _ in fields])


@pytest.mark.slow
def test_killed_run_resumes_to_the_uninterrupted_output(run_dir, reference, tmp_path):
    sources = SOURCES * 10  # 110 lines, 55 chunks of 2
    expected = reference[0] * 10, reference[1] * 10
    source, output = tmp_path / "source.txt", tmp_path / "out.txt"
    source.write_text("".join(s + "\n" for s in sources), "utf-8")
    flags = [
        "-m",
        "t2t_repro.cli",
        "translate",
        f"--model_dir={run_dir}",
        f"--input={source}",
        f"--output={output}",
        "--buffer_size=2",
        "--with_scores",
        "--progress=false",
    ]
    process = subprocess.Popen(
        [sys.executable, *flags],
        cwd=REPO,
        env=quiet_environment(),
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 300
        while not (output.exists() and b"\n" in output.read_bytes()):
            assert process.poll() is None, process.stderr.read()[-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.005)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
        process.stderr.close()
    written = output.read_bytes()
    complete = written[: written.rindex(b"\n") + 1].decode().splitlines()
    assert 0 < len(complete) < len(sources)  # killed mid-run
    texts, scores = _with_scores(complete)
    assert texts == expected[0][: len(complete)]
    np.testing.assert_allclose(scores, expected[1][: len(complete)], atol=1e-5)
    # A mark that only a kept line can carry on, and what a crash in the
    # middle of a write leaves.
    output.write_bytes(
        "\n".join(["0 ||| KEPT", *complete[1:], "-0.1 ||| a half-writ"]).encode()
    )
    resumed = run_python(flags[:-1] + ["--resume"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"holds {len(complete)} inputs' output" in resumed.stderr
    # Not a terminal: a plain progress line at the end.
    assert re.search(
        rf"^translated {len(sources)}/{len(sources)} "
        r"sentences, [\d.]+/s$",
        resumed.stderr,
        re.MULTILINE,
    )
    texts, scores = _with_scores(output.read_text("utf-8").splitlines())
    assert texts == ["KEPT", *expected[0][1:]]
    np.testing.assert_allclose(scores[1:], expected[1][1:], atol=1e-5)


def test_resume_cuts_partial_lines_and_n_best_groups_and_skips_inputs(tmp_path):
    path = tmp_path / "out"
    assert resume_point(str(path), 2) == 0  # nothing written yet
    path.write_bytes(b"0 ||| a\n0 ||| b\n1 ||| c\n1 ||| d\n2 ||| e\n2 ||| f")
    assert resume_point(str(path), 2) == 2
    assert path.read_bytes() == b"0 ||| a\n0 ||| b\n1 ||| c\n1 ||| d\n"
    assert resume_point(str(path), 1) == 4
    assert path.read_bytes() == b"0 ||| a\n0 ||| b\n1 ||| c\n1 ||| d\n"
    inputs = iter(["a", "b", "c"])
    skip_done(inputs, 2, "out", "in")
    assert list(inputs) == ["c"]
    with pytest.raises(
        DataError,
        match="^out holds the output of 4 inputs but in has 3: not its output",
    ):
        skip_done(iter(["a", "b", "c"]), 4, "out", "in")


@pytest.mark.parametrize(
    "written, n_best, with_scores",
    [
        (b"ein hund\nzwei ||| x\n", 2, False),  # 1-best, resumed as n-best
        (b"0 ||| a ||| -1.000000\n0 ||| b ||| -2.000000\n", 1, False),
        (b"-1.000000 ||| a\n", 1, False),  # scored, resumed plain
        (b"a\n", 1, True),  # plain, resumed with scores
        (b"-3.250000\t4\t-0.812500\t-2.718543\n", 1, False),  # t2t-score's
        # n-best of 3 read as n-best of 2: the third line is input 1's.
        (b"0 ||| a ||| -1.0\n0 ||| b ||| -2.0\n0 ||| c ||| -3.0\n", 2, False),
    ],
)
def test_resume_refuses_output_of_other_flags_and_keeps_it(
    tmp_path, written, n_best, with_scores
):
    path = tmp_path / "out"
    path.write_bytes(written)
    with pytest.raises(DataError, match="out:[0-9]+: not a line this run would write"):
        resume_point(str(path), n_best, output_line_check(n_best, with_scores))
    assert path.read_bytes() == written


@pytest.mark.parametrize(
    "written, n_best, with_scores",
    [
        (b"ein hund\nzwei hunde\n", 1, False),
        (b"ein hund\n3 ||| x\n", 1, False),  # a translation may look scored
        (b"-1.0 |||\n", 1, True),  # an empty translation, its space lost
        (
            b"0 ||| a ||| -1.000000\n0 ||| b ||| -2.000000\n1 ||| c ||| -0.500000\n",
            2,
            False,
        ),
        (b"-1.000000 ||| a ||| b\n-12.250000 ||| c\n", 1, True),
    ],
)
def test_resume_goes_on_after_output_of_the_same_flags(
    tmp_path, written, n_best, with_scores
):
    path = tmp_path / "out"
    path.write_bytes(written)
    lines = written.count(b"\n")
    check = output_line_check(n_best, with_scores)
    assert resume_point(str(path), n_best, check) == lines // n_best


def test_an_output_that_is_an_input_by_any_path_is_refused(tmp_path, monkeypatch):
    (tmp_path / "in.en").write_text("ein hund\n")
    (tmp_path / "link.en").symlink_to(tmp_path / "in.en")
    monkeypatch.chdir(tmp_path)
    inputs = {"src": "other.en", "tgt": str(tmp_path / "in.en")}
    for output in ["in.en", "./link.en", str(tmp_path / "link.en")]:
        with pytest.raises(DataError, match=f"^{output}: --output is also --tgt,"):
            refuse_output_over_inputs(output, inputs)
    # A new file, stdout, or a device: nothing is destroyed.
    for output in ["new.de", "-", "/dev/null"]:
        refuse_output_over_inputs(output, {"input": "/dev/null"})
    assert (tmp_path / "in.en").read_text() == "ein hund\n"


def test_an_output_that_is_a_file_of_the_model_is_refused(tmp_path, monkeypatch):
    run, export = tmp_path / "run", tmp_path / "export"
    for name in [
        "config.json",
        "spm.model",
        "checkpoint",
        "ckpt-200.index",
        "best/ckpt-100.index",
        "best/scores.json",
        "average/averaged.json",
        "dev/events.out.tfevents.1",
        "eval_bf16/test.json",
        ".worker_1/ckpt-1.index",
        "notes.txt",
        "translations/test.de",
        "ckpt-200.de",
        "evaluation/test.de",
        "input/test.en",
    ]:
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text("kept\n")
    (export / "variables").mkdir(parents=True)
    (export / "variables" / "variables.index").write_text("kept\n")
    (tmp_path / "ct2").mkdir()
    (tmp_path / "ct2" / "model.bin").write_text("kept\n")
    (tmp_path / "run2").mkdir()
    (tmp_path / "run2" / "config.json").write_text("kept\n")
    (tmp_path / "export_test.de").write_text("kept\n")
    (tmp_path / "spm_link").symlink_to(run / "spm.model")
    # A run whose vocabulary links out of it (writing it writes the target).
    (tmp_path / "shared.model").write_text("kept\n")
    (tmp_path / "linked_run").mkdir()
    (tmp_path / "linked_run" / "spm.model").symlink_to(tmp_path / "shared.model")
    monkeypatch.chdir(tmp_path)
    models = {"model_dir": "run", "saved_model": None}
    for output in [
        "run/config.json",
        "run/spm.model",
        "./run/checkpoint",
        str(run / "ckpt-200.index"),
        "run/best/ckpt-100.index",
        "run/best/scores.json",
        "run/average/averaged.json",
        "run/dev/events.out.tfevents.1",
        "run/eval_bf16/test.json",
        "run/.worker_1/ckpt-1.index",
        "spm_link",
    ]:
        message = f"{output}: --output is one of the files of --model_dir=run,"
        with pytest.raises(DataError, match=f"^{re.escape(message)}"):
            refuse_output_over_model(output, models)
    with pytest.raises(DataError, match="files of --saved_model=export,"):
        refuse_output_over_model(
            "export/variables/variables.index", {"saved_model": "export"}
        )
    with pytest.raises(DataError, match="files of --model_dir=linked_run,"):
        refuse_output_over_model("linked_run/spm.model", {"model_dir": "linked_run"})
    with pytest.raises(DataError, match="files of --ctranslate2=ct2,"):
        refuse_output_over_model("ct2/model.bin", {"ctranslate2": "ct2"})
    # The run directory of an average, or a run's best/, is a run of its own.
    with pytest.raises(DataError, match="files of --model_dir=run/best,"):
        refuse_output_over_model("run/best/scores.json", {"model_dir": "run/best"})
    # The user's files in a run directory, new files, stdout, a device and
    # files outside the model are written.
    for output in [
        "run/notes.txt",
        "run/translations/test.de",
        "run/ckpt-200.de",
        "run/evaluation/test.de",
        "run/input/test.en",
        "run/ckpt-300.index",
        "-",
        "/dev/null",
        "export_test.de",
        "run2/config.json",
    ]:
        refuse_output_over_model(output, {"model_dir": "run", "saved_model": "export"})
    assert all(
        path.read_text() == "kept\n" for path in tmp_path.rglob("*") if path.is_file()
    )


def test_a_failed_write_names_the_output_and_how_to_go_on(toy_run_dir, tmp_path):
    """Every write to /dev/full fails as on a full disk (ENOSPC): one line
    naming --output, not an OSError without a file name."""
    (tmp_path / "in").write_text("ein hund\n")
    result = _translate_cli(
        f"--model_dir={toy_run_dir}", f"--input={tmp_path}/in", "--output=/dev/full"
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == (
        "t2t-translate: error: /dev/full: cannot be written (No space left on "
        "device) after the output of at least 0 inputs"
    )


def _n_best_ids(model_and_tokenizer, beam_size, alpha):
    """(ids `[sentence, beam, length]`, scores) of SOURCES, searched here."""
    model, tokenizer = model_and_tokenizer
    source, _ = tokenize_sources(
        tokenizer, tf.constant(SOURCES), model.config.max_length
    )
    ids, scores = tf.function(
        lambda source: n_best_translations(
            model, source, beam_size, alpha, DecodingOptions()
        )
    )(source)
    return ids.numpy(), scores.numpy()


def _up_to_eos(row):
    ends = np.flatnonzero(row == EOS_ID)
    return tuple(row[: ends[0] + 1] if ends.size else row)


# Python 3.11 writes UTF-8 under LC_ALL=C anyway (PEP 540's UTF-8 mode);
# an ascii PYTHONIOENCODING is what breaks a plain sys.stdout.write.
@pytest.mark.parametrize(
    "io_encoding", [pytest.param(None, marks=pytest.mark.slow), "ascii"]
)
def test_n_best_lists_on_stdout_are_distinct_hypotheses_best_first(
    run_dir, model_and_tokenizer, reference, io_encoding
):
    environment = quiet_environment(LC_ALL="C", LANG="C")
    environment.pop("PYTHONIOENCODING", None)
    if io_encoding:
        environment["PYTHONIOENCODING"] = io_encoding
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "t2t_repro.cli",
            "translate",
            f"--model_dir={run_dir}",
            "--n_best=3",
            "--beam_size=4",
            "--progress=false",
        ],
        input="".join(s + "\n" for s in SOURCES).encode(),
        cwd=REPO,
        env=environment,
        capture_output=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line.split(" ||| ") for line in result.stdout.decode("utf-8").splitlines()]
    assert [int(index) for index, _, _ in rows] == [
        i for i in range(len(SOURCES)) for _ in range(3)
    ]
    ids, scores = _n_best_ids(model_and_tokenizer, beam_size=4, alpha=0.6)
    tokenizer = model_and_tokenizer[1]
    for sentence, translation in enumerate(reference[0]):
        lines = rows[3 * sentence : 3 * sentence + 3]
        if not SOURCES[sentence]:
            # "" and 0, not the search's hypotheses (made up from EOS).
            assert [line[1:] for line in lines] == [["", "0.000000"]] * 3
            continue
        hypotheses = [_up_to_eos(row) for row in ids[sentence, :3]]
        assert len(set(hypotheses)) == 3, hypotheses
        texts = [
            tokenizer.detokenize(tf.constant([h]))[0].numpy().decode()
            for h in hypotheses
        ]
        assert [text for _, text, _ in lines] == texts
        printed = [float(score) for _, _, score in lines]
        np.testing.assert_allclose(printed, scores[sentence, :3], atol=1e-5)
        assert printed == sorted(printed, reverse=True)
        assert lines[0][1] == translation
        assert printed[0] == pytest.approx(reference[1][sentence], abs=1e-5)


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--model_dir=x", "--n_best=5", "--beam_size=4"],
            "flags n_best=5, "
            "beam_size=4: --n_best cannot exceed --beam_size: beam search keeps "
            "beam_size hypotheses",
        ),
        (
            ["--ctranslate2=x", "--n_best=2"],
            "--n_best is for --model_dir and "
            "--saved_model; --ctranslate2 translates 1-best",
        ),
        (
            ["--model_dir=x", "--resume"],
            "--resume continues an --output file; stdout cannot be resumed",
        ),
    ],
)
def test_impossible_flags_are_one_line(flags, message):
    result = _translate_cli(*flags)
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("t2t-translate: error: ") and message in line


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_shows_rate_and_eta_on_a_terminal_lines_elsewhere():
    terminal = _Terminal()
    progress = Progress(10, initial=2, stream=terminal)
    progress.update(3)
    progress.update(5)  # all done: closes
    # tqdm's bar, redrawn in place: done, elapsed<ETA, rate.
    bars = terminal.getvalue().split("\r")
    assert "2/10" in bars[1] and bars[-1].endswith("\n")
    assert re.search(
        r" 10/10 \[\d\d:\d\d<\d\d:\d\d, +[\d.]+ sentences/s\]", bars[-1]
    ), bars
    log = io.StringIO()
    progress = Progress(None, "scored", "pairs", interval=0.0, stream=log)
    progress.update(4)
    progress.close()
    lines = log.getvalue().splitlines()
    assert len(lines) == 2 and lines[1].startswith("scored 4 pairs, ")
    log = io.StringIO()
    progress = Progress(10, interval=0.0, stream=log)
    progress.update(4)
    assert log.getvalue().startswith("translated 4/10 sentences, ")
    assert ", ETA 0:" in log.getvalue()
    log = io.StringIO()
    progress = Progress(10, interval=3600.0, stream=log)
    progress.update(4)
    assert log.getvalue() == ""  # only every `interval` seconds
