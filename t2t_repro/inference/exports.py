"""A t2t-export SavedModel loaded for translating or scoring, and the
check that the flags a tool runs it with are within the limits it was
exported with (it would refuse every request otherwise)."""

import dataclasses
import json
import os

import tensorflow as tf

from t2t_repro.config import ConfigError

# How the export's serving_default decodes, beside the SavedModel (TF
# Serving reads nothing in assets.extra/ but its warm-up file): a tool
# reads it before TensorFlow starts, to give each op of a decoding process
# its search's share of the cores.
DECODING_FILE = os.path.join("assets.extra", "t2t_decoding.json")
_RECORDED_DECODING = (
    "beam_size",
    "alpha",
    "extra_length",
    "parallel_searches",
    "jit_compile",
)


def write_export_decoding(path, decoding):
    """Records `decoding`'s (`DecodingOptions`) fields that the graph
    written to `path` holds."""
    tf.io.gfile.makedirs(os.path.join(path, os.path.dirname(DECODING_FILE)))
    with tf.io.gfile.GFile(os.path.join(path, DECODING_FILE), "w") as handle:
        recorded = {name: getattr(decoding, name) for name in _RECORDED_DECODING}
        json.dump(recorded, handle)


def export_decoding(path, decoding):
    """`decoding` with the fields the export at `path` was written with
    (unchanged if it records none: an export older than its
    assets.extra/t2t_decoding.json)."""
    file_path = os.path.join(path, DECODING_FILE)
    if not tf.io.gfile.exists(file_path):
        return decoding
    with tf.io.gfile.GFile(file_path) as handle:
        recorded = json.load(handle)
    return dataclasses.replace(
        decoding, **{name: recorded[name] for name in _RECORDED_DECODING}
    )


def load_export(path):
    """The t2t-export SavedModel at `path`, loaded."""
    import tensorflow_text  # noqa: F401  registers the SentencePiece ops

    if not tf.saved_model.contains_saved_model(path):
        raise FileNotFoundError(
            f"{path}: no SavedModel there (no saved_model.pb); give a version "
            "directory such as exports/x/950"
        )
    return tf.saved_model.load(path)


def check_export_limits(loaded, path, alpha, beam_size=None):
    """Refuses (ConfigError, naming the flags) an `alpha` or `beam_size`
    over the limits of the export at `path`, `loaded`, which would refuse
    every request."""
    over = []
    max_beam_size = int(loaded.max_beam_size.numpy())
    if beam_size is not None and beam_size > max_beam_size:
        over.append(
            f"--beam_size={beam_size} is over its max_beam_size={max_beam_size}"
        )
    max_alpha = float(loaded.max_alpha.numpy())
    if alpha > max_alpha:
        over.append(f"--alpha={alpha:g} is over its max_alpha={max_alpha:g}")
    if over:
        raise ConfigError(
            f"{path}: {' and '.join(over)} (set by t2t-export's flags of those names)"
        )
