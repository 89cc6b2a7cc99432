"""t2t_repro: the Transformer of 'Attention Is All You Need' in TF/Keras.

How the package is laid out: docs/architecture.md. The names a Keras user
needs (the model, its layers, schedule, optimizer and loss, `Translator`
and the exports) are importable from here: see `__all__` and
docs/python_api.md.
"""

from importlib import import_module as _import_module
from importlib import metadata as _metadata

__version__ = _metadata.version("t2t_repro")

# Each public name and the module that defines it. Imported on first use
# (PEP 562): every t2t-* tool imports this package, and `--help` must not
# wait for TensorFlow.
_PUBLIC = {
    "TransformerConfig": "t2t_repro.config",
    "Transformer": "t2t_repro.model",
    **dict.fromkeys(
        [
            "DecoderLayer",
            "Dense",
            "Dropout",
            "EncoderLayer",
            "LayerNormalization",
            "LearnedPositionEncoding",
            "MultiHeadAttention",
            "PositionWiseFeedForward",
            "ScaledDotProductAttention",
            "SharedEmbedding",
            "SinusoidalPositionEncoding",
        ],
        "t2t_repro.layers",
    ),
    "TransformerSchedule": "t2t_repro.training.schedule",
    "FusedAdam": "t2t_repro.training.schedule",
    "paper_adam": "t2t_repro.training.schedule",
    "LabelSmoothedCrossEntropy": "t2t_repro.training.losses",
    "Translator": "t2t_repro.translator",
    "export_saved_model": "t2t_repro.serving",
    "export_ctranslate2": "t2t_repro.ct2",
}

__all__ = list(_PUBLIC)


def __getattr__(name):
    if name not in _PUBLIC:
        raise AttributeError(f"module 't2t_repro' has no attribute {name!r}")
    value = getattr(_import_module(_PUBLIC[name]), name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__():
    return sorted({*globals(), *_PUBLIC})
