"""The shared source+target SentencePiece vocabulary."""

import io
import os
import re

import tensorflow as tf
from absl import logging

from t2t_repro.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from t2t_repro.data import DataError
from t2t_repro.files import write_atomically

# The vocabulary's file in a run directory and in a CTranslate2 export.
SPM_MODEL_FILENAME = "spm.model"


# "Vocabulary size is smaller than required_chars. 100 vs 304.": with
# character_coverage 1.0 every character of the sample is a piece.
_TOO_FEW_PIECES = re.compile(r"smaller than required_chars\. (\d+) vs (\d+)")


def _sentencepiece_refusal(error, vocab_size):
    """SentencePiece's RuntimeError as one line in the tools' terms (its own
    names flags t2t-train does not have)."""
    if match := _TOO_FEW_PIECES.search(str(error)):
        return (
            f"--vocab_size={vocab_size}: the training sample's characters and "
            f"the special pieces need {match[2]}; give at least that"
        )
    return (
        "SentencePiece cannot learn a vocabulary from the training sample: "
        + " ".join(str(error).split())
    )


def train_sentencepiece(
    sentences,
    vocab_size,
    model_path=None,
    model_type="bpe",
    character_coverage=1.0,
    seed=0,
):
    """A SentencePiece model trained on `sentences` (a list of str),
    serialized; also written to `model_path` if one is given.

    The ids of pad/unk/bos/eos are fixed to those in t2t_repro.config. The
    vocabulary may come out smaller than `vocab_size` on a small corpus (a
    warning says so); read the real size with `vocab_size_of`.
    """
    import sentencepiece as spm

    spm.set_random_generator_seed(seed + 1)  # 0 would mean "random"
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_writer=model,
            vocab_size=vocab_size,
            model_type=model_type,
            character_coverage=character_coverage,
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            hard_vocab_limit=False,
            input_sentence_size=10_000_000,
            shuffle_input_sentence=True,
            num_threads=os.cpu_count() or 1,
            minloglevel=2,
        )
    except RuntimeError as error:  # SentencePiece's refusals
        raise DataError(_sentencepiece_refusal(error, vocab_size)) from None
    size = vocab_size_of(model.getvalue())
    if size < vocab_size:
        logging.warning(
            "SentencePiece learned %d pieces, not the %d asked for: the %d "
            "sentences it learned from hold no more",
            size,
            vocab_size,
            len(sentences),
        )
    if model_path is not None:
        write_atomically(model_path, model.getvalue())
    return model.getvalue()


def load_sentencepiece(model_path):
    """The serialized model proto; DataError if it is missing."""
    if not tf.io.gfile.exists(model_path):
        raise DataError(
            f"{model_path}: SentencePiece vocabulary not found "
            "(train a run first, or pass the run's model_dir)"
        )
    with tf.io.gfile.GFile(model_path, "rb") as handle:
        return handle.read()


def make_tokenizer(model_proto, sampling=0.0):
    """tf-text tokenizer that appends EOS: the op the SavedModel uses too.

    `sampling` > 0 (training only) draws a segmentation per call instead of
    the best one: for a BPE model it is the BPE-dropout rate (Provilkov et
    al., 2020), for a unigram model the smoothing exponent over all
    segmentations (Kudo, 2018). The op's sampler cannot be seeded, so a
    run with sampling is not bit-reproducible.
    """
    import tensorflow_text as tf_text

    if sampling:
        return tf_text.SentencepieceTokenizer(
            model=model_proto,
            out_type=tf.int32,
            add_eos=True,
            nbest_size=-1,
            alpha=sampling,
        )
    return tf_text.SentencepieceTokenizer(
        model=model_proto, out_type=tf.int32, add_eos=True
    )


def vocab_size_of(model_proto):
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_proto=model_proto)
    return processor.get_piece_size()


def truncate_keeping_eos(ids, max_length):
    """Ragged `[batch, (length)]` ids, each row ending in EOS, with every
    row over `max_length` pieces cut to its first `max_length - 1` and its
    EOS, so that a model trained on them still learns to stop."""
    positions = tf.ragged.range(ids.row_lengths())
    last = tf.expand_dims(ids.row_lengths() - 1, 1)
    return tf.ragged.boolean_mask(
        ids, tf.logical_or(positions < max_length - 1, tf.equal(positions, last))
    )


def tokenize_sources(tokenizer, sentences, max_length):
    """(source ids, truncated): int32 `[batch, width]` ids, PAD_ID padded,
    every row ending in EOS and cut by `truncate_keeping_eos`, as
    `--overlong=truncate` does in training; bool `[batch]`, which rows
    were longer than `max_length` and cut. Pure TensorFlow, so the
    exported SavedModel runs it too."""
    ids = tokenizer.tokenize(sentences)
    return (
        truncate_keeping_eos(ids, max_length).to_tensor(default_value=PAD_ID),
        ids.row_lengths() > max_length,
    )
