"""Every setting of the pipeline, each written once.

A setting is a dataclass field (`setting`): its default, its help text, the
values it takes (bounds, choices) and whether it decides the training data
order live here and nowhere else. The command-line tools generate their
flags from these fields (`t2t_repro/cli/flags.py`), so a flag's name,
default and help are the field's, and a value out of bounds is refused by
`Settings.check` with one message, in Python and as a flag. Four groups:
`TransformerConfig` (the model's shape; saved as MODEL_DIR/config.json),
`TrainingOptions` (how to train; MODEL_DIR/training.json), `DecodingOptions`
(how to translate) and `ServingLimits` (what one request to an exported
SavedModel may ask). The module imports neither TensorFlow nor absl, so
`--help` stays fast. It is over 300 lines because each setting's help is
the documentation of its flag, kept beside its default and bounds, and
the checks every setting shares come first.
"""

import dataclasses
import math
import os
import sys
from typing import ClassVar

import sacrebleu

# Fixed ids of the shared SentencePiece vocabulary (see data/vocabulary.py).
PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3


class ConfigError(ValueError):
    """Settings that cannot work together; the message names them."""


class MissingExtraError(ImportError):
    """An optional feature whose extra is not installed; the message says
    how to install it."""


def setting(
    default,
    help,
    *,
    choices=None,
    lower_bound=None,
    upper_bound=None,
    below=None,
    flag=None,
    data_order=False,
):
    """A dataclass field that is also a command-line flag.

    `help`: the flag's help, or a function returning it (a help made from
    other settings). The value must be one of `choices`, >= `lower_bound`,
    <= `upper_bound` and < `below` (`Settings.check`). `flag`: the flag's
    name, where it differs from the field's. `data_order`: the value
    decides which batches a training step sees, so a resume with another
    is refused (`DATA_ORDER_OPTIONS`).
    """
    if upper_bound is not None and below is not None:
        raise ValueError("give upper_bound or below, not both")
    metadata = {
        "help": help,
        "choices": choices,
        "lower_bound": lower_bound,
        "upper_bound": upper_bound,
        "below": below,
        "flag": flag,
        "data_order": data_order or None,
    }
    return dataclasses.field(
        default=default,
        metadata={key: value for key, value in metadata.items() if value is not None},
    )


def flag_name(field):
    """The name of a setting's flag."""
    return field.metadata.get("flag", field.name)


def help_of(field):
    """A setting's help text."""
    help = field.metadata["help"]
    return help() if callable(help) else help


def _number(bound):
    return f"{bound:g}" if isinstance(bound, float) else str(bound)


def bounds_text(field):
    """'>= 1', 'in [0, 1)', ...: the range a setting's value must be in;
    None if it has no bounds."""
    meta = field.metadata
    low = meta.get("lower_bound")
    if "upper_bound" in meta:
        high, closed = meta["upper_bound"], "]"
    else:
        high, closed = meta.get("below"), ")"
    if low is not None and high is not None:
        return f"in [{_number(low)}, {_number(high)}{closed}"
    if low is not None:
        return f">= {_number(low)}"
    if high is not None:
        return f"{'<=' if closed == ']' else '<'} {_number(high)}"
    return None


# A setting's type, and the Python values it takes: an int for a float
# (a caller or a hand-edited config.json may write 1 for 1.0), never a
# bool for a number (True == 1).
_TAKES = {
    bool: lambda value: isinstance(value, bool),
    int: lambda value: isinstance(value, int) and not isinstance(value, bool),
    float: lambda value: (
        isinstance(value, (int, float)) and not isinstance(value, bool)
    ),
    str: lambda value: isinstance(value, str),
}


def type_problem(field, value):
    """ "d_model='512' must be int, not str", or None. Python callers and
    hand-edited JSON (config.json) meet it: the flags parse to their
    setting's type. None is taken where it is the default, a setting's
    "not given" (e.g. --dev_bleu_sentences), or there is none (model_dir,
    which the tools require as a flag)."""
    if value is None:
        if field.default is None or field.default is dataclasses.MISSING:
            return None
    elif _TAKES[field.type](value):
        return None
    return (
        f"{field.name}={value!r} must be {field.type.__name__}, not "
        f"{type(value).__name__}"
    )


def value_problem(field, value):
    """'--train_steps=0 must be >= 1': what is wrong with `value` for the
    setting `field` (not of its type, outside its bounds or choices); None
    if nothing."""
    meta = field.metadata
    if problem := type_problem(field, value):
        return problem
    if value is None:
        return None
    given = f"--{flag_name(field)}={value}"
    if "choices" in meta and value not in meta["choices"]:
        return f"{given} must be one of {', '.join(meta['choices'])}"
    low, high, below = (meta.get(k) for k in ("lower_bound", "upper_bound", "below"))
    # Written so that NaN, which compares false with everything, is refused.
    inside = (
        (low is None or value >= low)
        and (high is None or value <= high)
        and (below is None or value < below)
    )
    return None if inside else f"{given} must be {bounds_text(field)}"


