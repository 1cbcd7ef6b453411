"""Sequence-to-sequence translation, the machinery behind `workflows.translation`.

- `presets`: the translation configs and presets, free of Keras (`--help` answers at once);
- `transformer`, `gru`: the two model families (`TransformerTranslator`, `GRUTranslator`),
  with typed sublayers and cached one-token steps;
- `translator`: the exported folder that turns English strings into Spanish ones and its
  `Decoder` (batched greedy and beam search over that cache); `batching`: the
  teacher-forcing batches bucketed by length (`PairBatches`) both models train on; the
  pairs' token ids come from `data_prep.pair_tokens`;
- `metrics`: BLEU and chrF against every reference; `evaluation`: the test-set scores
  logged to a run (the lesson's `evaluate`);
- `pyfunc`: the translator as an MLflow model.

A logged translator ships this package, `layers/` and `data_prep/`, nothing else.
"""
