"""t2t-export: write a trained run as a SavedModel for TF Serving.

    t2t-export --model_dir=runs/multi30k --export_dir=exports/multi30k

writes `exports/multi30k/<version>/` (TF Serving's layout; the version is the
checkpoint's step unless --version is given). Its `serving_default`
signature maps `inputs` (tf.string [batch]) to `translations` and `scores`;
tokenization and detokenization are tensorflow-text ops in the graph.
"""

from absl import app, flags

from t2t_repro.decoding.decoding_flags import define_decoding_flags

flags.DEFINE_string("model_dir", None, "A t2t-train or t2t-average run.")
flags.DEFINE_string("checkpoint", None, "Checkpoint to export (default: the "
                    "run's latest).")
flags.DEFINE_string("export_dir", None, "Base directory of the model's "
                    "versions.")
flags.DEFINE_integer("version", None, "Version subdirectory (default: the "
                     "checkpoint's step).", lower_bound=0)
define_decoding_flags()  # --beam_size and --alpha: serving_default's
flags.DEFINE_bool("export_jit_compile", False,
                  "XLA-compile serving_default's decoder; TF Serving must "
                  "then run with --xla_cpu_compilation_enabled=true.")
flags.mark_flags_as_required(["model_dir", "export_dir"])

FLAGS = flags.FLAGS


def main(argv):
    del argv
    from t2t_repro.data import DataError
    from t2t_repro.serving import export_saved_model

    try:
        path = export_saved_model(
            FLAGS.model_dir, FLAGS.export_dir, FLAGS.version,
            FLAGS.checkpoint, FLAGS.beam_size, FLAGS.alpha,
            FLAGS.export_jit_compile)
    except (DataError, FileNotFoundError, FileExistsError) as error:
        raise app.UsageError(str(error)) from None
    print(path)


def run():
    app.run(main)


if __name__ == "__main__":
    run()
