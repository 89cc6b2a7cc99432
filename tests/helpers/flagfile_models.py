"""Parses every shipped flagfile as t2t-train does and builds its model;
prints JSON {flagfile: parameter count}.

    python flagfile_models.py   (from the repository root: flagfiles name
                                 each other by repo-relative paths)
"""

import glob
import json

import keras
from absl import flags

from t2t_repro.cli import train  # noqa: F401  defines every t2t-train flag
from t2t_repro.cli.flags import model_config_from_flags, settings_from_flags
from t2t_repro.config import TrainingOptions
from t2t_repro.model import Transformer

FLAGS = flags.FLAGS


def main():
    counts = {}
    for path in sorted(glob.glob("flags/*.cfg")):
        FLAGS.unparse_flags()
        FLAGS(["flagfile_models", f"--flagfile={path}",
               "--model_dir=unused"])
        # Every setting the flagfile gives must be valid, not only the
        # model's.
        settings_from_flags(TrainingOptions, model_dir="unused")
        counts[path] = Transformer(model_config_from_flags()).count_params()
        keras.backend.clear_session()
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
