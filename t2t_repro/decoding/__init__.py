"""Decoding: greedy search and beam search (tensor2tensor's alive and
finished beams, GNMT length penalty) as one fixed-shape tf.while_loop
each, XLA-compilable. They see the model only through its decoding
contract (`start_decoding`, `decode_step`, `reorder_decode_cache`);
`decoders.py` picks between them (beam 1 = greedy)."""