class Settings:
    """The settings classes' checks: a value outside its field's bounds or
    choices is refused when the settings are made, with the message the
    command-line tools give for the same flag value (they run `check` on
    the parsed flags, `cli/flags.check_setting_flags`), together with what
    `combination_problems` finds wrong with the fields together."""

    # Leads the ConfigError's message.
    error_lead: ClassVar[str] = ""
    # Every subclass is a dataclass (this tells a type checker so).
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field]]

    def __post_init__(self):
        # Not imported here: the tools' --help does not wait for NumPy, and
        # a NumPy value exists only once something imported it.
        numpy = sys.modules.get("numpy")
        values = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            # A NumPy scalar (a value read from an array) becomes its Python
            # value: the settings are written as JSON, which has no NumPy types.
            if numpy is not None and isinstance(value, numpy.generic):
                value = value.item()
                object.__setattr__(self, field.name, value)
            elif isinstance(value, os.PathLike) and field.type is str:
                value = os.fspath(value)
                object.__setattr__(self, field.name, value)
            values[field.name] = value
        # A value of the wrong type would break the combinations' arithmetic.
        typed = not any(
            type_problem(field, values[field.name])
            for field in dataclasses.fields(self)
        )
        self.check(values, self.combination_problems() if typed else [])

    def combination_problems(self):
        """What is wrong with the fields together, one message each (a
        field may be out of its own bounds here: that is reported too)."""
        return []

    @classmethod
    def check(cls, values, problems=()):
        """Raises ConfigError naming each of `values` ({field name: value})
        that its field refuses, then each of `problems`."""
        found = [
            problem
            for field in dataclasses.fields(cls)
            if field.name in values
            and (problem := value_problem(field, values[field.name]))
        ]
        found += problems
        if found:
            raise ConfigError(cls.error_lead + "; ".join(found))


PRECISIONS = ("auto", "fp32", "bf16", "fp16")
# Decoding's --precision (decoding/precision.py), and how much faster than
# float32 bf16 matmuls must run for "auto" to decode in bf16: a beam step
# of a small model is only partly matmuls, and bf16 adds casts, so
# decoding gains a part of the matmuls' speed-up
# (docs/translating.md#bf16-decoding); the margin above 1 is for the casts.
DECODING_PRECISIONS = ("fp32", "bf16", "auto")
BF16_DECODING_SPEEDUP = 1.5

# The paper: maximum output length = input length + 50 (+ 300 for parsing).
EXTRA_DECODE_LENGTH = 50
# Warm-up requests t2t-export writes for TF Serving to replay at load time.
DEFAULT_WARMUP_REQUESTS = 8
# Weight types of a CTranslate2 export besides its default, float32.
CT2_QUANTIZATIONS = ("int8", "int16", "float16")


@dataclasses.dataclass(frozen=True)
class TransformerConfig(Settings):
    """Everything that determines the Transformer's shape and regularisation."""

    error_lead: ClassVar[str] = "invalid Transformer config: "

    vocab_size: int = setting(
        8000,
        "Shared source+target subword vocabulary size (pad, unk, bos and "
        "eos included).",
        lower_bound=4,
    )
    d_model: int = setting(512, "Model width.", lower_bound=1)
    num_heads: int = setting(8, "Attention heads h.", lower_bound=1)
    key_dim: int = setting(
        0, "Per-head query/key depth d_k (0: d_model / num_heads).", lower_bound=0
    )
    value_dim: int = setting(
        0, "Per-head value depth d_v (0: d_model / num_heads).", lower_bound=0
    )
    d_ff: int = setting(2048, "Feed-forward inner width.", lower_bound=1)
    num_encoder_layers: int = setting(
        6, "Encoder layers (default: --num_layers).", lower_bound=1
    )
    num_decoder_layers: int = setting(
        6, "Decoder layers (default: --num_layers).", lower_bound=1
    )
    dropout: float = setting(
        0.1, "Residual and embedding dropout.", lower_bound=0.0, below=1.0
    )
    attention_dropout: float = setting(
        0.0, "Dropout on attention weights.", lower_bound=0.0, below=1.0
    )
    relu_dropout: float = setting(
        0.0, "Dropout inside the feed-forward network.", lower_bound=0.0, below=1.0
    )
    source_word_dropout: float = setting(
        0.0,
        "Dropout of whole source tokens: a token's embedding (not its "
        "position) is zeroed with this probability.",
        lower_bound=0.0,
        below=1.0,
    )
    layer_dropout: float = setting(
        0.0,
        "Stochastic depth: in training, each encoder and decoder layer is "
        "skipped for a sentence with this probability (needs --pre_norm).",
        lower_bound=0.0,
        below=1.0,
    )
    position_encoding: str = setting(
        "sinusoidal", "Position encoding.", choices=("sinusoidal", "learned")
    )
    max_length: int = setting(
        256, "Longest sequence in subword tokens (with EOS).", lower_bound=1
    )
    pre_norm: bool = setting(
        False, "Pre-norm residual blocks instead of the paper's post-norm."
    )

    def combination_problems(self):
        problems = []
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
        if self.layer_dropout and not self.pre_norm:
            problems.append(
                f"layer_dropout={self.layer_dropout} needs pre_norm (a "
                "post-norm layer normalises even a skipped layer's output)"
            )
        return problems

    @property
    def head_dims(self):
        """(d_k, d_v) of every attention head."""
        return (
            self.key_dim or self.d_model // self.num_heads,
            self.value_dim or self.d_model // self.num_heads,
        )

    @property
    def max_positions(self):
        """The longest sequence the position encoding allows (None: any)."""
        if self.position_encoding == "learned":
            return self.max_length
        return None


