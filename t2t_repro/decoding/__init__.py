"""Decoding: greedy search and beam search (tensor2tensor's alive and
finished beams, GNMT length penalty), each one tf.while_loop whose batch
shrinks as sentences finish, or of fixed shapes for XLA. They see the
model only through its decoding contract (`start_decoding`,
`decode_step`, `reorder_decode_cache`); `decoders.py` picks between them
(beam 1 = greedy)."""
