"""A translation's attention drawn as heat maps, or as the paper's
connection plots (figures 3-5)."""

import io

KINDS = ("encoder_self", "decoder_self", "encoder_decoder")


def attention_maps(model, tokenizer, sentence, translation_ids):
    """The model's attention while it reads `sentence` and writes
    `translation_ids` (ending in EOS).

    Returns:
        {kind: (weights float `[layers, heads, queries, keys]`, query
        pieces, key pieces)} for the three KINDS.
    """
    import numpy as np
    import tensorflow as tf

    from t2t_repro.config import BOS_ID
    from t2t_repro.data.vocabulary import tokenize_sources

    source, _ = tokenize_sources(
        tokenizer, tf.constant([sentence]), model.config.max_length
    )
    output = tf.constant([translation_ids], tf.int32)
    target_in = tf.concat([[[BOS_ID]], output[:, :-1]], axis=1)
    encoded, encoder_weights = model.encode(
        source, training=False, return_attention_scores=True
    )
    _, decoder_weights = model.decode(
        target_in, encoded, source, training=False, return_attention_scores=True
    )

    def pieces(ids):
        return [p.decode("utf-8") for p in tokenizer.id_to_string(ids[0]).numpy()]

    def stacked(weights):
        return np.stack([w[0].numpy() for w in weights])

    source_pieces = pieces(source)
    output_pieces = pieces(output)
    return {
        "encoder_self": (stacked(encoder_weights), source_pieces, source_pieces),
        "decoder_self": (
            stacked([w["self"] for w in decoder_weights]),
            output_pieces,
            pieces(target_in),
        ),
        "encoder_decoder": (
            stacked([w["cross"] for w in decoder_weights]),
            output_pieces,
            source_pieces,
        ),
    }


def plot_attention(weights, query_pieces, key_pieces, layers, heads, title):
    """A matplotlib Figure: one heat map per (layer, head), rows x columns."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # 0.3 inch (30 pixels at figure_png's dpi) per piece: labels stay
    # legible in TensorBoard, which shows images at their size.
    size = 0.3 * max(len(query_pieces), len(key_pieces)) + 1.5
    figure, axes = plt.subplots(
        len(layers),
        len(heads),
        squeeze=False,
        figsize=(size * len(heads), size * len(layers)),
    )
    for row, layer in enumerate(layers):
        for column, head in enumerate(heads):
            ax = axes[row][column]
            ax.imshow(
                weights[layer, head], cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto"
            )
            ax.set_title(f"layer {layer} head {head}", fontsize=8)
            ax.set_xticks(range(len(key_pieces)), key_pieces, rotation=90, fontsize=9)
            ax.set_yticks(range(len(query_pieces)), query_pieces, fontsize=9)
    figure.suptitle(title)
    figure.tight_layout()
    return figure


def plot_attention_lines(
    weights, query_pieces, key_pieces, layer, heads, queries, title
):
    """The paper's connection plots (figures 3-5), a matplotlib Figure:
    queries on the left, keys on the right, a line from each chosen query
    to every key with opacity = its weight, one colour per head."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = max(len(query_pieces), len(key_pieces))
    figure, ax = plt.subplots(figsize=(6, 0.32 * rows + 1.5))
    colours = plt.get_cmap("tab10")
    for position, piece in enumerate(query_pieces):
        ax.text(
            0,
            position,
            piece,
            ha="right",
            va="center",
            fontsize=10,
            fontweight="bold" if position in queries else "normal",
        )
    for position, piece in enumerate(key_pieces):
        ax.text(1, position, piece, ha="left", va="center", fontsize=10)
    for number, head in enumerate(heads):
        for query in queries:
            for key, weight in enumerate(weights[layer, head, query]):
                ax.plot(
                    [0.02, 0.98],
                    [query, key],
                    color=colours(number % 10),
                    alpha=float(weight),
                    linewidth=2.5,
                    label=f"head {head}" if query == queries[0] and key == 0 else None,
                )
    ax.set_xlim(-0.6, 1.6)
    ax.set_ylim(rows - 0.5, -0.5)
    ax.axis("off")
    legend = ax.legend(
        loc="lower center",
        bbox_to_anchor=(0.5, 1.0),
        ncol=min(len(heads), 4),
        fontsize=8,
        frameon=False,
    )
    for handle in legend.legend_handles:
        handle.set_alpha(1.0)
    ax.set_title(f"{title}, layer {layer}", pad=24)
    figure.tight_layout()
    return figure


def figure_png(figure):
    """PNG bytes of a figure, which is closed."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    plt.close(figure)
    return buffer.getvalue()


def translation_ids(translator, sentence):
    """The translator's output ids for one sentence, EOS included. Raises
    ValueError for a sentence with nothing to translate (see
    `nothing_to_translate`)."""
    import tensorflow as tf

    from t2t_repro.config import PAD_ID
    from t2t_repro.inference.graph import nothing_to_translate

    graph = translator.graph
    source, _ = graph.source_ids(tf.constant([sentence]))
    if nothing_to_translate(source)[0]:
        raise ValueError(f"{sentence!r}: nothing to translate (no subword tokens)")
    ids, _ = graph.decode_ids(source)
    return [int(i) for i in ids[0].numpy() if i != PAD_ID]
