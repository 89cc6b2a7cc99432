"""The command-line tools as a user meets them: --help, start-up output,
errors, and flags generated from the settings in t2t_repro/config.py."""

import dataclasses
import json
import os
import re
import subprocess
import sys
import tomllib
from importlib import metadata

import pytest

from helpers.processes import REPO, quiet_environment
from t2t_repro.config import (
    DecodingOptions,
    TrainingOptions,
    TransformerConfig,
    flag_name,
)

TOOLS = {  # tool module: flags its --help must list
    "train": [
        "--train_steps",
        "--d_model",
        "--num_layers",
        "--train_src",
        "--model_dir",
        "--mixed_precision",
        "--keep_best",
        "--init_from",
        "--init_optimizer_slots",
    ],
    "eval": ["--beam_size", "--checkpoint", "--test_src", "--output_dir"],
    "translate": [
        "--beam_size",
        "--alpha",
        "--saved_model",
        "--input",
        "--decode_batch_tokens",
        "--model_dir",
    ],
    "export": ["--export_dir", "--version", "--decode_jit_compile", "--beam_size"],
    "average": ["--num_checkpoints", "--select", "--output_dir"],
    "attention": ["--sentence", "--layers", "--heads", "--output_prefix"],
    "summary": ["--d_model", "--vocab_size", "--pre_norm"],
    "fetch": ["--data_dir", "--local_copy", "--splits", "--base_url"],
    "score": [
        "--src",
        "--tgt",
        "--model_dir",
        "--saved_model",
        "--resume",
        "--buffer_size",
        "--alpha",
    ],
}


def _user_environment(**extra):
    """The environment of a user who set no TensorFlow logging variable."""
    environment = quiet_environment(**extra)
    if "TF_CPP_MIN_LOG_LEVEL" not in extra:
        del environment["TF_CPP_MIN_LOG_LEVEL"]
    return environment


def _python(code, *args, **environment):
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        env=_user_environment(**environment),
        capture_output=True,
        text=True,
        timeout=300,
    )


_HELP = """
import sys
tool = sys.argv[1]
sys.argv = [f"t2t-{tool}", "--help"]
module = __import__(f"t2t_repro.cli.{tool}", fromlist=["run"])
try:
    module.run()
except SystemExit as exit:  # absl's --help exits with 1
    assert exit.code == 1, exit.code
print("IMPORTED TENSORFLOW" if "tensorflow" in sys.modules else "NO TF")
"""


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_help_lists_the_tools_own_flags_without_importing_tensorflow(tool):
    result = _python(_HELP, tool)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.rstrip().endswith("NO TF")
    assert result.stdout.startswith(f"t2t-{tool}:")  # the tool's docstring
    # An example's continued lines stay lines ("\\" kept, not swallowed).
    assert not re.search(r"\S {4,}--", result.stdout.split("\nflags:")[0])
    for flag in TOOLS[tool]:
        boolean = flag.replace("--", "--[no]")
        assert flag in result.stdout or boolean in result.stdout, flag


_SUMMARY = """
import sys
from t2t_repro.cli import summary
sys.argv = ["t2t-summary", *sys.argv[1:]]
summary.run()
"""


def test_tensorflow_start_up_lines_are_hidden_unless_asked_for():
    quiet = _python(_SUMMARY, "--flagfile=flags/tiny.cfg")
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert "total_params:" in quiet.stdout
    noises = ("absl::InitializeLog", "oneDNN", "cpu_feature_guard", "cudart_stub")
    for noise in noises:
        assert noise not in quiet.stderr
    asked = _python(_SUMMARY, "--flagfile=flags/tiny.cfg", TF_CPP_MIN_LOG_LEVEL="0")
    assert asked.returncode == 0, asked.stderr[-2000:]
    # What the filter removed. Which lines TensorFlow writes depends on the
    # CPU: its oneDNN line only where oneDNN is on by default (AVX-512
    # VNNI/BF16 or AMX CPUs), not on an AVX2 one.
    assert any(noise in asked.stderr for noise in noises), asked.stderr


def test_a_bad_setting_is_one_line_naming_it():
    result = _python(
        _SUMMARY, "--flagfile=flags/tiny.cfg", "--d_model=30", "--num_heads=4"
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "t2t-summary: error: invalid Transformer config: d_model=30 is not "
        "divisible by num_heads=4 (or give both key_dim and value_dim)"
    ]


def test_python_dash_m_runs_a_tool_and_rejects_stray_arguments():
    stray = _t2t("summary", "--flagfile=flags/tiny.cfg", "stray")
    assert stray.returncode == 2
    assert stray.stderr.splitlines() == [
        "t2t-summary: error: unexpected arguments ['stray']: every input is a --flag"
    ]


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_each_tool_runs_as_its_module(tool):
    # `python -m t2t_repro.cli.TOOL` is the tool, named as its console
    # script; a stray argument reaches the tool's parser (no TensorFlow
    # started), where doing nothing would exit 0 silently.
    result = _python_m(f"t2t_repro.cli.{tool}", "--no_such_flag")
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.splitlines() == [
        f"t2t-{tool}: error: Unknown command line flag 'no_such_flag'"
    ]


