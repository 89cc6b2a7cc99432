"""A small SentencePiece model trained on text the test writes itself."""

import functools

from t2t_repro.data.vocabulary import train_sentencepiece

_WORDS = (
    "ein hund katze mann läuft a dog cat man runs über the grass das gras"
).split()


@functools.lru_cache()
def tiny_vocab(size=64):
    """The serialized model, trained the way `t2t-train` trains its own."""
    sentences = [
        " ".join(_WORDS[(i * 7 + j) % len(_WORDS)] for j in range(6))
        for i in range(200)
    ]
    return train_sentencepiece(sentences, size)
