"""Every flag group of the command-line tools, each defined once.

Most flags are generated from the settings in `t2t_repro/config.py` (name,
default and help come from the dataclass field, and the values it takes are
checked by its class, `check_setting_flags`); the rest (data files, the run
directory, fine-tuning) are defined here. `define_*` functions are
idempotent, so a tool can take several groups that share flags; each marks
its flags as read by the tool, which shows them in its --help (`SHOWN`),
under the heading of its topic (`TOPICS`: a settings class's flags under
the class's, `SETTINGS_TOPICS`; a tool's own flags under the tool's name).
Imports neither TensorFlow nor the library's TensorFlow modules: `--help`
must stay fast. Over 300 lines: every group shared by several tools is
here, so that a flag is defined, and its help written, in one place.
"""

import dataclasses
import sys

from absl import flags

from t2t_repro import config as config_lib
from t2t_repro.config import ConfigError, bounds_text, flag_name, help_of
from t2t_repro.data import DataError

FLAGS = flags.FLAGS
SPLITS = ("train", "dev", "test")
_STACKS = ("num_encoder_layers", "num_decoder_layers")
# Names of this module's flags that the running tool reads: `common.run`
# lists them in its --help. A tool that takes a training flagfile defines
# every training flag (`accept_training_flagfiles`), most of them unread.
SHOWN: set[str] = set()

# The headings of a tool's --help, in their order there after the tool's
# own (its module's flags, under its name).
RUN_DIR = "Checkpoints and run directory"
DATA = "Data"
MODEL = "Model"
TRAINING = "Training"
FINE_TUNING = "Fine-tuning"
DECODING = "Decoding"
SERVING_LIMITS = "Serving limits"
TOPIC_ORDER = (RUN_DIR, DATA, MODEL, TRAINING, FINE_TUNING, DECODING, SERVING_LIMITS)
# The topic of each settings class's flags.
SETTINGS_TOPICS: dict[type[config_lib.Settings], str] = {
    config_lib.TransformerConfig: MODEL,
    config_lib.TrainingOptions: TRAINING,
    config_lib.DecodingOptions: DECODING,
    config_lib.ServingLimits: SERVING_LIMITS,
}
# {name: topic} of this module's flags: the heading --help lists it under.
TOPICS: dict[str, str] = {}


def _define(define, name, *args, topic, show=True, **kwargs):
    """`define(name, *args, **kwargs)` unless the flag exists (groups share
    flags), its --help heading `topic`; marks it shown unless `show` is
    false."""
    if name not in FLAGS:
        define(name, *args, **kwargs)
        TOPICS[name] = topic
    if show:
        SHOWN.add(name)


def _settings_topic(field):
    """The topic of the settings class `field` belongs to."""
    for settings_class, topic in SETTINGS_TOPICS.items():
        if any(field is own for own in dataclasses.fields(settings_class)):
            return topic
    raise ValueError(
        f"{field.name}: not a field of a settings class of "
        "SETTINGS_TOPICS (give its flag a topic)"
    )


class _IntegerSetting(flags.IntegerParser):
    """absl's parser of an integer setting, its --help stating the
    setting's bounds (`bounds_text`) but leaving them to
    `check_setting_flags`."""

    def __init__(self, bounds):
        super().__init__()
        if bounds:
            self.syntactic_help = f"an integer {bounds}"


class _NumberSetting(flags.FloatParser):
    """The same for a float setting."""

    def __init__(self, bounds):
        super().__init__()
        if bounds:
            self.syntactic_help = f"a number {bounds}"


def _define_number(name, default, help_text, parser):
    flags.DEFINE(
        parser, name, default, help_text, serializer=flags.ArgumentSerializer()
    )


def _define_setting(field, show, topic=None):
    """The flag of a settings field; under its class's topic unless
    `topic` is given. Its bounds are not absl's: `check_setting_flags`
    checks them as the settings class does; its --help states them."""
    meta = field.metadata
    name, default, help_text = flag_name(field), field.default, help_of(field)
    topic = topic or _settings_topic(field)
    if "choices" in meta:
        _define(
            flags.DEFINE_enum,
            name,
            default,
            list(meta["choices"]),
            help_text,
            topic=topic,
            show=show,
        )
    elif field.type is bool:
        _define(flags.DEFINE_bool, name, default, help_text, topic=topic, show=show)
    elif field.type in (int, float):
        parser = (_IntegerSetting if field.type is int else _NumberSetting)(
            bounds_text(field)
        )
        _define(
            _define_number, name, default, help_text, parser, topic=topic, show=show
        )
    else:
        _define(flags.DEFINE_string, name, default, help_text, topic=topic, show=show)


