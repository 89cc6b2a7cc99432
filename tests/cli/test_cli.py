"""The command-line tools as a user meets them: --help, start-up output,
errors, and flags generated from the settings in t2t_repro/config.py."""

import os
import subprocess
import sys

import pytest

from processes import REPO, quiet_environment

TOOLS = {  # tool module: flags its --help must list
    "train": ["--train_steps", "--d_model", "--num_layers", "--train_src",
              "--model_dir", "--mixed_precision", "--keep_best"],
    "eval": ["--beam_size", "--checkpoint", "--test_src", "--output_dir"],
    "translate": ["--beam_size", "--alpha", "--saved_model", "--input",
                  "--decode_batch_tokens", "--model_dir"],
    "export": ["--export_dir", "--version", "--export_jit_compile",
               "--beam_size"],
    "average": ["--num_checkpoints", "--select", "--output_dir"],
    "attention": ["--sentence", "--layers", "--heads", "--output_prefix"],
    "summary": ["--d_model", "--vocab_size", "--pre_norm"],
    "fetch": ["--data_dir", "--local_copy", "--splits", "--base_url"],
}


def _user_environment(**extra):
    """The environment of a user who set no TensorFlow logging variable."""
    environment = quiet_environment(**extra)
    if "TF_CPP_MIN_LOG_LEVEL" not in extra:
        del environment["TF_CPP_MIN_LOG_LEVEL"]
    return environment


def _python(code, *args, **environment):
    return subprocess.run([sys.executable, "-c", code, *args], cwd=REPO,
                          env=_user_environment(**environment),
                          capture_output=True, text=True, timeout=300)


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
    noises = ("absl::InitializeLog", "oneDNN", "cpu_feature_guard",
              "cudart_stub")
    for noise in noises:
        assert noise not in quiet.stderr
    asked = _python(_SUMMARY, "--flagfile=flags/tiny.cfg",
                    TF_CPP_MIN_LOG_LEVEL="0")
    assert asked.returncode == 0, asked.stderr[-2000:]
    # What the filter removed. Which lines TensorFlow writes depends on the
    # CPU: its oneDNN line only where oneDNN is on by default (AVX-512
    # VNNI/BF16 or AMX CPUs), not on an AVX2 one.
    assert any(noise in asked.stderr for noise in noises), asked.stderr


def test_a_bad_setting_is_one_line_naming_it():
    result = _python(_SUMMARY, "--flagfile=flags/tiny.cfg", "--d_model=30",
                     "--num_heads=4")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "t2t-summary: error: invalid Transformer config: d_model=30 is not "
        "divisible by num_heads=4 (or give both key_dim and value_dim)"]


def test_python_dash_m_runs_a_tool_and_rejects_stray_arguments():
    command = [sys.executable, "-m", "t2t_repro.cli"]
    stray = subprocess.run(
        command + ["summary", "--flagfile=flags/tiny.cfg", "stray"],
        cwd=REPO, env=_user_environment(), capture_output=True, text=True,
        timeout=300)
    assert stray.returncode == 2
    assert stray.stderr.splitlines() == [
        "t2t-summary: error: unexpected arguments ['stray']: every input is "
        "a --flag"]
    unknown = subprocess.run(command + ["nope"], cwd=REPO,
                             capture_output=True, text=True, timeout=300)
    assert unknown.returncode == 1
    assert "usage: python -m t2t_repro.cli {attention," in unknown.stderr


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


@pytest.mark.parametrize("args, expected", [
    ([], "6 6 512 100 4096 None auto None"),
    (["--num_layers=4"], "4 4 512 100 4096 None auto None"),
    (["--num_layers=4", "--num_decoder_layers=2"],
     "4 2 512 100 4096 None auto None"),
    (["--flagfile=flags/multi30k.cfg", "--model_dir=run"],
     "3 3 256 100 4000 run auto data/multi30k/train.en.gz"),
    # A recipe alone: the same model, and no data of its own.
    (["--flagfile=flags/quickstart.cfg", "--model_dir=run"],
     "3 3 256 100 4000 run auto None"),
])
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
