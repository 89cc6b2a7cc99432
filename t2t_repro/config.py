"""Model hyper-parameters: one dataclass, and the absl flags that fill it."""

import dataclasses

from absl import flags

# Fixed ids of the shared SentencePiece vocabulary (see data/vocabulary.py).
PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Everything that determines the Transformer's shape and regularisation."""

    vocab_size: int
    d_model: int = 512
    num_heads: int = 8
    d_ff: int = 2048
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    dropout: float = 0.1
    attention_dropout: float = 0.0
    relu_dropout: float = 0.0
    position_encoding: str = "sinusoidal"
    max_length: int = 256
    pre_norm: bool = False

    def __post_init__(self):
        problems = []
        if self.vocab_size < 4:
            problems.append(f"vocab_size={self.vocab_size} must be >= 4 "
                            "(pad, unk, bos, eos)")
        for name in ("d_model", "num_heads", "d_ff", "num_encoder_layers",
                     "num_decoder_layers", "max_length"):
            if getattr(self, name) <= 0:
                problems.append(f"{name}={getattr(self, name)} must be > 0")
        if self.num_heads > 0 and self.d_model % self.num_heads:
            problems.append(f"d_model={self.d_model} is not divisible by "
                            f"num_heads={self.num_heads}")
        if self.d_model % 2:
            problems.append(f"d_model={self.d_model} must be even "
                            "(sine/cosine pairs)")
        for name in ("dropout", "attention_dropout", "relu_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                problems.append(f"{name}={getattr(self, name)} must be in "
                                "[0, 1)")
        if self.position_encoding not in ("sinusoidal", "learned"):
            problems.append(f"position_encoding={self.position_encoding!r} "
                            "must be 'sinusoidal' or 'learned'")
        if problems:
            raise ValueError("invalid Transformer config: " +
                             "; ".join(problems))


def define_model_flags():
    """Defines one flag per `TransformerConfig` field (idempotent)."""
    if "d_model" in flags.FLAGS:
        return
    flags.DEFINE_integer("vocab_size", 8000,
                         "Shared source+target subword vocabulary size.")
    flags.DEFINE_integer("d_model", 512, "Model width.")
    flags.DEFINE_integer("num_heads", 8, "Attention heads h.")
    flags.DEFINE_integer("d_ff", 2048, "Feed-forward inner width.")
    flags.DEFINE_integer("num_layers", 6,
                         "Encoder and decoder layers N (each).")
    flags.DEFINE_integer("num_encoder_layers", None,
                         "Encoder layers, if not --num_layers.")
    flags.DEFINE_integer("num_decoder_layers", None,
                         "Decoder layers, if not --num_layers.")
    flags.DEFINE_float("dropout", 0.1, "Residual and embedding dropout.")
    flags.DEFINE_float("attention_dropout", 0.0,
                       "Dropout on attention weights.")
    flags.DEFINE_float("relu_dropout", 0.0,
                       "Dropout inside the feed-forward network.")
    flags.DEFINE_enum("position_encoding", "sinusoidal",
                      ["sinusoidal", "learned"], "Position encoding.")
    flags.DEFINE_integer("max_length", 256,
                         "Longest sequence in subword tokens (with EOS).")
    flags.DEFINE_bool("pre_norm", False,
                      "Pre-norm residual blocks instead of the paper's "
                      "post-norm.")


def config_from_flags(vocab_size=None):
    """Builds the config from parsed flags; raises ValueError if invalid."""
    f = flags.FLAGS
    return TransformerConfig(
        vocab_size=vocab_size or f.vocab_size, d_model=f.d_model,
        num_heads=f.num_heads, d_ff=f.d_ff,
        num_encoder_layers=f.num_encoder_layers or f.num_layers,
        num_decoder_layers=f.num_decoder_layers or f.num_layers,
        dropout=f.dropout, attention_dropout=f.attention_dropout,
        relu_dropout=f.relu_dropout, position_encoding=f.position_encoding,
        max_length=f.max_length, pre_norm=f.pre_norm)


def define_recipe_flags():
    """Training-recipe flags that config files set next to the model's."""
    if "label_smoothing" in flags.FLAGS:
        return
    flags.DEFINE_float("label_smoothing", 0.1, "Label smoothing epsilon_ls.",
                       lower_bound=0.0, upper_bound=0.999)
    flags.DEFINE_integer("warmup_steps", 4000, "Learning-rate warm-up steps.",
                         lower_bound=1)
    flags.DEFINE_float("learning_rate_scale", 1.0,
                       "Multiplier on the paper's learning-rate schedule.",
                       lower_bound=0.0)
    flags.DEFINE_float("weight_decay", 0.0,
                       "Decoupled weight decay (AdamW) on the weight "
                       "matrices; biases, LayerNorm and the embedding are "
                       "not decayed. 0 is the paper's plain Adam.",
                       lower_bound=0.0)
    flags.DEFINE_float("subword_sampling", 0.0,
                       "Sample a new segmentation of each training sentence "
                       "every time it is read: the BPE-dropout rate for "
                       "BPE vocabularies, the smoothing alpha (over all "
                       "segmentations) for unigram ones. 0 = off; never "
                       "used for evaluation or serving.",
                       lower_bound=0.0, upper_bound=1.0)