def define_settings(settings_class, show=True):
    """A flag for each field of `settings_class` that has help text."""
    for field in dataclasses.fields(settings_class):
        if "help" in field.metadata:
            _define_setting(field, show)


def check_setting_flags():
    """Raises ConfigError, with the message its settings class gives, for a
    settings flag whose value is out of its field's bounds or choices;
    `common.run` calls it right after parsing."""
    for settings_class in SETTINGS_TOPICS:
        settings_class.check(
            {
                field.name: FLAGS[flag_name(field)].value
                for field in dataclasses.fields(settings_class)
                if "help" in field.metadata and flag_name(field) in FLAGS
            }
        )


def settings_from_flags(settings_class, **overrides):
    """`settings_class` filled from the parsed flags, then `overrides`."""
    values = {
        field.name: FLAGS[flag_name(field)].value
        for field in dataclasses.fields(settings_class)
        if flag_name(field) in FLAGS
    }
    return settings_class(**{**values, **overrides})


# The run directory and its checkpoint ---------------------------------------


def define_model_dir(show=True):
    _define(
        flags.DEFINE_string,
        "model_dir",
        None,
        "Run directory: "
        "checkpoints, vocabulary, config and TensorBoard events "
        "(t2t-train or t2t-average).",
        topic=RUN_DIR,
        show=show,
    )


def define_checkpoint():
    define_model_dir()
    _define(
        flags.DEFINE_string,
        "checkpoint",
        None,
        "Checkpoint of --model_dir to use (default: the latest).",
        topic=RUN_DIR,
    )


# The model -----------------------------------------------------------------


def define_model_flags(show=True):
    """The `TransformerConfig` fields, and --num_layers for both stacks."""
    _define(
        flags.DEFINE_integer,
        "num_layers",
        None,
        "Encoder and decoder "
        "layers N (each); --num_encoder_layers/--num_decoder_layers "
        "override it.",
        lower_bound=1,
        topic=MODEL,
        show=show,
    )
    define_settings(config_lib.TransformerConfig, show)


def _depths_from_num_layers():
    """{stack: --num_layers} for the stacks whose own flag is not given."""
    if FLAGS.num_layers is None:
        return {}
    return {stack: FLAGS.num_layers for stack in _STACKS if not FLAGS[stack].present}


def model_config_from_flags(vocab_size=None):
    """The `TransformerConfig` the flags describe; raises ConfigError."""
    overrides = _depths_from_num_layers()
    if vocab_size is not None:
        overrides["vocab_size"] = vocab_size
    return settings_from_flags(config_lib.TransformerConfig, **overrides)


def _command_line_flag_names(argv):
    """Names of the flags in `argv` itself, not in its --flagfiles."""
    names = set()
    for arg in argv[1:]:
        if arg == "--":
            break
        if arg.startswith("-"):
            name = arg.lstrip("-").split("=", 1)[0]
            if name not in FLAGS and name[2:] in FLAGS:
                name = name[2:]  # --noflag
            names.add(name)
    return names


def model_flags_given(command_line_only=False):
    """{TransformerConfig field: value} of the model flags given, in a
    flagfile or on the command line (with `command_line_only`, on the
    command line itself); --num_layers counts for the stacks it sets."""
    given = (
        _command_line_flag_names(sys.argv)
        if command_line_only
        else {name for name in FLAGS if FLAGS[name].present}
    )
    values = {
        field.name: FLAGS[flag_name(field)].value
        for field in dataclasses.fields(config_lib.TransformerConfig)
        if flag_name(field) in given
    }
    if "num_layers" in given:
        values.update(_depths_from_num_layers())
    return values


def model_differences(given, config):
    """'d_model 256 != 512, ...': the `given` values (flag value first)
    that differ from `config`'s; empty if none."""
    return ", ".join(
        f"{name} {value} != {getattr(config, name)}"
        for name, value in given.items()
        if value != getattr(config, name)
    )


