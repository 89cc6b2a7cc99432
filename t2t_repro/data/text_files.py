"""Line-aligned plain-text parallel files, optionally gzip-compressed."""

import dataclasses
import gzip
import os
import sys
import zlib

import tensorflow as tf

from t2t_repro.data import DataError

# For the functions handed to tf.data (map, filter, reduce...), which it
# would convert with AutoGraph when a pipeline is built, from the source
# as it is then: a dev pipeline is rebuilt hours into a run, when the
# package may have been edited or upgraded. None of them needs AutoGraph
# (no Python control flow on tensors).
do_not_convert = tf.autograph.experimental.do_not_convert

_MAX_REPORTED_LINES = 10
STDIN = "-"


@dataclasses.dataclass
class ParallelFileCheck:
    """What a validation pass over two aligned files found."""

    source_path: str
    target_path: str
    lines: int
    empty_lines: list  # 1-based line numbers where either side is empty

    def describe(self, keep_empty=False):
        """One line for the log, saying what `text_file_pairs` does with
        the pairs with an empty side."""
        what = "kept (scored as they are)" if keep_empty else "left out"
        text = (
            f"{self.source_path} / {self.target_path}: {self.lines} "
            f"lines, {len(self.empty_lines)} pairs with an empty side {what}"
        )
        if self.empty_lines:
            shown = ", ".join(map(str, self.empty_lines[:_MAX_REPORTED_LINES]))
            more = len(self.empty_lines) > _MAX_REPORTED_LINES
            text += f" (lines {shown}{', ...' if more else ''})"
        return text


def check_exists(path):
    """DataError unless `path` (or stdin, "-") can be opened."""
    if path != STDIN and not os.path.exists(path):
        raise DataError(f"{path}: no such file")


def _open(path):
    check_exists(path)
    if path == STDIN:
        # Not closed by the caller's `with`: a duplicate of stdin's handle.
        return os.fdopen(os.dup(sys.stdin.fileno()), "rb")
    if path.endswith(".gz"):
        return gzip.open(path, "rb")
    return open(path, "rb")


def numbered_lines(path):
    """Yields (line number, text without the line break) of a validated
    UTF-8 file (gzip or stdin too)."""
    with _open(path) as handle:
        try:
            for number, raw in enumerate(handle, start=1):
                try:
                    yield number, raw.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError as error:
                    raise DataError(
                        f"{path}:{number}: not valid UTF-8 (byte "
                        f"{error.start}: {raw[error.start : error.start + 4]!r})"
                    ) from None
        # zlib.error: damaged compressed data inside an intact gzip header.
        except (OSError, EOFError, zlib.error) as error:
            raise DataError(f"{path}: cannot be read: {error}") from None


def is_read_once(path):
    """Whether `path` is stdin ("-"), a pipe or a device, which can be read
    only once (a regular file can be checked, then read again)."""
    return path == STDIN or (
        os.path.exists(path) and not os.path.isfile(path) and not os.path.isdir(path)
    )


def aligned_lines(source_path, target_path):
    """Yields (line number, source text, target text) of two line-aligned
    files (gzip or stdin too); DataError, once one file ends, if the other
    goes on, and at the first line that is not UTF-8."""
    source_lines = numbered_lines(source_path)
    target_lines = numbered_lines(target_path)
    count = 0
    while True:
        source = next(source_lines, None)
        target = next(target_lines, None)
        if source is None and target is None:
            return
        if source is None or target is None:
            shorter, longer = (
                (source_path, target_path)
                if source is None
                else (target_path, source_path)
            )
            longer_count = (
                count
                + 1
                + sum(1 for _ in (target_lines if source is None else source_lines))
            )
            raise DataError(
                f"{shorter} has {count} lines but {longer} has "
                f"{longer_count}: parallel files must be line-aligned "
                f"(first unmatched line: {longer}:{count + 1})"
            )
        count += 1
        yield count, source[1], target[1]


def check_parallel_files(source_path, target_path):
    """Reads both files once; raises DataError on anything that is not data.

    Mismatched line counts, undecodable bytes and missing or corrupt files
    are errors naming file and line. Pairs with an empty side are counted
    (`text_file_pairs` leaves them out of training data) so that no data
    is lost silently.
    """
    empty_lines, count = [], 0
    for count, source, target in aligned_lines(source_path, target_path):
        if not source.strip() or not target.strip():
            empty_lines.append(count)
    if count == 0:
        raise DataError(f"{source_path}: empty file")
    if len(empty_lines) == count:
        raise DataError(
            f"{source_path} / {target_path}: every one of the "
            f"{count} lines has an empty (or whitespace-only) "
            "side: nothing to train on"
        )
    return ParallelFileCheck(source_path, target_path, count, empty_lines)


def _line_dataset(path):
    compression = "GZIP" if path.endswith(".gz") else ""
    return tf.data.TextLineDataset(path, compression_type=compression)


def text_file_pairs(source_path, target_path, keep_empty=False):
    """(source, target) string pairs, stripped; pairs with an empty side
    removed unless `keep_empty`.

    Call `check_parallel_files` first: this streams the files with tf.data
    and assumes they are valid.
    """
    pairs = tf.data.Dataset.zip(_line_dataset(source_path), _line_dataset(target_path))
    pairs = pairs.map(
        do_not_convert(lambda s, t: (tf.strings.strip(s), tf.strings.strip(t)))
    )
    if keep_empty:
        return pairs
    return pairs.filter(
        do_not_convert(
            lambda s, t: tf.logical_and(
                tf.strings.length(s) > 0, tf.strings.length(t) > 0
            )
        )
    )


def read_lines(path):
    """All lines of a (possibly gzipped) UTF-8 file, or of stdin for "-",
    validated."""
    return [text for _, text in numbered_lines(path)]
