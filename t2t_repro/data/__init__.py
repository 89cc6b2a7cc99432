"""Data: where sentence pairs come from (`sources.Corpus` over aligned
text files, `.gz` too, or a TFDS builder), the shared SentencePiece
vocabulary (trained, loaded, tokenizing in tensorflow-text, truncating
with EOS kept) and the tf.data pipeline (tokenize, filter or truncate by
length, bucket by length into token-budget batches). Bad input raises
`DataError` naming the file, the line and the problem."""


class DataError(ValueError):
    """Bad input data: the message names the file, the line and the problem."""