def check_command_line_model_flags(config, config_path):
    """Refuses a model flag given on the command line that differs from
    `config` (a run's config.json, which the tool uses instead of the
    flags): it would be silently ignored. A flagfile's model flags are not
    checked: a training recipe describes other runs too, and a run may
    have overridden it."""
    differences = model_differences(model_flags_given(command_line_only=True), config)
    if differences:
        raise ConfigError(
            f"the model is {config_path}'s, and the command "
            f"line's model flags differ: {differences}"
        )


# Data ----------------------------------------------------------------------


def define_data_flags(splits=SPLITS, show=True):
    """Flags naming the train/dev/test data; those of `splits` shown."""
    validate = "train_src" not in FLAGS  # the validators, once
    for split in SPLITS:
        shown = show and split in splits
        _define(
            flags.DEFINE_string,
            f"{split}_src",
            None,
            f"{split} source text file, one sentence a line (.gz allowed).",
            topic=DATA,
            show=shown,
        )
        _define(
            flags.DEFINE_string,
            f"{split}_tgt",
            None,
            f"{split} target text file, line-aligned with --{split}_src.",
            topic=DATA,
            show=shown,
        )
        _define(
            flags.DEFINE_string,
            f"tfds_{split}_split",
            {"dev": "validation"}.get(split, split),
            f"TFDS {split} split.",
            topic=DATA,
            show=shown,
        )
        _define(
            flags.DEFINE_string,
            f"{split}_trees",
            None,
            f"{split} treebank for the parsing task: one bracketed (Penn "
            "Treebank style) tree a line; words in, linearised trees "
            "out (t2t_repro/parsing.py).",
            topic=DATA,
            show=shown,
        )
    _define(
        flags.DEFINE_string,
        "tfds_name",
        None,
        "TFDS translation builder, e.g. wmt14_translate/de-en (used for "
        "splits without text files).",
        topic=DATA,
        show=show,
    )
    _define(
        flags.DEFINE_string,
        "source_lang",
        None,
        "Source language code, e.g. en (the TFDS direction).",
        topic=DATA,
        show=show,
    )
    _define(
        flags.DEFINE_string,
        "target_lang",
        None,
        "Target language "
        "code, e.g. de: the TFDS direction, and how BLEU tokenizes "
        "(German compounds, zh/ja/ko). flags/data/*.cfg set it.",
        topic=DATA,
        show=show,
    )
    _define(
        flags.DEFINE_string,
        "tfds_data_dir",
        None,
        "TFDS data directory.",
        topic=DATA,
        show=show,
    )
    _define(
        flags.DEFINE_string,
        "tfds_manual_dir",
        None,
        "Directory of manually downloaded TFDS archives.",
        topic=DATA,
        show=show,
    )
    if not validate:
        return
    for split in SPLITS:
        flags.register_multi_flags_validator(
            [f"{split}_src", f"{split}_tgt"],
            lambda values: len({v is None for v in values.values()}) == 1,
            message=f"--{split}_src and --{split}_tgt go together",
        )
        flags.register_multi_flags_validator(
            [f"{split}_src", f"{split}_trees"],
            lambda values: None in values.values(),
            message=f"--{split}_trees (parsing) or --{split}_src "
            "(translation), not both",
        )


def corpus_from_flags(split):
    """The `Corpus` for "train", "dev" or "test", or None if not given."""
    from t2t_repro.data.sources import Corpus

    if FLAGS[f"{split}_trees"].value:
        return Corpus(trees_path=FLAGS[f"{split}_trees"].value)
    languages = {"source_lang": FLAGS.source_lang, "target_lang": FLAGS.target_lang}
    if FLAGS[f"{split}_src"].value:
        return Corpus(
            source_path=FLAGS[f"{split}_src"].value,
            target_path=FLAGS[f"{split}_tgt"].value,
            **languages,
        )
    if FLAGS.tfds_name:
        if not (FLAGS.source_lang and FLAGS.target_lang):
            raise DataError(
                f"--tfds_name={FLAGS.tfds_name} needs "
                "--source_lang and --target_lang (the "
                "direction, e.g. en and de)"
            )
        return Corpus(
            tfds_name=FLAGS.tfds_name,
            tfds_split=FLAGS[f"tfds_{split}_split"].value,
            tfds_data_dir=FLAGS.tfds_data_dir,
            tfds_manual_dir=FLAGS.tfds_manual_dir,
            **languages,
        )
    return None


# Training ------------------------------------------------------------------


