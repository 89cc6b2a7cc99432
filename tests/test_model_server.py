"""The export as TF Serving's model server loads it: a C++ program built
against the installed wheel's libtensorflow_cc (tests/helpers/
model_server_loader.cc) registers tensorflow-text's ops, calls
tensorflow::LoadSavedModel with tag "serve", finds serving_default's
tensors in its SignatureDef and runs it, with XLA disabled unless enabled
the way the model server enables it."""

import numpy as np
import pytest

from helpers import model_server
from helpers.margins import translated_with_a_margin
from helpers.processes import run_python
from t2t_repro.checkpoints import load_model
from t2t_repro.config import DecodingOptions
from t2t_repro.data.vocabulary import make_tokenizer
from t2t_repro.serving import export_saved_model

SENTENCES = [
    "ein hund läuft das gras",
    "",
    "der mann eine katze",
    "über das gras läuft ein hund — «schön» 犬",
    # Long enough to be cut (max_length 32 pieces), within the
    # export's 4,096-byte limit per sentence.
    " ".join(["ein hund läuft"] * 100),
    "eine katze",
]


@pytest.fixture(scope="module")
def loader(tmp_path_factory):
    return model_server.build(tmp_path_factory.mktemp("model_server"))


@pytest.fixture(scope="module")
def t2t_translate_output(toy_run_dir, tmp_path_factory):
    source = tmp_path_factory.mktemp("source") / "source.txt"
    source.write_text("".join(s + "\n" for s in SENTENCES), "utf-8")
    result = run_python(
        [
            "-m",
            "t2t_repro.cli",
            "translate",
            "--progress=false",
            f"--model_dir={toy_run_dir}",
            f"--input={source}",
        ]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_the_model_server_path_translates_like_t2t_translate(
    loader, toy_run_dir, t2t_translate_output, tmp_path
):
    # The default export: no XLA anywhere in the graph, so the model
    # server's default (XLA disabled) runs it.
    path = export_saved_model(toy_run_dir, str(tmp_path))
    result = model_server.translate(loader, path, SENTENCES)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == t2t_translate_output
    assert "serving_default: inputs (" in result.stderr


@pytest.mark.slow
def test_an_xla_export_needs_the_servers_xla_flag(
    loader, toy_run_dir, t2t_translate_output, tmp_path
):
    path = export_saved_model(
        toy_run_dir, str(tmp_path), decoding=DecodingOptions(jit_compile=True)
    )
    enabled = model_server.translate(loader, path, SENTENCES, xla=True)
    assert enabled.returncode == 0, enabled.stderr[-3000:]
    # XLA rounds otherwise than t2t-translate's graph: a sentence
    # translated by a margin comes out the same, another may part at a
    # near-tie. The training source among them has a margin.
    model, proto, _ = load_model(toy_run_dir)
    robust = translated_with_a_margin(model, make_tokenizer(proto), SENTENCES)
    assert robust[SENTENCES.index("ein hund läuft das gras")], robust
    lines, expected = enabled.stdout.splitlines(), t2t_translate_output.splitlines()
    assert len(lines) == len(expected) == len(SENTENCES)
    for index in np.flatnonzero(robust):
        assert lines[index] == expected[index], index
    disabled = model_server.translate(loader, path, SENTENCES)
    assert disabled.returncode == 1
    assert "XLA compilation disabled" in disabled.stderr


@pytest.mark.slow
def test_the_model_server_runs_a_bf16_export_like_t2t_translate(
    loader, toy_run_dir, tmp_path
):
    path = export_saved_model(toy_run_dir, str(tmp_path), precision="bf16")
    source = tmp_path / "source.txt"
    source.write_text("".join(s + "\n" for s in SENTENCES), "utf-8")
    expected = run_python(
        [
            "-m",
            "t2t_repro.cli",
            "translate",
            "--progress=false",
            "--precision=bf16",
            f"--model_dir={toy_run_dir}",
            f"--input={source}",
        ]
    )
    assert expected.returncode == 0, expected.stderr[-3000:]
    result = model_server.translate(loader, path, SENTENCES)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == expected.stdout
