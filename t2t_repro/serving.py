"""Exporting a run, or a model in memory, as a SavedModel for TF Serving:
the translation graph of inference/graph.py, strings in and strings out, in TF
Serving's layout, with warm-up requests the model server replays at load
time. `model_and_vocabulary` is what every export (ct2.py too) starts
from."""

import os

import tensorflow as tf
from absl import logging

from t2t_repro.checkpoints import checkpoint_step, load_model
from t2t_repro.config import (
    DEFAULT_WARMUP_REQUESTS,
    ConfigError,
    DecodingOptions,
    ServingLimits,
)
from t2t_repro.data.vocabulary import load_sentencepiece, make_tokenizer
from t2t_repro.decoding.precision import in_precision
from t2t_repro.files import directory_written_whole
from t2t_repro.inference.exports import write_export_decoding
from t2t_repro.inference.graph import TranslationGraph
from t2t_repro.run_dir import check_vocabulary_fits

# Where TF Serving looks for warm-up records (at most 1000 are replayed).
WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")


def model_and_vocabulary(model, vocabulary=None, checkpoint=None):
    """(Transformer, serialized SentencePiece model, checkpoint path or
    None) of what is to be exported or translated.

    Args:
        model: a run directory (t2t-train's model_dir), or a `Transformer`
            in memory.
        vocabulary: with a `Transformer`, its SentencePiece model: the
            serialized proto (bytes) or a path to one (a run directory has
            its own).
        checkpoint: with a run directory, the checkpoint to load instead of
            the latest: a path like MODEL_DIR/ckpt-950, or a run directory
            of its own, such as t2t-average's MODEL_DIR/average (its latest
            checkpoint).
    """
    if isinstance(model, (str, os.PathLike)):
        if vocabulary is not None:
            raise ValueError(
                f"{model}: a run directory brings its own "
                "vocabulary; vocabulary= is for a model in "
                "memory"
            )
        run = os.fspath(model)
        if checkpoint is not None:
            if not isinstance(checkpoint, (str, os.PathLike)):
                raise TypeError(
                    f"checkpoint={checkpoint!r}: give a path, such as "
                    f"{os.path.join(run, 'ckpt-STEP')}"
                )
            checkpoint = os.fspath(checkpoint)
            if tf.io.gfile.isdir(checkpoint):
                run, checkpoint = checkpoint, None
        return load_model(run, checkpoint)
    if vocabulary is None:
        raise ValueError(
            "a model in memory needs its vocabulary= (the "
            "SentencePiece model's bytes or path)"
        )
    if checkpoint is not None:
        raise ValueError(
            "checkpoint= picks a run directory's checkpoint; "
            "a model in memory has its weights already"
        )
    if not isinstance(vocabulary, bytes):
        vocabulary = load_sentencepiece(os.fspath(vocabulary))
    check_vocabulary_fits(
        model.config, vocabulary, "the vocabulary given", "the model's config"
    )
    return model, vocabulary, None


def warmup_sentences(module, count):
    """`count` one-sentence inputs whose padded widths are `count` bucket
    boundaries spread from the shortest to the longest that a sentence
    within the export's max_sentence_bytes reaches (TF Serving does not
    load a model whose warm-up fails), so that the first requests of each
    size class find their graph (and, with XLA, their compiled shape)
    ready. A sentence is the shortest whole-word vocabulary piece
    repeated: each repetition is one token."""
    tokenizer = module.tokenizer
    pieces = [
        piece.decode("utf-8")
        for piece in tokenizer.id_to_string(tf.range(4, tokenizer.vocab_size())).numpy()
    ]
    word = min(
        (
            piece[1:]
            for piece in pieces
            if piece.startswith("\u2581") and piece[1:].isalpha()
        ),
        key=lambda text: len(text.encode("utf-8")),
    )

    def sentence(width):
        # width - 1 words + EOS fill a bucket of that width exactly.
        return " ".join([word] * (width - 1))

    boundaries = [
        width
        for width in module.boundaries.numpy().tolist()
        if len(sentence(width).encode("utf-8")) <= module.limits.max_sentence_bytes
    ]
    count = min(count, len(boundaries))
    picked = [
        boundaries[round(i * (len(boundaries) - 1) / max(count - 1, 1))]
        for i in range(count)
    ]
    return [sentence(width) for width in picked]


