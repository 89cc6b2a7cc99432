"""`t2t-train` as the tests run it: `python -m t2t_repro.cli train
--flagfile=flags/tiny.cfg` (a 2-layer, d_model 64 Transformer) from the
repository root."""

from helpers.multi30k_data import multi30k
from helpers.processes import run_python, start_python
from t2t_repro.data import text_files

# Multi30k's 1,014 validation pairs: trains the tiny model in seconds.
MULTI30K_VAL = (
    f"--train_src={multi30k('val', 'en')}",
    f"--train_tgt={multi30k('val', 'de')}",
)


def train_args(*flags):
    """The Python arguments of `t2t-train --flagfile=flags/tiny.cfg
    FLAGS`."""
    return ["-m", "t2t_repro.cli", "train", "--flagfile=flags/tiny.cfg", *flags]


def run_train(*flags, env=None, timeout=600, quiet=True):
    """`t2t-train` with `flags`, run to its end (see `run_python`)."""
    return run_python(train_args(*flags), env=env, timeout=timeout, quiet=quiet)


def start_train(*flags, env=None):
    """`t2t-train` with `flags`, started (see `start_python`)."""
    return start_python(train_args(*flags), env=env)


def multi30k_test_set(directory, lines):
    """Writes the first `lines` pairs of Multi30k's test_2016_flickr to
    DIRECTORY/test.{en,de}; returns the flags that score a run on them."""
    for lang in ("en", "de"):
        path = directory / f"test.{lang}"
        head = text_files.read_lines(multi30k("test_2016_flickr", lang))[:lines]
        path.write_text("".join(line + "\n" for line in head), "utf-8")
    return [f"--test_src={directory}/test.en", f"--test_tgt={directory}/test.de"]
