"""t2t_repro: the Transformer of 'Attention Is All You Need' in TF/Keras.

Read it as the pipeline: `config` (every setting once), `layers` and
`model`, `data`, `training` (the Trainer and its recipe), `checkpoints`
(the run directory), `decoding` and `inference` (one translation graph),
`evaluation`, `serving` (the SavedModel export), and `cli` (the t2t-*
tools, which only read flags and call the rest)."""
