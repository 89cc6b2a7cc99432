"""Each op of a decoding process gets its search's share of the cores."""

import json

import pytest

from helpers.processes import run_python
from t2t_repro.config import ConfigError, DecodingOptions
from t2t_repro.inference.exports import (
    DECODING_FILE,
    translate_decoding,
    write_export_decoding,
)
from t2t_repro.inference.threads import threads_per_search

_REPORT = """
import json, os
import tensorflow as tf
from t2t_repro.config import DecodingOptions
from t2t_repro.inference.threads import cores, use_decoding_threads
use_decoding_threads(
    DecodingOptions(parallel_searches={searches}, jit_compile={jit_compile})
)
tf.constant(1.0) + 1.0  # the runtime starts with the setting
print(json.dumps([cores(), tf.config.threading.get_intra_op_parallelism_threads()]))
"""


@pytest.mark.parametrize("searches", [1, 2, 3])
def test_each_search_gets_its_share_of_the_cores(searches):
    # (Empty: unset, for TensorFlow too; the test session sets it.)
    result = run_python(
        ["-c", _REPORT.format(searches=searches, jit_compile=False)],
        env={"TF_NUM_INTRAOP_THREADS": ""},
    )
    cores, threads = json.loads(result.stdout.splitlines()[-1])
    assert threads == max(1, cores // searches)


def test_tf_num_intraop_threads_wins():
    result = run_python(
        ["-c", _REPORT.format(searches=2, jit_compile=False)],
        env={"TF_NUM_INTRAOP_THREADS": "7"},
    )
    _, threads = json.loads(result.stdout.splitlines()[-1])
    # Not set by us: TensorFlow's own reading of the variable (0 here).
    assert threads == 0


def test_an_xla_decoder_keeps_tensorflows_default():
    result = run_python(
        ["-c", _REPORT.format(searches=2, jit_compile=True)],
        env={"TF_NUM_INTRAOP_THREADS": ""},
    )
    _, threads = json.loads(result.stdout.splitlines()[-1])
    assert threads == 0


@pytest.mark.slow
def test_the_decoding_tools_set_their_threads_before_tensorflow_starts(
    toy_run_dir, tmp_path
):
    # Set after TensorFlow's first op, the setting raises: the tools must
    # make it first, with the variable unset as a user runs them.
    source = tmp_path / "source.txt"
    source.write_text("a small dog\n")
    for tool in (
        ["translate", f"--input={source}"],
        [
            "eval",
            f"--test_src={source}",
            f"--test_tgt={source}",
            f"--output_dir={tmp_path}",
        ],
    ):
        result = run_python(
            ["-m", "t2t_repro.cli", *tool, f"--model_dir={toy_run_dir}"],
            env={"TF_NUM_INTRAOP_THREADS": ""},
        )
        assert result.returncode == 0, result.stderr


def _export(toy_run_dir, export_dir, *flags):
    """The version directory `t2t-export` writes for the toy run."""
    exported = run_python(
        [
            "-m",
            "t2t_repro.cli",
            "export",
            f"--model_dir={toy_run_dir}",
            f"--export_dir={export_dir}",
            "--warmup_requests=0",
            *flags,
        ]
    )
    assert exported.returncode == 0, exported.stderr
    (version,) = export_dir.iterdir()
    return version


def _translate(source, *flags):
    """t2t-translate of `source`, its debug log on stderr, with
    TF_NUM_INTRAOP_THREADS unset as a user runs it."""
    return run_python(
        [
            "-m",
            "t2t_repro.cli",
            "translate",
            f"--input={source}",
            "--verbosity=1",
            *flags,
        ],
        env={"TF_NUM_INTRAOP_THREADS": ""},
    )


@pytest.mark.slow
def test_t2t_translate_keeps_the_default_threads_only_where_xla_runs(
    toy_run_dir, tmp_path
):
    # XLA decodes a run's best translations only: an n-best list, or an
    # export's `translate` signature, runs the graph's decoder, which is
    # limited to its share of the cores whatever --decode_jit_compile says.
    version = _export(toy_run_dir, tmp_path / "export")
    source = tmp_path / "source.txt"
    source.write_text("a small dog\n")
    limited = f"decoding threads per op: {threads_per_search(2)} "
    for flags, expected in (
        ([f"--model_dir={toy_run_dir}"], "TensorFlow's default (XLA)"),
        ([f"--model_dir={toy_run_dir}", "--n_best=2"], limited),
        ([f"--saved_model={version}"], limited),
    ):
        result = _translate(
            source, "--decode_jit_compile", "--decode_parallel_searches=2", *flags
        )
        assert result.returncode == 0, result.stderr
        assert expected in result.stderr, (flags, result.stderr[-2000:])


@pytest.mark.slow
def test_t2t_translate_sizes_its_threads_for_the_searches_an_export_runs(
    toy_run_dir, tmp_path
):
    # The export's graph holds its --decode_parallel_searches; t2t-translate
    # --saved_model gives each op that many searches' share of the cores.
    version = _export(
        toy_run_dir,
        tmp_path / "export",
        "--decode_parallel_searches=1",
        "--beam_size=3",
    )
    recorded = json.loads((version / "assets.extra" / "t2t_decoding.json").read_text())
    assert (recorded["parallel_searches"], recorded["beam_size"]) == (1, 3)
    source = tmp_path / "source.txt"
    source.write_text("a small dog\n")
    result = _translate(source, f"--saved_model={version}")
    assert result.returncode == 0, result.stderr
    expected = f"decoding threads per op: {threads_per_search(1)} (1 searches"
    assert expected in result.stderr, result.stderr[-2000:]
    refused = _translate(
        source, f"--saved_model={version}", "--decode_parallel_searches=2"
    )
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1] == (
        f"t2t-translate: error: --decode_parallel_searches=2: {version} was "
        "exported with --decode_parallel_searches=1, which its graph holds"
    )


def test_an_exports_translate_signature_runs_its_own_searches_without_xla(tmp_path):
    exported = DecodingOptions(parallel_searches=3, extra_length=7, jit_compile=True)
    write_export_decoding(str(tmp_path), exported)
    mine = DecodingOptions(beam_size=2, jit_compile=True)
    decoding = translate_decoding(str(tmp_path), mine)
    assert decoding == DecodingOptions(beam_size=2, parallel_searches=3, extra_length=7)
    with pytest.raises(ConfigError) as refused:
        translate_decoding(str(tmp_path), mine, given=["extra_length"])
    assert str(refused.value) == (
        f"--extra_decode_length=50: {tmp_path} was exported with "
        "--extra_decode_length=7, which its graph holds"
    )


def test_an_export_that_records_nothing_decodes_as_asked(tmp_path):
    # An export written before assets.extra/t2t_decoding.json existed.
    mine = DecodingOptions(parallel_searches=3, jit_compile=True)
    decoding = translate_decoding(str(tmp_path), mine, given=["parallel_searches"])
    assert decoding == DecodingOptions(parallel_searches=3)


@pytest.mark.parametrize(
    "text, problem",
    [
        ("{", "not JSON"),
        ('{"extra_length": 50}', "parallel_searches None is not a count"),
        ('{"extra_length": 50, "parallel_searches": "2"}', "'2' is not a count"),
    ],
)
def test_a_corrupt_decoding_record_is_one_line(tmp_path, text, problem):
    path = tmp_path / DECODING_FILE
    path.parent.mkdir()
    path.write_text(text)
    with pytest.raises(ConfigError) as refused:
        translate_decoding(str(tmp_path))
    assert str(refused.value).startswith(f"{path}: corrupt (")
    assert problem in str(refused.value)
