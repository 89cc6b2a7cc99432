"""t2t-average: average a run's last (or best) N checkpoints into a new
model_dir.

    t2t-average --model_dir=runs/base --output_dir=runs/base-avg5 \
        --num_checkpoints=5 [--select=best]

The paper averages the last 5 (base) or 20 (big) checkpoints. The output
is a model_dir of its own (config, vocabulary, one checkpoint named after
the newest step) that t2t-eval, t2t-translate and t2t-export take.
"""

from absl import app, flags

flags.DEFINE_string("model_dir", None, "The t2t-train run.")
flags.DEFINE_string("output_dir", None, "New model_dir for the average.")
flags.DEFINE_integer("num_checkpoints", 5, "How many checkpoints to "
                     "average.", lower_bound=1)
flags.DEFINE_enum("select", "last", ["last", "best"], "Average the newest "
                  "checkpoints, or those with the highest dev BLEU (kept by "
                  "t2t-train --keep_best).")
flags.mark_flags_as_required(["model_dir", "output_dir"])

FLAGS = flags.FLAGS


def main(argv):
    del argv
    from t2t_repro.averaging import average_checkpoints

    try:
        saved = average_checkpoints(FLAGS.model_dir, FLAGS.output_dir,
                                    FLAGS.num_checkpoints, FLAGS.select)
    except (ValueError, FileNotFoundError, FileExistsError) as error:
        raise app.UsageError(str(error)) from None
    print(saved)


def run():
    app.run(main)


if __name__ == "__main__":
    run()