@dataclasses.dataclass(frozen=True)
class TrainingOptions(Settings):
    """How to train; the model's shape is in `TransformerConfig`.

    `model_dir` has no flag of its own here: every tool shares one
    --model_dir (cli/flags.py).
    """

    model_dir: str
    train_steps: int = setting(100_000, "Optimizer updates to reach.", lower_bound=1)
    batch_tokens: int = setting(
        4096,
        "Global source+target tokens per micro-batch (padded).",
        lower_bound=2,
        data_order=True,
    )
    accum_steps: int = setting(
        1, "Micro-batches summed per update.", lower_bound=1, data_order=True
    )
    label_smoothing: float = setting(
        0.1, "Label smoothing epsilon_ls.", lower_bound=0.0, upper_bound=0.999
    )
    rdrop_weight: float = setting(
        0.0,
        "R-Drop (Liang et al., 2021; fairseq's --rdrop-alpha): every "
        "micro-batch runs through the model twice, under two dropout "
        "masks, and a target token's loss becomes the mean cross-entropy "
        "of the two passes plus this weight / 4 times KL(p||q) + KL(q||p) "
        "of their predictions. 0 = off. A step then computes twice its "
        "tokens: halve --batch_tokens to keep its cost.",
        lower_bound=0.0,
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
        data_order=True,
    )
    shuffle_buffer: int = setting(
        100_000, "Sentence-pair shuffle buffer.", lower_bound=1, data_order=True
    )
    seed: int = setting(
        0, "Seed for initialisation, dropout and data order.", data_order=True
    )
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
    cpu_kernels: str = setting(
        "auto",
        "LayerNorm, attention weights, dropout and the loss of a training "
        "step on CPUs: auto = C++ "
        "kernels (one pass over the activations each way) built on first "
        "use with the system's C++ compiler against the installed "
        "TensorFlow, TensorFlow ops where they cannot be built, on GPUs "
        "or with --jit_compile; tf = TensorFlow ops (the loss XLA-"
        "compiled). The same functions either way.",
        choices=("auto", "tf"),
    )
    mixed_precision: str = setting(
        "auto",
        "Compute dtype, with float32 weights: fp32, bf16, fp16 (with loss "
        "scaling), or auto: bf16 where this CPU's bf16 matmuls measure "
        "faster (see t2t_repro/training/precision.py), else fp32.",
        choices=PRECISIONS,
        # Not which batches a step sees but how it computes on them.
        data_order=True,
    )
    allow_option_changes: bool = setting(
        False,
        lambda: (
            "Resume even if "
            + ", ".join(f"--{flag_name(field)}" for field in _data_order_fields())
            + " or the replica or worker count changed (the data order then "
            "differs "
            "from an uninterrupted run)."
        ),
    )

    def combination_problems(self):
        if self.cooldown_steps > self.train_steps:
            return [
                f"--cooldown_steps={self.cooldown_steps} is longer than "
                f"--train_steps={self.train_steps}"
            ]
        return []


def _data_order_fields():
    fields = dataclasses.fields(TrainingOptions)
    return [field for field in fields if "data_order" in field.metadata]


# What decides which batches a step sees (or how it computes them), as
# training.json records it: resuming with another value silently changes
# the run's data order. "replicas" and "input_pipelines" (one per worker
# process, each reading its shard of the data) are counts, not settings.
DATA_ORDER_OPTIONS = (
    *(field.name for field in _data_order_fields()),
    "replicas",
    "input_pipelines",
)


@dataclasses.dataclass(frozen=True)
class DecodingOptions(Settings):
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
        "which was faster where both were measured with the decoding "
        "threads (docs/performance.md); an XLA decoder keeps TensorFlow's "
        "default threads per op. An export's XLA decoder runs in TF "
        "Serving only with "
        "--xla_cpu_compilation_enabled=true.",
        flag="decode_jit_compile",
    )
    parallel_searches: int = setting(
        2,
        "Each batch is split into this many searches that run side by "
        "side, each on its share of the cores: a decoding step's ops are too "
        "small to use several cores well.",
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
class ServingLimits(Settings):
    """What one request to a t2t-export SavedModel may ask for. The export
    stores them (as variables of the same names) and its signatures refuse
    more with InvalidArgument, before tokenizing anything; a model in this
    process has no such limits (inference.graph.TranslationGraph)."""

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
        below=math.inf,
    )

    def combination_problems(self):
        # Else a request of one sentence of the allowed size is refused,
        # and TF Serving's warm-up replay with it.
        if self.max_request_bytes < self.max_sentence_bytes:
            return [
                f"--max_request_bytes={self.max_request_bytes} is less than "
                f"--max_sentence_bytes={self.max_sentence_bytes}"
            ]
        return []
