r"""t2t-attention: a translation's attention, as heat maps or as the
paper's connection plots (figures 3-5).

    t2t-attention --model_dir=runs/multi30k --sentence="A dog runs." \
        --layers=0,2 --output_prefix=attention/dog

writes `<prefix>_encoder_self.png`, `<prefix>_decoder_self.png` and
`<prefix>_encoder_decoder.png`: one heat map per chosen layer (rows) and
head (columns), subword pieces on the axes, each row a query position.
With `--style=lines` it writes `<prefix>_<kind>_layer<L>.png` per chosen
layer: queries left, keys right, a line from each chosen query
(`--queries`, default all) to each key, opacity = weight, one colour per
head; e.g. figure 4 is `--style=lines --layers=4 --heads=4,5
--queries=` (all words), figure 3 one query word and all heads.
"""

from absl import app, flags

from t2t_repro.cli import common
from t2t_repro.cli.flags import (
    decoding_from_flags,
    define_checkpoint,
    define_decoding_flags,
)

define_checkpoint()
flags.DEFINE_string("sentence", None, "Source sentence to translate.")
flags.DEFINE_string("layers", "", "Comma-separated layer indices (default: all).")
flags.DEFINE_string("heads", "", "Comma-separated head indices (default: all).")
flags.DEFINE_string(
    "queries",
    "",
    "--style=lines: comma-separated query "
    "positions (subword pieces, from 0) whose lines are "
    "drawn (default: all).",
)
flags.DEFINE_enum(
    "style",
    "heatmap",
    ["heatmap", "lines"],
    "Heat maps, or the paper's connection plots.",
)
flags.DEFINE_string("output_prefix", "attention", "PNG path prefix.")
define_decoding_flags()
flags.mark_flags_as_required(["model_dir", "sentence"])
FLAGS = flags.FLAGS


def _parse_indices(text, count, name, owner="the model"):
    if not text:
        return list(range(count))
    try:
        indices = [int(part) for part in text.split(",")]
    except ValueError:
        raise app.UsageError(
            f"--{name}={text}: give comma-separated indices, e.g. --{name}=0,1"
        ) from None
    bad = [i for i in indices if not 0 <= i < count]
    if bad:
        raise app.UsageError(
            f"--{name}={text}: {bad} out of range; {owner} has {count} {name}"
        )
    return indices


def main():
    from t2t_repro.checkpoints import load_model
    from t2t_repro.data.vocabulary import make_tokenizer
    from t2t_repro.inference.translators import ModelTranslator
    from t2t_repro.visualization import (
        KINDS,
        attention_maps,
        figure_png,
        plot_attention,
        plot_attention_lines,
        translation_ids,
    )

    model, proto, _ = load_model(FLAGS.model_dir, FLAGS.checkpoint)
    translator = ModelTranslator(model, make_tokenizer(proto), decoding_from_flags())
    try:
        output = translation_ids(translator, FLAGS.sentence)
    except ValueError as error:
        raise app.UsageError(f"--sentence={error}; no attention to draw") from error
    maps = attention_maps(model, translator.tokenizer, FLAGS.sentence, output)
    heads = _parse_indices(FLAGS.heads, model.config.num_heads, "heads")
    # Every kind's indices checked before the first PNG is written.
    chosen = {}
    for kind in KINDS:
        weights, queries, _ = maps[kind]
        owner = f"its {kind} attention"
        chosen[kind] = (
            _parse_indices(FLAGS.layers, weights.shape[0], "layers", owner),
            _parse_indices(FLAGS.queries, len(queries), "queries", owner)
            if FLAGS.style == "lines"
            else None,
        )
    for kind in KINDS:
        weights, queries, keys = maps[kind]
        layers, query_indices = chosen[kind]
        title = f"{kind.replace('_', ' ')} attention"
        if FLAGS.style == "heatmap":
            figures = {
                f"{FLAGS.output_prefix}_{kind}.png": plot_attention(
                    weights, queries, keys, layers, heads, title
                )
            }
        else:
            figures = {
                f"{FLAGS.output_prefix}_{kind}_layer{layer}.png": plot_attention_lines(
                    weights, queries, keys, layer, heads, query_indices, title
                )
                for layer in layers
            }
        for path, figure in figures.items():
            with open(path, "wb") as handle:
                handle.write(figure_png(figure))
            print(path)


def run():
    common.run(main)


if __name__ == "__main__":  # python -m t2t_repro.cli.attention
    run()
