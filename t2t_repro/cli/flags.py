"""Every flag group of the command-line tools, each defined once.

Most flags are generated from the settings in `t2t_repro/config.py` (name,
default and help come from the dataclass field); the rest (data files, the
run directory) are defined here. `define_*` functions are idempotent, so a
tool can take several groups that share flags. Imports neither TensorFlow
nor the library's TensorFlow modules: `--help` must stay fast.
"""

import dataclasses

from absl import flags

from t2t_repro import config as config_lib
from t2t_repro.data import DataError

FLAGS = flags.FLAGS
SPLITS = ("train", "dev", "test")


def flag_name(field):
    return field.metadata.get("flag", field.name)


def _define_setting(field):
    meta = field.metadata
    name, default, help_text = flag_name(field), field.default, meta["help"]
    bounds = {k: meta[k] for k in ("lower_bound", "upper_bound") if k in meta}
    if "choices" in meta:
        flags.DEFINE_enum(name, default, list(meta["choices"]), help_text)
    elif field.type is bool:
        flags.DEFINE_bool(name, default, help_text)
    elif field.type is int:
        flags.DEFINE_integer(name, default, help_text, **bounds)
    elif field.type is float:
        flags.DEFINE_float(name, default, help_text, **bounds)
    else:
        flags.DEFINE_string(name, default, help_text)


def define_settings(settings_class):
    """A flag for each field of `settings_class` that has help text."""
    for field in dataclasses.fields(settings_class):
        if "help" in field.metadata and flag_name(field) not in FLAGS:
            _define_setting(field)


def settings_from_flags(settings_class, **overrides):
    """`settings_class` filled from the parsed flags, then `overrides`."""
    values = {field.name: FLAGS[flag_name(field)].value
              for field in dataclasses.fields(settings_class)
              if flag_name(field) in FLAGS}
    return settings_class(**{**values, **overrides})


# The run directory and its checkpoint ---------------------------------------

def define_model_dir(help_text="Run directory: checkpoints, vocabulary, "
                     "config and TensorBoard events (t2t-train or "
                     "t2t-average)."):
    if "model_dir" not in FLAGS:
        flags.DEFINE_string("model_dir", None, help_text)


def define_checkpoint():
    define_model_dir()
    if "checkpoint" not in FLAGS:
        flags.DEFINE_string("checkpoint", None, "Checkpoint of --model_dir "
                            "to use (default: the latest).")


# The model -----------------------------------------------------------------

def define_model_flags():
    """The `TransformerConfig` fields, and --num_layers for both stacks."""
    if "num_layers" in FLAGS:
        return
    flags.DEFINE_integer("num_layers", None, "Encoder and decoder layers N "
                         "(each); --num_encoder_layers/--num_decoder_layers "
                         "override it.", lower_bound=1)
    define_settings(config_lib.TransformerConfig)


def model_config_from_flags(vocab_size=None):
    """The `TransformerConfig` the flags describe; raises ConfigError."""
    depth = {}
    for stack in ("num_encoder_layers", "num_decoder_layers"):
        if not FLAGS[stack].present and FLAGS.num_layers is not None:
            depth[stack] = FLAGS.num_layers
    if vocab_size is not None:
        depth["vocab_size"] = vocab_size
    return settings_from_flags(config_lib.TransformerConfig, **depth)


# Data ----------------------------------------------------------------------

