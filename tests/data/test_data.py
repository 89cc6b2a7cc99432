"""Parallel files, vocabulary, batching: real data and bad input."""

import gzip
import os
import re
import socket
import time

import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf

from helpers.bad_inputs import damaged_gzip
from helpers.batches import report_batches
from helpers.multi30k_data import multi30k
from t2t_repro.config import BOS_ID, EOS_ID, PAD_ID
from t2t_repro.data import DataError, pipeline, text_files, tfds_source, vocabulary
from t2t_repro.data.sources import Corpus


@pytest.fixture(scope="module")
def multi30k_vocab(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("vocab") / "spm.model")
    sentences = text_files.read_lines(multi30k("train", "en")) + text_files.read_lines(
        multi30k("train", "de")
    )
    vocabulary.train_sentencepiece(sentences, 8000, path)
    return vocabulary.load_sentencepiece(path)


def _write(path, lines, raw=None):
    data = (
        raw
        if raw is not None
        else "".join(line + "\n" for line in lines).encode("utf-8")
    )
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wb") as handle:
        handle.write(data)
    return str(path)


def test_multi30k_files_read_in_full():
    check = text_files.check_parallel_files(
        multi30k("val", "en"), multi30k("val", "de")
    )
    assert check.lines == 1014 and check.empty_lines == []
    pairs = list(
        text_files.text_file_pairs(
            multi30k("val", "en"), multi30k("val", "de")
        ).as_numpy_iterator()
    )
    assert len(pairs) == 1014
    assert pairs[0][0].decode().startswith("A group of men are loading cotton")


def test_mismatched_line_counts_name_both_files(tmp_path):
    source = _write(tmp_path / "a.en", ["one", "two", "three"])
    target = _write(tmp_path / "a.de.gz", ["eins", "zwei"])
    with pytest.raises(DataError) as error:
        text_files.check_parallel_files(source, target)
    message = str(error.value)
    assert "a.de.gz has 2 lines" in message and "a.en has 3" in message
    assert "a.en:3" in message


def test_undecodable_bytes_name_file_and_line(tmp_path):
    source = _write(tmp_path / "b.en", [], raw=b"fine\nbad \xff\xfe byte\n")
    target = _write(tmp_path / "b.de", ["gut", "schlecht"])
    with pytest.raises(DataError, match=r"b\.en:2: not valid UTF-8"):
        text_files.check_parallel_files(source, target)


def test_missing_file_is_named(tmp_path):
    target = _write(tmp_path / "c.de", ["x"])
    with pytest.raises(DataError, match=r"nope\.en: no such file"):
        text_files.check_parallel_files(str(tmp_path / "nope.en"), target)


def test_empty_pairs_are_counted_and_filtered(tmp_path):
    source = _write(tmp_path / "d.en.gz", ["a", "", "c", "d", "  "])
    target = _write(tmp_path / "d.de.gz", ["A", "B", "", "D", "E"])
    check = text_files.check_parallel_files(source, target)
    assert check.empty_lines == [2, 3, 5]
    assert "3 pairs with an empty side left out (lines 2, 3, 5)" in check.describe()
    pairs = list(text_files.text_file_pairs(source, target).as_numpy_iterator())
    assert pairs == [(b"a", b"A"), (b"d", b"D")]


def test_a_test_set_keeps_its_empty_pairs_in_line(tmp_path):
    source = _write(tmp_path / "t.en", ["a", "", "c"])
    target = _write(tmp_path / "t.de", ["A", "B", ""])
    corpus = Corpus(source_path=source, target_path=target)
    assert "2 pairs with an empty side kept" in corpus.parallel_check.describe(
        keep_empty=True
    )
    kept = list(corpus.pairs(keep_empty=True).as_numpy_iterator())
    assert kept == [(b"a", b"A"), (b"", b"B"), (b"c", b"")]
    assert list(corpus.pairs().as_numpy_iterator()) == [(b"a", b"A")]


