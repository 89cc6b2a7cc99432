"""One interface over every parallel-corpus source: aligned text or TFDS."""

import dataclasses
import itertools

from absl import flags, logging

from t2t_repro.data import text_files, tfds_source

_SPLITS = ("train", "dev", "test")


@dataclasses.dataclass(frozen=True)
class Corpus:
    """Where one split's (source, target) pairs come from.

    Either `source_path` and `target_path` (aligned text files, .gz
    allowed) or `tfds_name` with `tfds_split`. The language codes pick
    the TFDS direction and the target-side tokenizer of tokenized BLEU.
    """

    source_path: str = None
    target_path: str = None
    tfds_name: str = None
    tfds_split: str = None
    source_lang: str = None
    target_lang: str = None
    tfds_data_dir: str = None
    tfds_manual_dir: str = None

    def pairs(self):
        """A tf.data.Dataset of (source, target) strings."""
        if self.source_path:
            check = text_files.check_parallel_files(self.source_path,
                                                    self.target_path)
            logging.info("%s", check.describe())
            return text_files.text_file_pairs(self.source_path,
                                              self.target_path)
        return tfds_source.tfds_pairs(
            self.tfds_name, self.tfds_split, self.source_lang,
            self.target_lang, self.tfds_data_dir, self.tfds_manual_dir)

    def sentences(self, max_pairs):
        """Up to `max_pairs` pairs' source and target sentences, as str."""
        if self.source_path:
            pairs = zip(text_files.read_lines(self.source_path),
                        text_files.read_lines(self.target_path))
        else:
            pairs = self.pairs().as_numpy_iterator()
        sentences = []
        for source, target in itertools.islice(pairs, max_pairs):
            for text in (source, target):
                text = text.decode("utf-8") if isinstance(text, bytes) else text
                if text.strip():
                    sentences.append(text)
        return sentences


def define_data_flags():
    """Flags naming the train/dev/test data (idempotent)."""
    if "train_src" in flags.FLAGS:
        return
    for split in _SPLITS:
        flags.DEFINE_string(f"{split}_src", None,
                            f"{split} source text file, one sentence a line "
                            "(.gz allowed).")
        flags.DEFINE_string(f"{split}_tgt", None,
                            f"{split} target text file, line-aligned with "
                            f"--{split}_src.")
    flags.DEFINE_string("tfds_name", None,
                        "TFDS translation builder, e.g. wmt14_translate/de-en"
                        " (used for splits without text files).")
    flags.DEFINE_string("tfds_train_split", "train", "TFDS training split.")
    flags.DEFINE_string("tfds_dev_split", "validation", "TFDS dev split.")
    flags.DEFINE_string("tfds_test_split", "test", "TFDS test split.")
    flags.DEFINE_string("source_lang", "en",
                        "Source language code (TFDS direction).")
    flags.DEFINE_string("target_lang", "de", "Target language code (TFDS "
                        "direction; tokenizer of tokenized BLEU).")
    flags.DEFINE_string("tfds_data_dir", None, "TFDS data directory.")
    flags.DEFINE_string("tfds_manual_dir", None,
                        "Directory of manually downloaded TFDS archives.")
    for split in _SPLITS:
        flags.register_multi_flags_validator(
            [f"{split}_src", f"{split}_tgt"],
            lambda values: len({v is None for v in values.values()}) == 1,
            message=f"--{split}_src and --{split}_tgt go together")


def corpus_from_flags(split):
    """The `Corpus` for "train", "dev" or "test", or None if not given."""
    f = flags.FLAGS
    if getattr(f, f"{split}_src"):
        return Corpus(source_path=getattr(f, f"{split}_src"),
                      target_path=getattr(f, f"{split}_tgt"),
                      source_lang=f.source_lang, target_lang=f.target_lang)
    if f.tfds_name:
        return Corpus(tfds_name=f.tfds_name,
                      tfds_split=getattr(f, f"tfds_{split}_split"),
                      source_lang=f.source_lang, target_lang=f.target_lang,
                      tfds_data_dir=f.tfds_data_dir,
                      tfds_manual_dir=f.tfds_manual_dir)
    return None
