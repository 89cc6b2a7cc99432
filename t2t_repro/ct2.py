"""A run, or a model in memory, as a CTranslate2 model, and translating
with one.

CTranslate2 (the `[ct2]` extra) is a C++ inference engine for Transformers,
faster than a TensorFlow graph on CPU (docs/performance.md). The mapping
from our Keras weights:
- one shared embedding for source, target and the output projection,
  scaled by sqrt(d_model) (`scale_embeddings`);
- the position table written out explicitly: ours interleaves sin and cos
  from position 0, CTranslate2's built-in one concatenates them, from
  position 1, with other timescales;
- attention projections fused as CTranslate2 runs them: self-attention's
  first linear is [Q; K; V], cross-attention's are Q, then [K; V]; Keras
  kernels are [in, out], CTranslate2's weights [out, in];
- post-norm is `pre_norm=False`; ids PAD 0, UNK 1, BOS 2, EOS 3 are the
  tokens `<blank>`, `<unk>`, `<s>`, `</s>`; the other pieces keep their
  SentencePiece names, and the SentencePiece model is written beside it.
Beam search differs by design: CTranslate2 divides a hypothesis' log
probability by length^alpha, we by GNMT's ((5 + length) / 6)^alpha, so
`CTranslate2Translator` asks for every beam's hypothesis with its raw log
probability and picks the best under our penalty.
"""

import dataclasses
import json
import os

import numpy as np
import tensorflow as tf

from t2t_repro.config import (
    EXTRA_DECODE_LENGTH,
    ConfigError,
    DecodingOptions,
    MissingExtraError,
    TransformerConfig,
)
from t2t_repro.data.vocabulary import (
    SPM_MODEL_FILENAME,
    make_tokenizer,
    tokenize_sources,
)
from t2t_repro.files import directory_written_whole
from t2t_repro.inference.batching import BatchingTranslator
from t2t_repro.inference.graph import nothing_to_translate
from t2t_repro.inference.threads import cores, threads_per_search
from t2t_repro.layers.decoder_layer import DecoderLayer
from t2t_repro.layers.encoder_layer import LAYER_NORM_EPSILON
from t2t_repro.serving import model_and_vocabulary

SPECIAL_TOKENS = ["<blank>", "<unk>", "<s>", "</s>"]  # ids 0-3
CONFIG_FILE = "t2t_config.json"


def _ctranslate2():
    try:
        import ctranslate2
    except ImportError as error:
        raise MissingExtraError(
            "CTranslate2 is an optional extra: pip install -e '.[ct2]'"
        ) from error
    return ctranslate2


def vocabulary_tokens(tokenizer):
    """The run's pieces by id, with CTranslate2's special tokens."""
    size = int(tokenizer.vocab_size())
    pieces = tokenizer.id_to_string(tf.range(size)).numpy()
    return SPECIAL_TOKENS + [p.decode("utf-8") for p in pieces[4:]]


def _linear(spec, dense):
    spec.weight = dense.kernel.numpy().T
    spec.bias = dense.bias.numpy()


def _fused(spec, denses):
    spec.weight = np.concatenate([d.kernel.numpy().T for d in denses])
    spec.bias = np.concatenate([d.bias.numpy() for d in denses])


def _norm(spec, norm):
    spec.gamma = norm.gamma.numpy()
    spec.beta = norm.beta.numpy()


def _attention(spec, attention, norm, cross):
    projections = [attention.query_dense, attention.key_dense, attention.value_dense]
    if cross:
        _fused(spec.linear[0], projections[:1])
        _fused(spec.linear[1], projections[1:])
    else:
        _fused(spec.linear[0], projections)
    _linear(spec.linear[-1], attention.output_dense)
    _norm(spec.layer_norm, norm)


def _feed_forward(spec, layer):
    _linear(spec.linear_0, layer.feed_forward.inner)
    _linear(spec.linear_1, layer.feed_forward.outer)
    _norm(spec.layer_norm, layer.feed_forward_norm)


def _layer(spec, layer):
    """An encoder or decoder layer: self-attention, cross-attention (a
    decoder's), then the feed-forward network."""
    _attention(
        spec.self_attention, layer.self_attention, layer.attention_norm, cross=False
    )
    if isinstance(layer, DecoderLayer):
        _attention(
            spec.attention,
            layer.cross_attention,
            layer.cross_attention_norm,
            cross=True,
        )
    _feed_forward(spec.ffn, layer)


