"""Sequence-to-sequence translation, the machinery behind `workflows.translation`.

- `tokenization`: word or WordPiece token ids of the pairs (cached), detokenization;
- `batching`: teacher-forcing batches bucketed by length, for any backend;
- `models`: `TransformerTranslator` and `GRUTranslator`, with typed sublayers and
  cached one-token steps;
- `decoding`: batched greedy and beam search over that cache (keras-hub samplers);
- `translator`: the exported folder that turns English strings into Spanish ones;
- `metrics`: BLEU and chrF against every reference; `evaluation`: the test-set scores
  logged to a run (the lesson's `evaluate`);
- `pyfunc`: the translator as an MLflow model.

A logged translator ships this package, `layers/` and `data_prep/`, nothing else.
"""