def _python_m(module, *args):
    """`python -m module *args` from the repository root, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        env=_user_environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _t2t(*args):
    """`t2t *args`, run as `python -m t2t_repro.cli` (the same `main`)."""
    return _python_m("t2t_repro.cli", *args)


def _console_scripts():
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as handle:
        return tomllib.load(handle)["project"]["scripts"]


def test_t2t_lists_every_tool_with_its_docstrings_summary():
    scripts = _console_scripts()
    assert scripts["t2t"] == "t2t_repro.cli.__main__:main"
    [installed] = metadata.entry_points(group="console_scripts", name="t2t")
    assert installed.value == scripts["t2t"]
    listed = _t2t("--help")
    assert listed.returncode == 0, listed.stderr[-2000:]
    tools = listed.stdout.split("\ntools:\n")[1].splitlines()
    assert [line.split()[0] for line in tools] == sorted(
        name.removeprefix("t2t-") for name in scripts if name != "t2t"
    )
    assert "  train      train a Transformer from the command line." in tools
    # A first paragraph over two lines of the docstring, on one.
    assert (
        "  export     write a trained run as a SavedModel for TF Serving, "
        "or as a CTranslate2 model."
    ) in tools
    alone = _t2t()
    assert alone.returncode == 2 and alone.stderr == listed.stdout


def test_t2t_runs_a_tool_and_refuses_an_unknown_one_in_a_line():
    tool = _t2t("eval", "--help")
    assert tool.returncode == 1, tool.stderr[-2000:]  # absl's, for --help
    assert tool.stdout.startswith("t2t-eval:")
    unknown = _t2t("nope", "--help")
    assert unknown.returncode == 2
    assert unknown.stderr.splitlines() == [
        "t2t: error: no tool 'nope'; the tools: "
        + ", ".join(
            sorted(
                name.removeprefix("t2t-")
                for name in _console_scripts()
                if name != "t2t"
            )
        )
        + " (t2t --help)"
    ]


def _flags_of(settings_class):
    return {
        f"--{flag_name(field)}"
        for field in dataclasses.fields(settings_class)
        if "help" in field.metadata
    }


# Training flags t2t-eval and t2t-summary define (a training flagfile must
# parse) but do not read.
_TRAINING_ONLY = _flags_of(TrainingOptions) | {
    "--train_src",
    "--dev_src",
    "--tfds_train_split",
    "--average_last",
    "--vocab_sample_pairs",
    "--init_from",
    "--cpu_devices",
}


@pytest.mark.parametrize(
    "tool, unread",
    [
        ("eval", _TRAINING_ONLY | _flags_of(TransformerConfig) | {"--num_layers"}),
        (
            "summary",
            _TRAINING_ONLY | _flags_of(DecodingOptions) | {"--model_dir", "--test_src"},
        ),
    ],
)
def test_help_lists_no_flag_the_tool_does_not_read(tool, unread):
    result = _python(_HELP, tool)
    assert result.returncode == 0, result.stderr[-2000:]
    listed = set(
        re.findall(
            r"^  (--[a-z_0-9]+)", result.stdout.replace("--[no]", "--"), re.MULTILINE
        )
    )
    assert listed and not listed & unread, listed & unread


_PARSE_TRAINING_FLAGFILE = """
import sys
from absl import flags
tool = sys.argv[1]
__import__(f"t2t_repro.cli.{tool}")
flags.FLAGS([f"t2t-{tool}", "--flagfile=flags/multi30k.cfg",
             "--model_dir=run"])
print(flags.FLAGS.train_steps, flags.FLAGS.d_model, flags.FLAGS.test_src)
"""


@pytest.mark.parametrize("tool", ["eval", "summary"])
def test_a_training_flagfile_still_parses(tool):
    result = _python(_PARSE_TRAINING_FLAGFILE, tool)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == [
        "950",
        "256",
        "data/multi30k/test_2016_flickr.en.gz",
    ]


_CHECK_MODEL_FLAGS = """
import json
import sys
from absl import flags
from t2t_repro.cli import eval
from t2t_repro.cli.flags import check_command_line_model_flags
from t2t_repro.config import ConfigError, TransformerConfig
run = TransformerConfig(vocab_size=100, d_model=32, num_heads=2, d_ff=64,
                        num_encoder_layers=1, num_decoder_layers=1,
                        pre_norm=True)
for argv in json.loads(sys.argv[1]):
    sys.argv = ["t2t-eval", "--model_dir=RUN", *argv]
    flags.FLAGS.unparse_flags()
    flags.FLAGS(sys.argv)
    try:
        check_command_line_model_flags(run, "RUN/config.json")
        print("accepted")
    except ConfigError as error:
        print(error)
