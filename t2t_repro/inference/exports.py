"""A t2t-export SavedModel loaded for translating or scoring, and the
check that the flags a tool runs it with are within the limits it was
exported with (it would refuse every request otherwise)."""

import tensorflow as tf

from t2t_repro.config import ConfigError


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
