"""A t2t-export SavedModel loaded for translating or scoring; the check
that the flags a tool runs it with are within the limits it was exported
with (it would refuse every request otherwise); and the record of the
decoding settings its graph holds, which a tool reads before TensorFlow
starts."""

import dataclasses
import json
import os

import numpy as np
import tensorflow as tf

from t2t_repro.config import ConfigError, DecodingOptions, flag_name
from t2t_repro.data import DataError
from t2t_repro.files import read_json_object
from t2t_repro.inference.batching import utf8_size

# The decoding settings an export's graph holds, beside it (TF Serving reads
# its warm-up file and saved_model_config.pb from assets.extra/, nothing
# else): a tool reads them before TensorFlow starts, to give each op of a
# decoding process its search's share of the cores.
DECODING_FILE = os.path.join("assets.extra", "t2t_decoding.json")
_RECORDED_DECODING = (
    "beam_size",
    "alpha",
    "extra_length",
    "parallel_searches",
    "jit_compile",
)
# What the `translate` signature holds (a request gives beam size and alpha).
_TRANSLATE_BUILT_IN = ("extra_length", "parallel_searches")


def write_export_decoding(path, decoding):
    """Records the fields of `decoding` (`DecodingOptions`) that the graph
    written to `path` holds."""
    recorded = {name: getattr(decoding, name) for name in _RECORDED_DECODING}
    file_path = os.path.join(path, DECODING_FILE)
    tf.io.gfile.makedirs(os.path.dirname(file_path))
    with tf.io.gfile.GFile(file_path, "w") as handle:
        json.dump(recorded, handle)


def translate_decoding(path, decoding=DecodingOptions(), given=()):
    """`decoding` as the export at `path` runs it in its `translate`
    signature, which t2t-translate --saved_model and
    `Translator.from_saved_model` call: with the export's --extra_decode_length
    and --decode_parallel_searches, never XLA-compiled. For
    `use_decoding_threads`; reads a file, runs no TensorFlow op.

    `given`: the fields a user set; one that differs from the export's is
    a ConfigError naming its flag. An export written before DECODING_FILE
    existed records nothing, and `decoding`'s own values stand."""
    decoding = dataclasses.replace(decoding, jit_compile=False)
    file_path = os.path.join(path, DECODING_FILE)
    if not tf.io.gfile.exists(file_path):
        return decoding
    recorded = read_json_object(file_path)
    fields = {field.name: field for field in dataclasses.fields(DecodingOptions)}
    built_in = {}
    for name in _TRANSLATE_BUILT_IN:
        value = recorded.get(name)
        if type(value) is not int:
            raise ConfigError(f"{file_path}: corrupt ({name} {value!r} is not a count)")
        if name in given and value != getattr(decoding, name):
            flag = flag_name(fields[name])
            raise ConfigError(
                f"--{flag}={getattr(decoding, name)}: {path} was exported "
                f"with --{flag}={value}, which its graph holds"
            )
        built_in[name] = value
    return dataclasses.replace(decoding, **built_in)


def load_export(path):
    """The t2t-export SavedModel at `path`, loaded."""
    import tensorflow_text  # noqa: F401  registers the SentencePiece ops

    if not tf.saved_model.contains_saved_model(path):
        raise FileNotFoundError(
            f"{path}: no SavedModel there (no saved_model.pb); give a version "
            "directory such as exports/x/950"
        )
    return tf.saved_model.load(path)


def request_byte_limit(graph):
    """The most UTF-8 bytes of strings one request to `graph` may hold: an
    export's max_request_bytes; None (any) for a graph built in this
    process."""
    limit = getattr(graph, "max_request_bytes", None)
    return None if limit is None else int(limit.numpy())


def refuse_oversized(sentences, limit, name_of, export, prefix="--"):
    """Refuses (DataError) the first of `sentences` (str or bytes) over an
    export's max_sentence_bytes `limit`, which its graph would refuse in a
    batch sorted by length. `name_of(index)` names the sentence (a file's
    line, a list's item); `export` names the export; `prefix` comes before
    the export flag named: "--" for a command, "" for Python."""
    if limit is None:
        return
    for index, sentence in enumerate(sentences):
        if (size := utf8_size(sentence)) > limit:
            raise DataError(
                f"{name_of(index)}: {size} bytes, over {export}'s "
                f"max_sentence_bytes={limit}; split it, or export with a "
                f"larger {prefix}max_sentence_bytes"
            )


def check_export_limits(loaded, path, alpha, beam_size=None, prefix="--"):
    """Refuses (ConfigError) an `alpha` or `beam_size` over the limits of
    the export at `path`, `loaded`, which would refuse every request. The
    message names them with `prefix` before: "--" for flags, "" for a
    Python caller's arguments."""
    over, limits = [], []
    max_beam_size = int(loaded.max_beam_size.numpy())
    if beam_size is not None and beam_size > max_beam_size:
        over.append(
            f"{prefix}beam_size={beam_size} is over its max_beam_size={max_beam_size}"
        )
        limits.append("--max_beam_size")
    max_alpha = float(loaded.max_alpha.numpy())
    # Compared in float32, as the export's graph compares them: 0.7 is
    # stored as 0.69999999, under the 0.7 a client asks for.
    if np.float32(alpha) > np.float32(max_alpha):
        over.append(f"{prefix}alpha={alpha:g} is over its max_alpha={max_alpha:g}")
        limits.append("--max_alpha")
    if over:
        raise ConfigError(
            f"{path}: {' and '.join(over)} (set by t2t-export {' and '.join(limits)})"
        )
