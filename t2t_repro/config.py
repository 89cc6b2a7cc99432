"""Every setting of the pipeline, each written once.

A setting is a dataclass field: its default and its help text live here and
nowhere else. The command-line tools generate their flags from these fields
(`t2t_repro/cli/flags.py`), so a flag's name, default and help are the
field's. Four groups: `TransformerConfig` (the model's shape; saved as
MODEL_DIR/config.json), `TrainingOptions` (how to train; MODEL_DIR/
training.json), `DecodingOptions` (how to translate) and `ServingLimits`
(what one request to an exported SavedModel may ask). The module imports
neither TensorFlow nor absl, so `--help` stays fast.
"""

import dataclasses

import sacrebleu

# Fixed ids of the shared SentencePiece vocabulary (see data/vocabulary.py).
PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3


class ConfigError(ValueError):
    """Settings that cannot work together; the message names them."""


def setting(default, help, **flag_options):
    """A dataclass field that is also a command-line flag.

    `flag_options`: `choices` (an enum flag), `lower_bound`/`upper_bound`,
    or `flag` (the flag's name, where it differs from the field's).
    """
    return dataclasses.field(default=default, metadata={"help": help, **flag_options})


PRECISIONS = ("auto", "none", "bf16", "fp16")
# Decoding's --precision (decoding/precision.py), and how much faster than
# float32 bf16 matmuls must run for "auto" to decode in bf16: a beam step
# of a small model is mostly not matmuls, and bf16 matmuls 4.7x faster
# than float32 ones made beam search only 1.11-1.17x faster (the
# quickstart model, AMX, results/benchmarks/2026-11-25-intel-xeon-amx-
# second-session.md), so a 2x machine would gain little or lose.
DECODING_PRECISIONS = ("fp32", "bf16", "auto")
BF16_DECODING_SPEEDUP = 3.0

