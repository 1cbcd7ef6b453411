"""IMDB sentiment models, the machinery behind `workflows.imdb_sentiment`.

- `presets`: one config dataclass per model family (bag of n-grams, NBSVM, RNNs,
  Transformer encoder, a fine-tuned language model), the catalog of named models, and
  the compiled models.
- `subword_classifier`, `pyfunc`: a fine-tuned language model read through its own
  WordPiece tokenizer, and its MLflow pyfunc.
- `ensemble`, `ensemble_run`, `ensemble_pyfunc`: stacking weights fitted on validation,
  the lesson's `ensemble` step that fits and logs them, and the pyfunc
  that carries every member.
- `reviews`: the request check every sentiment pyfunc shares.
"""