@pytest.mark.parametrize(
    "target_lines, target_raw, error",
    [
        (["A", "B"], None, r"t\.de has 2 lines but .*t\.en has 3"),
        (None, b"A\n\xff\nC\n", r"t\.de:2: not valid UTF-8"),
    ],
)
def test_checking_a_corpus_reads_its_files_through(
    tmp_path, target_lines, target_raw, error
):
    """t2t-train checks its test files before training: not only that
    they exist, or a misaligned test set would fail after the whole run."""
    source = _write(tmp_path / "t.en", ["a", "b", "c"])
    target = _write(tmp_path / "t.de", target_lines, target_raw)
    with pytest.raises(DataError, match=error):
        Corpus(source_path=source, target_path=target).check_files()


def test_crlf_files_read_like_lf_files(tmp_path):
    (tmp_path / "crlf.en").write_bytes(b"a dog\r\n\r\nthe cat\r\n")
    (tmp_path / "crlf.de").write_bytes(b"ein hund\r\nleer\r\ndie katze")
    source, target = str(tmp_path / "crlf.en"), str(tmp_path / "crlf.de")
    assert text_files.check_parallel_files(source, target).empty_lines == [2]
    assert text_files.read_lines(source) == ["a dog", "", "the cat"]
    pairs = list(text_files.text_file_pairs(source, target).as_numpy_iterator())
    assert pairs == [(b"a dog", b"ein hund"), (b"the cat", b"die katze")]


def test_a_gzip_file_damaged_mid_stream_is_an_error_naming_it(tmp_path):
    """zlib's error (the header is intact), not only gzip's."""
    damaged = tmp_path / "damaged.en.gz"
    damaged.write_bytes(damaged_gzip())
    (tmp_path / "ok.de").write_text("x\n" * 20000)
    with pytest.raises(DataError, match=f"^{damaged}: cannot be read: Error -3 "):
        text_files.check_parallel_files(str(damaged), str(tmp_path / "ok.de"))


@pytest.mark.timeout(120)  # a read of the pipe would wait for a writer
def test_a_pipe_is_refused_before_a_read_would_empty_it(tmp_path):
    """A corpus is read twice (checked, then read): a pipe would be empty
    the second time. Were it opened, the test would wait for a writer."""
    os.mkfifo(tmp_path / "pipe.en")
    (tmp_path / "ok.de").write_text("x\n")
    corpus = Corpus(
        source_path=str(tmp_path / "pipe.en"), target_path=str(tmp_path / "ok.de")
    )
    with pytest.raises(
        DataError,
        match="pipe.en: stdin, a pipe or a device, which can be read only once",
    ):
        corpus.check_files()


def test_a_10000_token_line_is_dropped_or_cut_not_fatal(multi30k_vocab):
    tokenizer = vocabulary.make_tokenizer(multi30k_vocab)
    pairs = tf.data.Dataset.from_tensor_slices(
        (["a dog runs", " ".join(["dog"] * 10_000)], ["ein hund", "hund"])
    )
    batches = list(
        pipeline.shuffled_batches(pairs, tokenizer, batch_tokens=64, max_length=16)
    )
    assert sum(int(s.shape[0]) for (s, _), _ in batches) == 1
    cut = list(
        pipeline.shuffled_batches(
            pairs, tokenizer, batch_tokens=64, max_length=16, overlong="truncate"
        )
    )
    widths = sorted(int(s.shape[1]) for (s, _), _ in cut)
    assert sum(int(s.shape[0]) for (s, _), _ in cut) == 2
    assert widths[-1] == 16


