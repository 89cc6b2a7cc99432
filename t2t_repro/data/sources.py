"""One interface over every parallel-corpus source: aligned text, TFDS, or
a treebank (the parsing task)."""

import dataclasses
import functools
import itertools

from absl import logging

from t2t_repro.data import DataError, text_files, tfds_source


@dataclasses.dataclass(frozen=True)
class Corpus:
    """Where one split's (source, target) pairs come from.

    Either `source_path` and `target_path` (aligned text files, .gz
    allowed), `tfds_name` with `tfds_split`, or `trees_path` (one bracketed
    tree per line: words to linearised trees, see t2t_repro/parsing.py).
    The language codes pick the TFDS direction and the target-side
    tokenizer of tokenized BLEU.
    """

    source_path: str | None = None
    target_path: str | None = None
    tfds_name: str | None = None
    tfds_split: str | None = None
    source_lang: str | None = None
    target_lang: str | None = None
    tfds_data_dir: str | None = None
    tfds_manual_dir: str | None = None
    trees_path: str | None = None

    @property
    def name(self):
        """The file or TFDS split it reads (names output files)."""
        return self.trees_path or self.source_path or self.tfds_split

    @functools.cached_property
    def trees(self):
        """The treebank's trees (nltk `Tree`s), for a parsing corpus: read
        once, though pairs, sentences and scoring all need them."""
        from t2t_repro.parsing import read_trees

        return read_trees(self.trees_path)

    def check_files(self):
        """DataError naming the first problem of its files (missing; text
        files not line-aligned or not UTF-8; a tree that does not parse):
        run before training, so that a test set named by mistake fails at
        once, not after the whole run. A TFDS split is read when used."""
        for path in (self.source_path, self.target_path, self.trees_path):
            if path:
                text_files.check_exists(path)
        # Each property's first read checks its files.
        if self.source_path:
            self.parallel_check  # noqa: B018
        if self.trees_path:
            self.trees  # noqa: B018

    @functools.cached_property
    def parallel_check(self):
        """The `text_files.ParallelFileCheck` of aligned text files: one
        pass over both, made once, before the pass that reads them."""
        for path in (self.source_path, self.target_path):
            if text_files.is_read_once(path):
                raise DataError(
                    f"{path}: stdin, a pipe or a device, which can be read "
                    "only once; a corpus is read more than once (checked, "
                    "then read): "
                    "write it to a file first (.gz is fine)"
                )
        return text_files.check_parallel_files(self.source_path, self.target_path)

    def _parsing_pairs(self):
        from t2t_repro.parsing import parsing_pairs

        return parsing_pairs(self.trees)

    def pairs(self, keep_empty=False):
        """A tf.data.Dataset of (source, target) strings. Pairs of text
        files with an empty side are left out, or with `keep_empty` kept (a
        test set: its translations line up with its source file)."""
        if self.trees_path:
            # A treebank is small (the WSJ's 40k trees): held in memory,
            # and a tensor-slice iterator checkpoints its position.
            import tensorflow as tf

            return tf.data.Dataset.from_tensor_slices(self._parsing_pairs())
        if self.source_path:
            logging.info("%s", self.parallel_check.describe(keep_empty))
            return text_files.text_file_pairs(
                self.source_path, self.target_path, keep_empty
            )
        return tfds_source.tfds_pairs(
            self.tfds_name,
            self.tfds_split,
            self.source_lang,
            self.target_lang,
            self.tfds_data_dir,
            self.tfds_manual_dir,
        )

    def sentences(self, max_pairs):
        """Up to `max_pairs` pairs' source and target sentences, as str."""
        if self.trees_path:
            pairs = zip(*self._parsing_pairs())
        elif self.source_path:
            pairs = zip(
                text_files.read_lines(self.source_path),
                text_files.read_lines(self.target_path),
            )
        else:
            pairs = self.pairs().as_numpy_iterator()
        sentences = []
        for source, target in itertools.islice(pairs, max_pairs):
            for text in (source, target):
                text = text.decode("utf-8") if isinstance(text, bytes) else text
                if text.strip():
                    sentences.append(text)
        return sentences
