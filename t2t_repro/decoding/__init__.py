"""Decoding: greedy search and beam search (tensor2tensor's alive and
finished beams, GNMT length penalty). Each search supplies its state and
step to one of two loops (`loops.py`): one whose batch shrinks as
sentences finish, or one of fixed shapes for XLA. They see the model only
through its decoding contract (`common.DecodingModel`); `decoders.py`
picks between them (beam 1 = greedy); `precision.py` decodes in bf16."""