def define_data_flags():
    """Flags naming the train/dev/test data."""
    if "train_src" in FLAGS:
        return
    for split in SPLITS:
        flags.DEFINE_string(f"{split}_src", None,
                            f"{split} source text file, one sentence a line "
                            "(.gz allowed).")
        flags.DEFINE_string(f"{split}_tgt", None,
                            f"{split} target text file, line-aligned with "
                            f"--{split}_src.")
    flags.DEFINE_string("tfds_name", None,
                        "TFDS translation builder, e.g. wmt14_translate/de-en"
                        " (used for splits without text files).")
    flags.DEFINE_string("tfds_train_split", "train", "TFDS training split.")
    flags.DEFINE_string("tfds_dev_split", "validation", "TFDS dev split.")
    flags.DEFINE_string("tfds_test_split", "test", "TFDS test split.")
    flags.DEFINE_string("source_lang", None, "Source language code, e.g. "
                        "en (the TFDS direction).")
    flags.DEFINE_string("target_lang", None, "Target language code, e.g. "
                        "de: the TFDS direction, and how BLEU tokenizes "
                        "(German compounds, zh/ja/ko). flags/data/*.cfg "
                        "set it.")
    flags.DEFINE_string("tfds_data_dir", None, "TFDS data directory.")
    flags.DEFINE_string("tfds_manual_dir", None,
                        "Directory of manually downloaded TFDS archives.")
    for split in SPLITS:
        flags.DEFINE_string(f"{split}_trees", None,
                            f"{split} treebank for the parsing task: one "
                            "bracketed (Penn Treebank style) tree a line; "
                            "words in, linearised trees out "
                            "(t2t_repro/parsing.py).")
    for split in SPLITS:
        flags.register_multi_flags_validator(
            [f"{split}_src", f"{split}_tgt"],
            lambda values: len({v is None for v in values.values()}) == 1,
            message=f"--{split}_src and --{split}_tgt go together")
        flags.register_multi_flags_validator(
            [f"{split}_src", f"{split}_trees"],
            lambda values: None in values.values(),
            message=f"--{split}_trees (parsing) or --{split}_src "
            "(translation), not both")


def corpus_from_flags(split):
    """The `Corpus` for "train", "dev" or "test", or None if not given."""
    from t2t_repro.data.sources import Corpus

    if FLAGS[f"{split}_trees"].value:
        return Corpus(trees_path=FLAGS[f"{split}_trees"].value)
    languages = {"source_lang": FLAGS.source_lang,
                 "target_lang": FLAGS.target_lang}
    if FLAGS[f"{split}_src"].value:
        return Corpus(source_path=FLAGS[f"{split}_src"].value,
                      target_path=FLAGS[f"{split}_tgt"].value, **languages)
    if FLAGS.tfds_name:
        if not (FLAGS.source_lang and FLAGS.target_lang):
            raise DataError(f"--tfds_name={FLAGS.tfds_name} needs "
                            "--source_lang and --target_lang (the "
                            "direction, e.g. en and de)")
        return Corpus(tfds_name=FLAGS.tfds_name,
                      tfds_split=FLAGS[f"tfds_{split}_split"].value,
                      tfds_data_dir=FLAGS.tfds_data_dir,
                      tfds_manual_dir=FLAGS.tfds_manual_dir, **languages)
    return None


# Training ------------------------------------------------------------------

def define_training_flags():
    """Every t2t-train flag, so that the tools that read a training
    flagfile (t2t-eval, t2t-summary) accept all of it."""
    if "train_steps" in FLAGS:
        return
    define_model_flags()
    define_data_flags()
    define_model_dir()
    define_settings(config_lib.TrainingOptions)
    define_decoding_flags()  # how the test set is decoded after training
    flags.DEFINE_integer("average_last", 1, "Translate the test set with "
                         "the average of the last N checkpoints (the paper "
                         "averages 5), written to MODEL_DIR/average for "
                         "t2t-eval/t2t-export.", lower_bound=1)
    flags.DEFINE_integer("vocab_sample_pairs", 2_000_000,
                         "Training pairs read to learn the SentencePiece "
                         "model.", lower_bound=1)
    flags.DEFINE_enum("spm_model_type", "bpe", ["bpe", "unigram"],
                      "SentencePiece model type.")
    flags.DEFINE_integer("cpu_devices", 1, "Split the CPU into this many "
                         "logical devices and mirror over them.",
                         lower_bound=1)
    flags.register_multi_flags_validator(
        ["average_last", "keep_checkpoints"],
        lambda v: v["average_last"] <= v["keep_checkpoints"],
        message="--average_last cannot exceed --keep_checkpoints (the "
        "checkpoints it averages must still be there)")


# Decoding ------------------------------------------------------------------

def define_decoding_flags():
    """The `DecodingOptions` fields: --beam_size, --alpha, ..."""
    define_settings(config_lib.DecodingOptions)


def decoding_from_flags():
    return settings_from_flags(config_lib.DecodingOptions)