def test_overlong_pairs_are_counted_in_the_log(multi30k_vocab, caplog):
    """The count is sentencepiece's own (an independent tokenizer): pairs
    with a side over max_length tokens, EOS included."""
    # The absl logger's own level: a SavedModel export earlier in the
    # process (TensorFlow saves and restores absl's verbosity) sets it.
    caplog.set_level("INFO", logger="absl")
    sources = text_files.read_lines(multi30k("val", "en"))[:700]
    targets = text_files.read_lines(multi30k("val", "de"))[:700]
    processor = spm.SentencePieceProcessor(model_proto=multi30k_vocab)
    longest = [
        max(len(s), len(t)) + 1
        for s, t in zip(processor.encode(sources), processor.encode(targets))
    ]
    expected = sum(length > 16 for length in longest)
    assert 0 < expected < 700
    pairs = tf.data.Dataset.from_tensor_slices((sources, targets))
    tokenizer = vocabulary.make_tokenizer(multi30k_vocab)
    pipeline.check_lengths(pairs, tokenizer, 16, "drop", "val")
    assert f"val: {expected} of 700 pairs have a side over --max_length=16" in (
        caplog.text
    )
    with pytest.raises(DataError, match="val: no pair fits --max_length=1"):
        pipeline.check_lengths(pairs, tokenizer, 1, "drop", "val")
    pipeline.check_lengths(pairs, tokenizer, 1, "truncate", "val")
    assert "700 of 700 pairs have a side over --max_length=1" in caplog.text


def test_overlong_pairs_of_a_large_corpus_are_counted_in_a_sample(
    multi30k_vocab, caplog, monkeypatch
):
    caplog.set_level("INFO", logger="absl")
    monkeypatch.setattr(pipeline, "LENGTH_SAMPLE_PAIRS", 300)
    pairs = tf.data.Dataset.from_tensor_slices(
        (["a dog runs"] * 500, [" ".join(["hund"] * 40)] * 500)
    )
    tokenizer = vocabulary.make_tokenizer(multi30k_vocab)
    pipeline.check_lengths(pairs, tokenizer, 16, "truncate", "big")
    assert "big: 300 of the first 300 pairs have a side over" in caplog.text


def test_tf_text_ids_equal_sentencepiece_ids(multi30k_vocab):
    sentences = text_files.read_lines(multi30k("val", "de"))[:300]
    processor = spm.SentencePieceProcessor(model_proto=multi30k_vocab)
    expected = [ids + [EOS_ID] for ids in processor.encode(sentences)]
    tokenizer = vocabulary.make_tokenizer(multi30k_vocab)
    assert tokenizer.tokenize(sentences).to_list() == expected
    assert processor.piece_to_id("<pad>") == PAD_ID
    assert processor.id_to_piece(BOS_ID) == "<s>"


def test_a_smaller_vocabulary_than_asked_is_logged(caplog):
    proto = vocabulary.train_sentencepiece(["a dog", "a cat", "the dog"] * 20, 500)
    size = vocabulary.vocab_size_of(proto)
    assert size < 500
    assert f"SentencePiece learned {size} pieces, not the 500 asked for" in caplog.text


def test_a_vocabulary_smaller_than_the_alphabet_is_named():
    """Every character of the sample is a piece (character coverage 1):
    300 of them do not fit 100 pieces, which SentencePiece refused with a
    RuntimeError naming a flag t2t-train does not have."""
    sentences = [
        "".join(chr(0x4E00 + i) for i in range(start, start + 30))
        for start in range(0, 300, 30)
    ]
    with pytest.raises(
        DataError,
        match=r"^--vocab_size=100: the training sample's characters and the "
        r"special pieces need (\d+); give at least that$",
    ) as refused:
        vocabulary.train_sentencepiece(sentences, 100)
    assert int(re.search(r"need (\d+)", str(refused.value))[1]) >= 300


def test_missing_vocabulary_is_a_clear_error(tmp_path):
    with pytest.raises(DataError, match="SentencePiece vocabulary not found"):
        vocabulary.load_sentencepiece(str(tmp_path / "spm.model"))


