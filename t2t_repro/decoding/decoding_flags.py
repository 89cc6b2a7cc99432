"""The decoding flags t2t-translate, t2t-eval and t2t-export share."""

from absl import flags


def define_decoding_flags():
    """--beam_size, --alpha, --decode_batch_tokens, --decode_jit_compile."""
    if "beam_size" in flags.FLAGS:
        return
    flags.DEFINE_integer("beam_size", 4, "Beam size (the paper: 4; 1 = "
                         "greedy).", lower_bound=1)
    flags.DEFINE_float("alpha", 0.6, "Length penalty exponent of "
                       "((5 + length) / 6) ** alpha (the paper: 0.6).",
                       lower_bound=0.0)
    flags.DEFINE_integer("decode_batch_tokens", 4096, "Padded source tokens "
                         "per decoding batch.", lower_bound=1)
    flags.DEFINE_bool("decode_jit_compile", True, "XLA-compile the decoder "
                      "(once per batch shape; faster even counting that).")
