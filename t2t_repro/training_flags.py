"""The flags of t2t-train, shared by the tools that read its flagfiles."""

from absl import flags

from t2t_repro import config as config_lib
from t2t_repro.data import sources
from t2t_repro.precision import PRECISIONS


def define_training_flags():
    """Every t2t-train flag (idempotent), so that other tools accept the
    same --flagfile."""
    if "train_steps" in flags.FLAGS:
        return
    config_lib.define_model_flags()
    config_lib.define_recipe_flags()
    sources.define_data_flags()

    flags.DEFINE_string("model_dir", None, "Run directory: checkpoints, "
                        "vocabulary, config and TensorBoard events.")
    flags.DEFINE_integer("train_steps", 100_000,
                         "Optimizer updates to reach.", lower_bound=1)
    flags.DEFINE_integer("batch_tokens", 4096, "Global source+target tokens "
                         "per micro-batch (padded).", lower_bound=2)
    flags.DEFINE_integer("accum_steps", 1, "Micro-batches summed per update.",
                         lower_bound=1)
    flags.DEFINE_enum("overlong", "drop", ["drop", "truncate"],
                      "What to do with pairs longer than --max_length.")
    flags.DEFINE_integer("shuffle_buffer", 100_000,
                         "Sentence-pair shuffle buffer.", lower_bound=1)
    flags.DEFINE_integer("seed", 0, "Seed for initialisation, dropout and "
                         "data order.")
    flags.DEFINE_integer("checkpoint_every", 1000,
                         "Steps between checkpoints.", lower_bound=1)
    flags.DEFINE_integer("keep_checkpoints", 5, "Checkpoints to keep.",
                         lower_bound=1)
    flags.DEFINE_integer("log_every", 100, "Steps between log lines.",
                         lower_bound=1)
    flags.DEFINE_integer("eval_every", 1000, "Steps between dev evaluations.",
                         lower_bound=1)
    flags.DEFINE_integer("dev_bleu_sentences", None,
                         "Dev sentences translated (greedy) for the periodic "
                         "BLEU; default: all.", lower_bound=1)
    flags.DEFINE_integer("average_last", 1, "Translate the test set with "
                         "the average of the last N checkpoints (the paper "
                         "averages 5), written to MODEL_DIR/average for "
                         "t2t-eval/t2t-export.", lower_bound=1)
    flags.DEFINE_integer("keep_best", 0, "Also keep this many checkpoints "
                         "with the highest dev BLEU, in MODEL_DIR/best/ "
                         "(scores in best/scores.json).", lower_bound=0)
    flags.DEFINE_integer("patience", 0, "Stop after this many dev "
                         "evaluations without a better BLEU; 0 never stops "
                         "early.", lower_bound=0)
    flags.DEFINE_integer("vocab_sample_pairs", 2_000_000,
                         "Training pairs read to learn the SentencePiece "
                         "model.", lower_bound=1)
    flags.DEFINE_enum("spm_model_type", "bpe", ["bpe", "unigram"],
                      "SentencePiece model type.")
    flags.DEFINE_bool("jit_compile", False, "XLA-compile the training step.")
    flags.DEFINE_enum("mixed_precision", "auto", list(PRECISIONS),
                      "Compute dtype, with float32 weights: bf16, fp16 (with "
                      "loss scaling), none (float32), or auto: bf16 where "
                      "this CPU's bf16 matmuls measure faster (see "
                      "t2t_repro/precision.py), else float32.")
    flags.DEFINE_bool("allow_option_changes", False, "Resume even if "
                      "batch_tokens, accum_steps, seed, shuffle_buffer, "
                      "overlong, precision or the replica count changed "
                      "(the data order then differs from an uninterrupted "
                      "run).")
    flags.DEFINE_integer("cpu_devices", 1, "Split the CPU into this many "
                         "logical devices and mirror over them.",
                         lower_bound=1)
    flags.register_multi_flags_validator(
        ["average_last", "keep_checkpoints"],
        lambda v: v["average_last"] <= v["keep_checkpoints"],
        message="--average_last cannot exceed --keep_checkpoints (the "
        "checkpoints it averages must still be there)")
