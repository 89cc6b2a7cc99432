"""Parallel corpora, the shared subword vocabulary and token batching."""


class DataError(ValueError):
    """Bad input data: the message names the file, the line and the problem."""