def define_training_flags(show=True):
    """Every t2t-train flag."""
    validate = "train_steps" not in FLAGS  # the validator, once
    define_model_flags(show)
    define_data_flags(show=show)
    define_model_dir(show)
    define_settings(config_lib.TrainingOptions, show)
    define_decoding_flags(show)  # how the test set is decoded after training
    _define(
        flags.DEFINE_integer,
        "average_last",
        1,
        "Translate the test "
        "set with the average of the last N checkpoints (the paper "
        "averages 5), written to MODEL_DIR/average for "
        "t2t-eval/t2t-export.",
        lower_bound=1,
        topic=RUN_DIR,
        show=show,
    )
    _define(
        flags.DEFINE_integer,
        "vocab_sample_pairs",
        2_000_000,
        "Training pairs read to learn the SentencePiece model.",
        lower_bound=1,
        topic=DATA,
        show=show,
    )
    _define(
        flags.DEFINE_enum,
        "spm_model_type",
        "bpe",
        ["bpe", "unigram"],
        "SentencePiece model type.",
        topic=DATA,
        show=show,
    )
    _define(
        flags.DEFINE_integer,
        "cpu_devices",
        1,
        "Split the CPU into this many logical devices and mirror over them.",
        lower_bound=1,
        topic=TRAINING,
        show=show,
    )
    _define(
        flags.DEFINE_float,
        "collective_timeout",
        0.0,
        "With several workers (TF_CONFIG): seconds a step waits for the "
        "other workers before training ends with an error naming the "
        "latest checkpoint (0: waits for ever). Set it above the slowest "
        "step, evaluation and checkpoint.",
        lower_bound=0.0,
        topic=TRAINING,
        show=show,
    )
    _define(
        flags.DEFINE_string,
        "init_from",
        None,
        "Fine-tune: start a "
        "new run from another run's weights, RUN_DIR (its latest "
        "checkpoint) or RUN_DIR/ckpt-N. Its config.json and spm.model "
        "are copied into --model_dir (a model flag that differs is "
        "refused); the optimizer and the learning-rate schedule start "
        "afresh at step 0. The source is only read. Ignored once "
        "--model_dir has checkpoints: the run resumes from them "
        "(docs/fine_tuning.md).",
        topic=FINE_TUNING,
        show=show,
    )
    _define(
        flags.DEFINE_bool,
        "init_optimizer_slots",
        False,
        "With "
        "--init_from, also take the source checkpoint's Adam moments; "
        "the step, and so the learning-rate schedule, still start at "
        "0.",
        topic=FINE_TUNING,
        show=show,
    )
    if validate:
        flags.register_multi_flags_validator(
            ["average_last", "keep_checkpoints"],
            lambda v: v["average_last"] <= v["keep_checkpoints"],
            message="--average_last cannot exceed --keep_checkpoints (the "
            "checkpoints it averages must still be there)",
        )
        flags.register_multi_flags_validator(
            ["init_optimizer_slots", "init_from"],
            lambda v: not v["init_optimizer_slots"] or v["init_from"],
            message="--init_optimizer_slots takes the Adam moments of "
            "--init_from's checkpoint: give --init_from",
        )


def accept_training_flagfiles():
    """Defines every t2t-train flag without showing it: a tool that takes
    a training flagfile (t2t-eval, t2t-summary) parses all of it, and its
    --help lists only the flags it reads."""
    define_training_flags(show=False)


# Decoding ------------------------------------------------------------------


def define_precision():
    _define(
        flags.DEFINE_enum,
        "precision",
        "fp32",
        list(config_lib.DECODING_PRECISIONS),
        "Decode with float32 weights and matmuls, or bf16 ones (softmax, "
        "LayerNorm and scores computed in float32): faster where bf16 "
        "matmuls are faster (AMX, avx512_bf16), at some rounding of "
        "the scores; auto: bf16 where this machine's bf16 matmuls run "
        f"at least {config_lib.BF16_DECODING_SPEEDUP:g}x float32, "
        "measured at start-up "
        "(docs/translating.md#bf16-decoding).",
        topic=DECODING,
    )


def define_decoding_flags(show=True):
    """The `DecodingOptions` fields: --beam_size, --alpha, ..."""
    define_settings(config_lib.DecodingOptions, show)


def decoding_from_flags():
    return settings_from_flags(config_lib.DecodingOptions)
