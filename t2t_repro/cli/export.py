r"""t2t-export: write a trained run as a SavedModel for TF Serving, or as a
CTranslate2 model.

    t2t-export --model_dir=runs/multi30k --export_dir=exports/multi30k
    t2t-export --model_dir=runs/multi30k --format=ctranslate2 \
        --export_dir=exports/multi30k-ct2 [--quantization=int8]

writes `exports/multi30k/<version>/` (TF Serving's layout; the version is the
checkpoint's step unless --version is given), with warm-up requests in
`assets.extra/` that the model server replays before it serves, and the
decoding settings its graph holds in `assets.extra/t2t_decoding.json`.
Its `serving_default` signature maps `inputs` (tf.string [batch]) to
`translations`, `scores` and `truncated`; the `translate` (n-best) and
`score` signatures are there too.
Tokenization and detokenization are tensorflow-text ops in the graph.
--format=ctranslate2 (the `[ct2]` extra) writes a CTranslate2 model
directory to --export_dir itself, for `t2t-translate --ctranslate2=DIR`.
"""

import dataclasses

from absl import flags

from t2t_repro.cli import common
from t2t_repro.cli.flags import (
    decoding_from_flags,
    define_checkpoint,
    define_decoding_flags,
    define_precision,
    define_settings,
    settings_from_flags,
)
from t2t_repro.config import (
    CT2_QUANTIZATIONS,
    DEFAULT_WARMUP_REQUESTS,
    ConfigError,
    DecodingOptions,
    ServingLimits,
    flag_name,
)

define_checkpoint()
flags.DEFINE_string("export_dir", None, "Base directory of the model's versions.")
flags.DEFINE_integer(
    "version",
    None,
    "Version subdirectory (default: the checkpoint's step).",
    lower_bound=0,
)
define_decoding_flags()  # serving_default's --beam_size, --alpha, ...
define_settings(ServingLimits)  # --max_beam_size, ...: what a request may ask
define_precision()  # the SavedModel's; CTranslate2 has --quantization
flags.DEFINE_enum(
    "format",
    "saved_model",
    ["saved_model", "ctranslate2"],
    "saved_model: a TF Serving version directory; "
    "ctranslate2: a CTranslate2 model (pip install -e "
    "'.[ct2]').",
)
flags.DEFINE_enum(
    "quantization",
    None,
    list(CT2_QUANTIZATIONS),
    "CTranslate2 weight type (default float32); only with --format=ctranslate2.",
)
flags.DEFINE_integer(
    "warmup_requests",
    DEFAULT_WARMUP_REQUESTS,
    "Warm-up requests written to assets.extra/ for TF "
    "Serving to replay at load time (one sentence each, "
    "bucket widths from shortest to longest); 0: none.",
    lower_bound=0,
    upper_bound=1000,
)
flags.mark_flags_as_required(["model_dir", "export_dir"])
flags.register_multi_flags_validator(
    ["format", "quantization"],
    lambda f: f["quantization"] is None or f["format"] == "ctranslate2",
    message="--quantization is for --format=ctranslate2",
)
flags.register_multi_flags_validator(
    ["format", "version"],
    lambda f: f["version"] is None or f["format"] == "saved_model",
    message="--version is for SavedModels (TF Serving's version directories); "
    "--format=ctranslate2 writes the model into --export_dir itself",
)
flags.register_multi_flags_validator(
    ["format", "precision"],
    lambda f: f["precision"] == "fp32" or f["format"] == "saved_model",
    message="--precision is for SavedModels; --format=ctranslate2 has --quantization",
)

FLAGS = flags.FLAGS


# DecodingOptions' fields that are the translating tools' alone, not
# written into either format; every other one a SavedModel's graph holds.
_TRANSLATING_ONLY = ("batch_tokens", "sacrebleu_tokenize")


def _saved_model_flags_given():
    """The given flags of settings only a SavedModel holds: a CTranslate2
    model is weights and a vocabulary, its translator takes the decoding
    settings, and nothing limits or warms up its requests."""
    fields = dataclasses.fields(DecodingOptions)
    names = [flag_name(f) for f in fields if f.name not in _TRANSLATING_ONLY]
    names += [flag_name(field) for field in dataclasses.fields(ServingLimits)]
    names.append("warmup_requests")
    return [name for name in names if FLAGS[name].present]


def main():
    if FLAGS.format == "ctranslate2":
        given = _saved_model_flags_given()
        if given:
            raise ConfigError(
                ", ".join(f"--{name}" for name in given)
                + ": a SavedModel's settings, which a CTranslate2 model does not "
                "hold; give the decoding flags to t2t-translate --ctranslate2"
            )
        from t2t_repro.ct2 import export_ctranslate2

        print(
            export_ctranslate2(
                FLAGS.model_dir, FLAGS.export_dir, FLAGS.checkpoint, FLAGS.quantization
            )
        )
        return
    from t2t_repro.serving import export_saved_model

    print(
        export_saved_model(
            FLAGS.model_dir,
            FLAGS.export_dir,
            FLAGS.version,
            FLAGS.checkpoint,
            decoding_from_flags(),
            FLAGS.warmup_requests,
            limits=settings_from_flags(ServingLimits),
            precision=FLAGS.precision,
        )
    )


def run():
    common.run(main)


if __name__ == "__main__":  # python -m t2t_repro.cli.export
    run()
