"""Where the tests read Multi30k (never copied into the checkout): the
offline mirror beside the checkout, `../shared/data/multi30k`, when it is
there; else the checkout's `data/multi30k`, which README command 1
(`t2t-fetch multi30k --tokenized_references`) downloads."""

import os

# tests/helpers/ -> the checkout.
CHECKOUT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
MIRROR = os.path.normpath(os.path.join(CHECKOUT, "..", "shared", "data"))
# The mirror's index of its files with their SHA-256: a record of the
# checksums made apart from the package's pinned table.
MIRROR_README = os.path.join(MIRROR, "README.md")
MULTI30K = (
    os.path.join(MIRROR, "multi30k")
    if os.path.isdir(os.path.join(MIRROR, "multi30k"))
    else os.path.join(CHECKOUT, "data", "multi30k")
)


def multi30k(split, lang):
    return os.path.join(MULTI30K, f"{split}.{lang}.gz")
