"""Translating and scoring with a trained model, for every caller.

- graph.py: `TranslationGraph`, strings in and strings out in one
  TensorFlow graph, with its serving_default, translate and score
  signatures: the SavedModel serves it (serving.py) and this process runs
  the same one.
- request_checks.py: what the graph refuses before tokenizing anything.
- batching.py: the loop that batches sentences by length and restores
  their order, and `BatchingTranslator`, the translators' base.
- translators.py: `ModelTranslator` (a model in this process) and
  `SavedModelTranslator` (an export).
- exports.py: loading an export and checking flags against its limits.
- scoring.py: `Scorer`, log P(target | source) of given pairs.
- threads.py: each op's share of the cores while decoding.

The public `t2t_repro.Translator` (translator.py) and `CTranslate2Translator`
(ct2.py) are built on these.
"""
