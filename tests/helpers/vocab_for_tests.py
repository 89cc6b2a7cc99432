"""A small SentencePiece model trained on text the test writes itself."""

import functools
import io

import sentencepiece as spm

from t2t_repro.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID


@functools.lru_cache()
def tiny_vocab(size=64):
    words = [
        "ein",
        "hund",
        "katze",
        "mann",
        "läuft",
        "a",
        "dog",
        "cat",
        "man",
        "runs",
        "über",
        "the",
        "grass",
        "das",
        "gras",
    ]
    sentences = [
        " ".join(words[(i * 7 + j) % len(words)] for j in range(6)) for i in range(200)
    ]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=model,
        vocab_size=size,
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    return model.getvalue()
