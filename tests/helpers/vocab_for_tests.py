"""A small SentencePiece model trained on text the test writes itself."""

import functools

from t2t_repro.data.vocabulary import train_sentencepiece

_WORDS = (
    "ein hund katze mann läuft a dog cat man runs über the grass das gras"
).split()


@functools.lru_cache()
def tiny_vocab(size=64):
    """The serialized model, trained by the package's trainer; unigram,
    since the tests' margins were set with this vocabulary."""
    sentences = [
        " ".join(_WORDS[(i * 7 + j) % len(_WORDS)] for j in range(6))
        for i in range(200)
    ]
    return train_sentencepiece(sentences, size, model_type="unigram")
