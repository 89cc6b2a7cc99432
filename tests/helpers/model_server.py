"""Builds and runs model_server_loader.cc: TF Serving's SavedModel loading
path (tensorflow::LoadSavedModel, tag "serve", the serving_default
SignatureDef) compiled against the installed TensorFlow wheel."""

import os
import subprocess
import sysconfig

from helpers.processes import HELPERS, quiet_environment

SOURCE = os.path.join(HELPERS, "model_server_loader.cc")


def _package_dir(name):
    return os.path.join(sysconfig.get_paths()["purelib"], name)


def text_ops_library():
    """tensorflow-text's op library that holds the SentencePiece ops."""
    return os.path.join(
        _package_dir("tensorflow_text"), "python", "ops", "_sentencepiece_tokenizer.so"
    )


def build(output_dir):
    """Compiles the loader with g++ (about a minute); returns its path."""
    tensorflow = _package_dir("tensorflow")
    binary = os.path.join(str(output_dir), "model_server_loader")
    command = [
        "g++",
        "-std=c++17",
        "-O1",
        "-w",
        f"-I{os.path.join(tensorflow, 'include')}",
        SOURCE,
        "-o",
        binary,
        f"-L{tensorflow}",
        "-l:libtensorflow_cc.so.2",
        "-l:libtensorflow_framework.so.2",
        f"-Wl,-rpath,{tensorflow}",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if result.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-5000:]}")
    return binary


def translate(binary, export_path, sentences, xla=False):
    """Runs the loader on `sentences`; a CompletedProcess (text)."""
    flags = ["--xla_cpu_compilation_enabled"] if xla else []
    return subprocess.run(
        [binary, *flags, export_path, text_ops_library()],
        input="".join(s + "\n" for s in sentences),
        capture_output=True,
        text=True,
        env=quiet_environment(),
        timeout=600,
    )