def write_warmup_requests(module, path, count):
    """Writes `path/assets.extra/tf_serving_warmup_requests`: `count`
    serving_default PredictRequests (see `warmup_sentences`) as
    PredictionLog records in a TFRecord file."""
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    file_path = os.path.join(path, WARMUP_FILE)
    tf.io.gfile.makedirs(os.path.dirname(file_path))
    with tf.io.TFRecordWriter(file_path) as writer:
        for sentence in warmup_sentences(module, count):
            request = predict_pb2.PredictRequest(
                model_spec=model_pb2.ModelSpec(signature_name="serving_default"),
                inputs={"inputs": tf.make_tensor_proto([sentence], tf.string)},
            )
            writer.write(
                prediction_log_pb2.PredictionLog(
                    predict_log=prediction_log_pb2.PredictLog(request=request)
                ).SerializeToString()
            )


def export_saved_model(
    model,
    export_dir,
    version=None,
    checkpoint=None,
    decoding=DecodingOptions(),
    warmup_requests=DEFAULT_WARMUP_REQUESTS,
    vocabulary=None,
    limits=ServingLimits(),
    precision=None,
):
    """Writes `export_dir/<version>/` (with `warmup_requests` warm-up
    records; 0 writes none) and returns its path. Its signatures refuse
    requests over `limits` (a `ServingLimits`).

    `model`, `vocabulary`, `checkpoint`: a run directory or a `Transformer`
    in memory with its SentencePiece model (see `model_and_vocabulary`).
    `version` defaults to a run's checkpoint step; a model in memory needs
    one. An XLA-compiled decoder (`decoding.jit_compile`) runs in TF
    Serving only with --xla_cpu_compilation_enabled=true. `precision`:
    None (the model's own), "fp32", "bf16" or "auto"
    (decoding/precision.py); the export holds its weights in that
    precision whatever machine later serves it, and names its compute
    dtype in its `compute_dtype` variable.
    """
    if not (
        decoding.beam_size <= limits.max_beam_size
        and 0.0 <= decoding.alpha <= limits.max_alpha
    ):
        raise ConfigError(
            f"serving_default's beam_size {decoding.beam_size} and alpha "
            f"{decoding.alpha} must be within --max_beam_size="
            f"{limits.max_beam_size} and --max_alpha={limits.max_alpha}, "
            "which the export's translate signature enforces"
        )
    if version is not None and (
        not isinstance(version, int) or isinstance(version, bool) or version < 0
    ):
        raise TypeError(
            f"version={version!r}: TF Serving's version directory is a "
            "number >= 0 (checkpoint=, a keyword argument, picks the checkpoint)"
        )
    model, proto, checkpoint = model_and_vocabulary(model, vocabulary, checkpoint)
    if version is None:
        if checkpoint is None:
            raise ValueError(
                "export_saved_model: give a model in memory a "
                "version= (TF Serving's version directory)"
            )
        version = checkpoint_step(checkpoint)
    path = os.path.join(export_dir, str(version))
    if tf.io.gfile.exists(path):
        raise FileExistsError(
            f"{path} exists; TF Serving versions are immutable, give another --version"
        )
    model = in_precision(model, precision)
    module = TranslationGraph(model, make_tokenizer(proto), decoding, limits)
    # TF Serving polls export_dir and loads any new numeric directory: it
    # must never see half a model.
    with directory_written_whole(path) as partial:
        tf.saved_model.save(module, partial, signatures=module.signatures())
        write_export_decoding(partial, decoding)
        if warmup_requests:
            write_warmup_requests(module, partial, warmup_requests)
    logging.info(
        "exported %s (%s, beam %d, alpha %g%s; %s) to %s",
        checkpoint or "a model in memory",
        model.compute_dtype,
        decoding.beam_size,
        decoding.alpha,
        ", XLA" if decoding.jit_compile else "",
        limits,
        path,
    )
    return path
