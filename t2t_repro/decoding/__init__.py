"""Incremental decoding: greedy and beam search as fixed-shape graphs."""