# The paper: maximum output length = input length + 50 (+ 300 for parsing).
EXTRA_DECODE_LENGTH = 50
# Warm-up requests t2t-export writes for TF Serving to replay at load time.
DEFAULT_WARMUP_REQUESTS = 8
# Weight types of a CTranslate2 export besides its default, float32.
CT2_QUANTIZATIONS = ("int8", "int16", "float16")


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Everything that determines the Transformer's shape and regularisation."""

    vocab_size: int = setting(8000, "Shared source+target subword vocabulary size.")
    d_model: int = setting(512, "Model width.")
    num_heads: int = setting(8, "Attention heads h.")
    key_dim: int = setting(
        0, "Per-head query/key depth d_k (0: d_model / num_heads).", lower_bound=0
    )
    value_dim: int = setting(
        0, "Per-head value depth d_v (0: d_model / num_heads).", lower_bound=0
    )
    d_ff: int = setting(2048, "Feed-forward inner width.")
    num_encoder_layers: int = setting(6, "Encoder layers (default: --num_layers).")
    num_decoder_layers: int = setting(6, "Decoder layers (default: --num_layers).")
    dropout: float = setting(0.1, "Residual and embedding dropout.")
    attention_dropout: float = setting(0.0, "Dropout on attention weights.")
    relu_dropout: float = setting(0.0, "Dropout inside the feed-forward network.")
    position_encoding: str = setting(
        "sinusoidal", "Position encoding.", choices=("sinusoidal", "learned")
    )
    max_length: int = setting(256, "Longest sequence in subword tokens (with EOS).")
    pre_norm: bool = setting(
        False, "Pre-norm residual blocks instead of the paper's post-norm."
    )

    def __post_init__(self):
        problems = []
        if self.vocab_size < 4:
            problems.append(
                f"vocab_size={self.vocab_size} must be >= 4 (pad, unk, bos, eos)"
            )
        for name in (
            "d_model",
            "num_heads",
            "d_ff",
            "num_encoder_layers",
            "num_decoder_layers",
            "max_length",
        ):
            if getattr(self, name) <= 0:
                problems.append(f"{name}={getattr(self, name)} must be > 0")
        for name in ("key_dim", "value_dim"):
            if getattr(self, name) < 0:
                problems.append(
                    f"{name}={getattr(self, name)} must be >= 0 "
                    "(0: d_model / num_heads)"
                )
        if (
            self.num_heads > 0
            and self.d_model % self.num_heads
            and not (self.key_dim and self.value_dim)
        ):
            problems.append(
                f"d_model={self.d_model} is not divisible by "
                f"num_heads={self.num_heads} (or give both "
                "key_dim and value_dim)"
            )
        if self.d_model % 2:
            problems.append(f"d_model={self.d_model} must be even (sine/cosine pairs)")
        for name in ("dropout", "attention_dropout", "relu_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                problems.append(f"{name}={getattr(self, name)} must be in [0, 1)")
        if self.position_encoding not in ("sinusoidal", "learned"):
            problems.append(
                f"position_encoding={self.position_encoding!r} "
                "must be 'sinusoidal' or 'learned'"
            )
        if problems:
            raise ConfigError("invalid Transformer config: " + "; ".join(problems))

    @property
    def head_dims(self):
        """(d_k, d_v) of every attention head."""
        return (
            self.key_dim or self.d_model // self.num_heads,
            self.value_dim or self.d_model // self.num_heads,
        )


@dataclasses.dataclass(frozen=True)
class TrainingOptions:
    """How to train; the model's shape is in `TransformerConfig`.

    `model_dir` has no flag of its own here: every tool shares one
    --model_dir (cli/flags.py).
    """

    model_dir: str
    train_steps: int = setting(100_000, "Optimizer updates to reach.", lower_bound=1)
    batch_tokens: int = setting(
        4096, "Global source+target tokens per micro-batch (padded).", lower_bound=2
    )
    accum_steps: int = setting(1, "Micro-batches summed per update.", lower_bound=1)
    label_smoothing: float = setting(
        0.1, "Label smoothing epsilon_ls.", lower_bound=0.0, upper_bound=0.999
    )
    warmup_steps: int = setting(4000, "Learning-rate warm-up steps.", lower_bound=1)
    learning_rate_scale: float = setting(
        1.0, "Multiplier on the paper's learning-rate schedule.", lower_bound=0.0
    )
    cooldown_steps: int = setting(
        0,
        "Decay the learning rate linearly to ~0 over the last this many "
        "of --train_steps (0: the paper's schedule unchanged). Raising "
        "--train_steps of a cooled-down run raises the rate again.",
        lower_bound=0,
    )
    weight_decay: float = setting(
        0.0,
        "Decoupled weight decay (AdamW) on the weight matrices; "
        "biases, LayerNorm and the embedding are not decayed. 0 is the "
        "paper's plain Adam.",
        lower_bound=0.0,
    )
    subword_sampling: float = setting(
        0.0,
        "Sample a new segmentation of each training sentence every "
        "time it is read: the BPE-dropout rate for BPE vocabularies, the "
        "smoothing alpha (over all segmentations) for unigram ones. 0 = "
        "off; never used for evaluation or serving.",
        lower_bound=0.0,
        upper_bound=1.0,
    )
    overlong: str = setting(
        "drop",
        "What to do with pairs longer than --max_length.",
        choices=("drop", "truncate"),
    )
    shuffle_buffer: int = setting(
        100_000, "Sentence-pair shuffle buffer.", lower_bound=1
    )
    seed: int = setting(0, "Seed for initialisation, dropout and data order.")
    checkpoint_every: int = setting(1000, "Steps between checkpoints.", lower_bound=1)
    keep_checkpoints: int = setting(5, "Checkpoints to keep.", lower_bound=1)
    log_every: int = setting(100, "Steps between log lines.", lower_bound=1)
    eval_every: int = setting(1000, "Steps between dev evaluations.", lower_bound=1)
    dev_bleu_sentences: int = setting(
        None,
        "Dev sentences translated (greedy) for the periodic BLEU; default: all.",
        lower_bound=1,
    )
    keep_best: int = setting(
        0,
        "Also keep this many checkpoints with the highest dev BLEU, in "
        "MODEL_DIR/best/ (scores in best/scores.json).",
        lower_bound=0,
    )
    patience: int = setting(
        0,
        "Stop after this many dev evaluations without a better BLEU; 0 "
        "never stops early.",
        lower_bound=0,
    )
    max_nonfinite: int = setting(
        5,
        "A step whose loss or gradient norm is NaN or infinite is "
        "skipped (no update, counted as nonfinite_steps in TensorBoard); "
        "this many in a row stop training with an error naming the last "
        "good checkpoint.",
        lower_bound=1,
    )
    jit_compile: bool = setting(False, "XLA-compile the training step.")
    mixed_precision: str = setting(
        "auto",
        "Compute dtype, with float32 weights: bf16, fp16 (with loss "
        "scaling), none (float32), or auto: bf16 where this CPU's bf16 "
        "matmuls measure faster (see t2t_repro/training/precision.py), else "
        "float32.",
        choices=PRECISIONS,
    )
    allow_option_changes: bool = setting(
        False,
        "Resume even if batch_tokens, accum_steps, seed, "
        "shuffle_buffer, overlong, precision or the replica count changed "
        "(the data order then differs from an uninterrupted run).",
    )

    def __post_init__(self):
        if self.cooldown_steps > self.train_steps:
            raise ConfigError(
                f"--cooldown_steps={self.cooldown_steps} is longer than "
                f"--train_steps={self.train_steps}"
            )


@dataclasses.dataclass(frozen=True)
class DecodingOptions:
    """How to translate: the paper's beam search by default."""

    beam_size: int = setting(4, "Beam size (the paper: 4; 1 = greedy).", lower_bound=1)
    alpha: float = setting(
        0.6,
        "Length penalty exponent of ((5 + length) / 6) ** alpha (the paper: 0.6).",
        lower_bound=0.0,
    )
    extra_length: int = setting(
        EXTRA_DECODE_LENGTH,
        "An output may be this many subword tokens "
        "longer than its input (the paper: 50; 300 for parsing).",
        lower_bound=1,
        flag="extra_decode_length",
    )
    batch_tokens: int = setting(
        4096,
        "Padded source tokens per decoding batch.",
        lower_bound=1,
        flag="decode_batch_tokens",
    )
    jit_compile: bool = setting(
        False,
        "XLA-compile the decoder (once per batch shape). XLA needs "
        "fixed shapes, so its loops keep every sentence until the last "
        "ends, over cache buffers that double in stages; without it, "
        "finished sentences leave and the caches grow with the output, "
        "which is usually faster on a CPU (docs/performance.md).",
        flag="decode_jit_compile",
    )
    parallel_searches: int = setting(
        2,
        "Beam search splits each batch into this many searches that run "
        "side by side: oneDNN runs each of a step's small matmuls on one "
        "core, so one search leaves the others idle. "
        "Greedy search runs as one.",
        lower_bound=1,
        flag="decode_parallel_searches",
    )
    max_batch_sentences: int = setting(
        256,
        "Most sentences per decoding batch; an exported SavedModel "
        "refuses larger requests (InvalidArgument: clients split them).",
        lower_bound=1,
    )
    # Scoring, not decoding: a field here so that every tool that scores
    # (t2t-eval, t2t-train's dev and test sets) has the flag.
    sacrebleu_tokenize: str = setting(
        None,
        "sacreBLEU's tokenizer. Default from --target_lang: zh for zh, "
        "ja-mecab for ja and ko-mecab for ko (char, with a warning, without "
        "sacrebleu[ja] or sacrebleu[ko]), 13a for any other language or "
        "without --target_lang.",
        choices=tuple(sacrebleu.BLEU.TOKENIZERS),
    )


@dataclasses.dataclass(frozen=True)
class ServingLimits:
    """What one request to a t2t-export SavedModel may ask for. The export
    stores them (as variables of the same names) and its signatures refuse
    more with InvalidArgument, before tokenizing anything; a model in this
    process has no such limits (inference.TranslationGraph)."""

    max_beam_size: int = setting(
        16,
        "Largest beam_size a request to the export's translate "
        "signature may ask for: its memory grows with the beam.",
        lower_bound=1,
    )
    max_sentence_bytes: int = setting(
        4096,
        "Longest input string, in UTF-8 bytes, the export takes "
        "(checked before tokenization).",
        lower_bound=1,
    )
    max_request_bytes: int = setting(
        1 << 20,
        "Most bytes of input strings in one request to the export "
        "(with score, inputs and targets together).",
        lower_bound=1,
    )
    max_alpha: float = setting(
        10.0,
        "Largest alpha a request to the export's translate or score "
        "signature may give (alpha must also be finite and >= 0).",
        lower_bound=0.0,
    )

    def __post_init__(self):
        # Else a request of one sentence of the allowed size is refused,
        # and TF Serving's warm-up replay with it.
        if self.max_request_bytes < self.max_sentence_bytes:
            raise ConfigError(
                f"--max_request_bytes={self.max_request_bytes} is less than "
                f"--max_sentence_bytes={self.max_sentence_bytes}"
            )
        # The flag's bound lets NaN through, which would refuse every alpha.
        if not 0.0 <= self.max_alpha < float("inf"):
            raise ConfigError(
                f"--max_alpha={self.max_alpha} must be a finite number >= 0"
            )
