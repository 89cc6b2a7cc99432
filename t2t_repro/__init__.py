"""t2t_repro: the Transformer of 'Attention Is All You Need' in TF/Keras."""