@pytest.mark.slow
def test_bucketed_batches_on_multi30k(multi30k_vocab):
    tokenizer = vocabulary.make_tokenizer(multi30k_vocab)
    pairs = text_files.text_file_pairs(multi30k("train", "en"), multi30k("train", "de"))
    batches = pipeline.shuffled_batches(
        pairs, tokenizer, batch_tokens=4096, max_length=100
    )
    report = report_batches(batches)
    assert report.pairs == 29000  # none over 100 pieces, none lost
    assert report.padding_efficiency > 0.8
    shapes = set()
    for (source, target_input), target in batches.take(60):
        assert source.shape == target.shape == target_input.shape
        assert 2 * source.shape[0] * source.shape[1] <= 4096
        np.testing.assert_array_equal(target_input[:, 0], BOS_ID)
        np.testing.assert_array_equal(target_input[:, 1:], target[:, :-1])
        shapes.add(source.shape[1])
    assert shapes <= set(pipeline.bucket_boundaries(100))


def test_batches_are_reproducible_and_skippable(multi30k_vocab):
    tokenizer = vocabulary.make_tokenizer(multi30k_vocab)
    pairs = text_files.text_file_pairs(multi30k("val", "en"), multi30k("val", "de"))

    def first_sources(seed, skip=0, count=6):
        batches = pipeline.training_batches(
            pairs,
            tokenizer,
            batch_tokens=1024,
            max_length=64,
            seed=seed,
            shuffle_buffer=2000,
        )
        return [b[0][0].numpy() for b in batches.skip(skip).take(count)]

    run_a, run_b = first_sources(7), first_sources(7)
    for a, b in zip(run_a, run_b):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(first_sources(7, skip=2, count=4), run_a[2:]):
        np.testing.assert_array_equal(a, b)
    assert any(
        a.shape != b.shape or np.any(a != b) for a, b in zip(run_a, first_sources(8))
    )


def test_overlong_pairs_dropped_or_truncated_keeping_eos():
    pairs = tf.data.Dataset.from_tensor_slices(
        (
            tf.ragged.constant([[5, 6, EOS_ID], [5, 6, 7, 8, 9, EOS_ID]]),
            tf.ragged.constant([[5, EOS_ID], [7, EOS_ID]]),
        )
    )
    pairs = pairs.map(lambda s, t: (s, t))
    dropped = list(pipeline.fit_to_max_length(pairs, 4, "drop"))
    assert len(dropped) == 1
    truncated = [
        s.numpy().tolist() for s, _ in pipeline.fit_to_max_length(pairs, 4, "truncate")
    ]
    assert truncated == [[5, 6, EOS_ID], [5, 6, 7, EOS_ID]]


def test_sources_truncate_like_training_data():
    rows = [
        [5, EOS_ID],
        [5, 6, 7, EOS_ID],
        [5, 6, 7, 8, EOS_ID],
        [5, 6, 7, 8, 9, 10, EOS_ID],
    ]
    expected = [row if len(row) <= 4 else row[:3] + [EOS_ID] for row in rows]
    cut = vocabulary.truncate_keeping_eos(tf.ragged.constant(rows), 4)
    assert cut.to_list() == expected
    one_by_one = [
        s.numpy().tolist()
        for s, _ in pipeline.fit_to_max_length(
            tf.data.Dataset.from_tensor_slices(
                (tf.ragged.constant(rows), tf.ragged.constant(rows))
            ),
            4,
            "truncate",
        )
    ]
    assert one_by_one == expected


def test_tfds_source_fails_fast_offline(tmp_path):
    # The download host is a closed local port, so the test never downloads
    # WMT14, even on a machine with internet.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(DataError) as error:
        tfds_source.tfds_pairs(
            "wmt14_translate/de-en",
            "train",
            "en",
            "de",
            data_dir=str(tmp_path),
            probe_url=f"https://127.0.0.1:{closed_port}",
        )
    assert time.monotonic() - start < 60
    message = str(error.value)
    assert "wmt14_translate/de-en" in message
    assert "--train_src" in message and "127.0.0.1 is unreachable" in message


def test_tfds_source_rejects_unknown_language(tmp_path):
    with pytest.raises(DataError, match="not 'xx'"):
        tfds_source.tfds_pairs(
            "wmt14_translate/de-en", "train", "xx", "de", data_dir=str(tmp_path)
        )
