"""Parses every shipped flagfile as t2t-train does and builds its model;
prints JSON {flagfile: {"params": count, "config": TransformerConfig
fields, "training": TrainingOptions fields}}.

    python flagfile_models.py [GLOB]   (default flags/*.cfg; from the
                                        repository root: flagfiles name each
                                        other by repo-relative paths)
"""

import dataclasses
import glob
import json
import sys

import keras
from absl import flags

from t2t_repro.cli import train  # noqa: F401  defines every t2t-train flag
from t2t_repro.cli.flags import model_config_from_flags, settings_from_flags
from t2t_repro.config import TrainingOptions
from t2t_repro.model import Transformer

FLAGS = flags.FLAGS


def main():
    models = {}
    pattern = sys.argv[1] if len(sys.argv) > 1 else "flags/*.cfg"
    for path in sorted(glob.glob(pattern)):
        FLAGS.unparse_flags()
        FLAGS(["flagfile_models", f"--flagfile={path}", "--model_dir=unused"])
        # Every setting the flagfile gives must be valid, not only the
        # model's.
        training = settings_from_flags(TrainingOptions, model_dir="unused")
        config = model_config_from_flags()
        models[path] = {
            "params": Transformer(config).count_params(),
            "config": dataclasses.asdict(config),
            "training": dataclasses.asdict(training),
        }
        keras.backend.clear_session()
    print(json.dumps(models))


if __name__ == "__main__":
    main()
