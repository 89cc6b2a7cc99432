"""Paths to the shared corpora beside the checkout (never copied in)."""

import os

# tests/helpers/ -> the checkout -> beside it.
SHARED = os.path.normpath(
    os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data")
)
MULTI30K = os.path.join(SHARED, "multi30k")


def multi30k(split, lang):
    return os.path.join(MULTI30K, f"{split}.{lang}.gz")