def _position_table(model):
    """[positions, d_model]: every position a source (max_length) or an
    output (max_length + EXTRA_DECODE_LENGTH, or a learned table's size,
    which caps outputs) can reach."""
    rows = model.max_positions or model.config.max_length + EXTRA_DECODE_LENGTH + 1
    zeros = tf.zeros([1, rows, model.config.d_model])
    return model.position_encoding(zeros)[0].numpy()


def transformer_spec(model, tokens):
    """A `ctranslate2.specs.TransformerSpec` holding `model`'s weights."""
    specs = _ctranslate2().specs
    c = model.config
    if c.d_model % c.num_heads or c.head_dims != (c.d_model // c.num_heads,) * 2:
        raise ConfigError(
            f"key_dim={c.key_dim}, value_dim={c.value_dim}: CTranslate2's "
            "Transformer has d_k = d_v = d_model / num_heads "
            f"({c.d_model} / {c.num_heads}); this model cannot be converted"
        )
    encoder = specs.TransformerEncoderSpec(
        c.num_encoder_layers, c.num_heads, pre_norm=c.pre_norm
    )
    decoder = specs.TransformerDecoderSpec(
        c.num_decoder_layers, c.num_heads, pre_norm=c.pre_norm
    )
    spec = specs.TransformerSpec(encoder, decoder)
    spec.config.layer_norm_epsilon = LAYER_NORM_EPSILON
    embedding = model.embedding.embeddings.numpy()
    table = _position_table(model)
    encoder.embeddings[0].weight = embedding
    decoder.embeddings.weight = embedding
    for side in (encoder, decoder):
        side.scale_embeddings = True
        side.position_encodings.encodings = table
    decoder.projection.weight = embedding
    decoder.projection.bias = np.zeros(c.vocab_size, np.float32)
    for side, layers in (
        (encoder, model.encoder_layers),
        (decoder, model.decoder_layers),
    ):
        for layer_spec, layer in zip(side.layer, layers):
            _layer(layer_spec, layer)
    if c.pre_norm:
        _norm(encoder.layer_norm, model.encoder_norm)
        _norm(decoder.layer_norm, model.decoder_norm)
    spec.register_source_vocabulary(tokens)
    spec.register_target_vocabulary(tokens)
    return spec


def export_ctranslate2(
    model, output_dir, checkpoint=None, quantization=None, vocabulary=None
):
    """Writes a CTranslate2 model directory (with the SentencePiece model)
    and returns its path.

    `model`, `vocabulary`, `checkpoint`: a run directory or a `Transformer`
    in memory with its SentencePiece model (see
    `serving.model_and_vocabulary`). `quantization`: None (float32) or one
    of config.CT2_QUANTIZATIONS.
    """
    _ctranslate2()  # without the extra, fails before the model loads
    model, proto, _ = model_and_vocabulary(model, vocabulary, checkpoint)
    spec = transformer_spec(model, vocabulary_tokens(make_tokenizer(proto)))
    if os.path.exists(output_dir):
        raise FileExistsError(f"{output_dir} exists; give a new directory")
    with directory_written_whole(os.path.abspath(output_dir)) as partial:
        # What a CTranslate2 converter does with the spec it builds.
        spec.validate()
        spec.optimize(quantization=quantization)
        spec.save(partial)
        with open(os.path.join(partial, SPM_MODEL_FILENAME), "wb") as vocabulary_file:
            vocabulary_file.write(proto)
        with open(os.path.join(partial, CONFIG_FILE), "w", encoding="utf-8") as config:
            json.dump(dataclasses.asdict(model.config), config, indent=1)
    return output_dir


def gnmt_best(hypotheses, alpha):
    """(tokens, score) of the hypothesis with the best log P / ((5 + len) /
    6)^alpha, len counting the EOS a finished hypothesis ended with (as our
    decoders do); CTranslate2 leaves EOS out of `tokens`."""

    def score(hypothesis):
        length = len(hypothesis["tokens"]) + hypothesis["ended"]
        return hypothesis["log_prob"] / ((5.0 + length) / 6.0) ** alpha

    best = max(hypotheses, key=score)
    return best["tokens"], score(best)


class CTranslate2Translator(BatchingTranslator):
    """Translates with a CTranslate2 model directory from
    `export_ctranslate2`, our tokenization and our length penalty.

    Inputs longer than the model's max_length are cut (keeping EOS), as
    the SavedModel does.

    Args:
        path: the model directory.
        decoding: beam size, alpha, batch size (`jit_compile` is ignored).
        threads: CPU threads in all (0: one per core). A batch is split
            into `decoding.parallel_searches` (at most `threads`) that run
            side by side, each on its share of the threads, as our decoders
            do.
    """

    def __init__(self, path, decoding=DecodingOptions(), threads=0):
        super().__init__(decoding)
        if decoding.extra_length > EXTRA_DECODE_LENGTH:
            raise ConfigError(
                f"--extra_decode_length={decoding.extra_length}: a "
                "CTranslate2 export's position table reaches input + "
                f"{EXTRA_DECODE_LENGTH}; decode with --model_dir or "
                "--saved_model"
            )
        ctranslate2 = _ctranslate2()
        if not os.path.exists(os.path.join(path, CONFIG_FILE)):
            raise FileNotFoundError(
                f"{path}: not a t2t-export "
                f"--format=ctranslate2 directory (no "
                f"{CONFIG_FILE})"
            )
        with open(os.path.join(path, CONFIG_FILE), encoding="utf-8") as handle:
            config = TransformerConfig(**json.load(handle))
        self.max_length, self.max_positions = config.max_length, config.max_positions
        with open(os.path.join(path, SPM_MODEL_FILENAME), "rb") as handle:
            self.tokenizer = make_tokenizer(handle.read())
        self.tokens = vocabulary_tokens(self.tokenizer)
        self.ids = {token: i for i, token in enumerate(self.tokens)}
        self.searches = min(decoding.parallel_searches, threads or cores())
        self.translator = ctranslate2.Translator(
            path,
            device="cpu",
            inter_threads=self.searches,
            intra_threads=threads_per_search(self.searches, threads),
        )

    def _translate_batch(self, sentences):
        ids, truncated = tokenize_sources(self.tokenizer, sentences, self.max_length)
        # As TranslationGraph answers it: a source of EOS alone gets "",
        # score 0 (and is not decoded here).
        empty = nothing_to_translate(ids).numpy()
        sources = [
            [self.tokens[i] for i in row if i]
            for row, blank in zip(ids.numpy().tolist(), empty)
            if not blank
        ]
        beam = self.decoding.beam_size
        # One limit per batch (CTranslate2 has no per-sentence one); batches
        # hold sentences of similar length.
        limit = max(map(len, sources), default=0) + self.decoding.extra_length
        if self.max_positions is not None:  # as our decoders cap it
            limit = min(limit, self.max_positions)
        results = self.translator.translate_batch(
            sources,
            beam_size=beam,
            num_hypotheses=beam,
            length_penalty=0.0,
            return_scores=True,
            max_decoding_length=limit,
            # Not cut again (by default at 1,024): ours are cut at max_length.
            max_input_length=0,
            suppress_sequences=[[SPECIAL_TOKENS[0]], [SPECIAL_TOKENS[2]]],
            # Split into `searches` batches, which the workers run at once.
            max_batch_size=-(-len(sources) // self.searches),
        )
        texts: list[list[int]] = [[] for _ in empty]
        scores = [0.0 for _ in empty]
        decoded = (index for index, blank in enumerate(empty) if not blank)
        for index, result in zip(decoded, results):
            # With length_penalty 0 a score is the hypothesis' log P (with
            # its EOS if it ended before the limit).
            hypotheses = [
                {"tokens": tokens, "log_prob": log_prob, "ended": len(tokens) < limit}
                for tokens, log_prob in zip(result.hypotheses, result.scores)
            ]
            tokens, score = gnmt_best(hypotheses, self.decoding.alpha)
            texts[index] = [self.ids[t] for t in tokens]
            scores[index] = score
        return (
            self.tokenizer.detokenize(
                tf.ragged.constant(texts, dtype=tf.int32, ragged_rank=1, inner_shape=())
            ),
            tf.constant(scores, tf.float32),
            truncated,
        )