"""


def test_command_line_model_flags_that_differ_from_the_run_are_refused():
    cases = {
        ("--d_model=32", "--num_heads", "2"): "accepted",
        ("--pre_norm",): "accepted",
        # A training recipe: describes other runs, the run may override it.
        ("--flagfile=flags/tiny.cfg",): "accepted",
        ("--d_model=64", "--num_heads=8"): "d_model 64 != 32, num_heads 8 != 2",
        ("--num_layers=3", "--num_decoder_layers=1"): "num_encoder_layers 3 != 1",
        ("--nopre_norm", "--flagfile=flags/tiny.cfg"): "pre_norm False != True",
    }
    result = _python(_CHECK_MODEL_FLAGS, json.dumps(list(cases)))
    assert result.returncode == 0, result.stderr[-2000:]
    refused = (
        "the model is RUN/config.json's, and the command line's model flags differ: "
    )
    assert result.stdout.splitlines() == [
        answer if answer == "accepted" else refused + answer
        for answer in cases.values()
    ]


def test_eval_refuses_a_model_flag_and_translate_export_do_not_take_one(
    toy_run_dir, tmp_path
):
    (tmp_path / "test.de").write_text("ein hund läuft\n")
    (tmp_path / "test.en").write_text("a dog runs\n")
    evaluated = _t2t(
        "eval",
        f"--model_dir={toy_run_dir}",
        "--d_model=64",
        f"--test_src={tmp_path}/test.de",
        f"--test_tgt={tmp_path}/test.en",
    )
    assert evaluated.returncode == 2
    assert evaluated.stderr.splitlines() == [
        f"t2t-eval: error: the model is {toy_run_dir}/config.json's, and the "
        "command line's model flags differ: d_model 64 != 32"
    ]
    for tool in ("translate", "export"):
        result = _t2t(
            tool,
            f"--model_dir={toy_run_dir}",
            "--d_model=64",
            f"--export_dir={tmp_path}/export" if tool == "export" else "--input=-",
        )
        assert result.returncode == 2
        [line] = result.stderr.splitlines()
        assert line.startswith(
            f"t2t-{tool}: error: Unknown command line flag 'd_model'"
        )


_CONFIG = """
import sys
from absl import flags
from t2t_repro.cli.flags import (define_training_flags,
                                 model_config_from_flags, settings_from_flags)
from t2t_repro.config import TrainingOptions
define_training_flags()
flags.FLAGS(["prog", *sys.argv[1:]])
config = model_config_from_flags(vocab_size=100)
options = settings_from_flags(TrainingOptions)
print(config.num_encoder_layers, config.num_decoder_layers, config.d_model,
      config.vocab_size, options.batch_tokens, options.model_dir,
      options.mixed_precision, flags.FLAGS.train_src)
"""


@pytest.mark.parametrize(
    "args, expected",
    [
        ([], "6 6 512 100 4096 None auto None"),
        (["--num_layers=4"], "4 4 512 100 4096 None auto None"),
        (
            ["--num_layers=4", "--num_decoder_layers=2"],
            "4 2 512 100 4096 None auto None",
        ),
        (
            ["--flagfile=flags/multi30k.cfg", "--model_dir=run"],
            "3 3 256 100 4000 run auto data/multi30k/train.en.gz",
        ),
        # A recipe alone: the same model, and no data of its own.
        (
            ["--flagfile=flags/quickstart.cfg", "--model_dir=run"],
            "3 3 256 100 4000 run auto None",
        ),
    ],
)
def test_flags_fill_the_settings(args, expected):
    result = _python(_CONFIG, *args)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == expected


def test_no_library_module_imports_a_cli():
    package = os.path.join(REPO, "t2t_repro")
    for directory, _, files in os.walk(package):
        if os.path.basename(directory) == "cli":
            continue
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(directory, name)) as handle:
                    assert "t2t_repro.cli" not in handle.read(), name


def test_the_flagfile_that_is_not_utf8_is_found_as_absl_reads_them(tmp_path):
    """Nested flagfiles (a path with a space), comments skipped, a flagfile
    that names itself read once."""
    from t2t_repro.cli.common import _undecodable_flagfile

    (tmp_path / "with space").mkdir()
    bad = tmp_path / "with space" / "latin1.cfg"
    bad.write_bytes(b"--beam_size=4\n# \xdcbersetzung\n")
    outer = tmp_path / "outer.cfg"
    outer.write_text(
        f"# --flagfile={tmp_path}/missing.cfg\n--flagfile={outer}\n--flagfile={bad}\n"
    )
    assert _undecodable_flagfile(["t2t-train", "--flagfile", str(outer)]) == (
        f"{bad}:2: not valid UTF-8 (byte 2)"
    )
