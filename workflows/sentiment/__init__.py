"""IMDB sentiment models, the machinery behind `workflows.imdb_sentiment`.

- One module per model family: `ngrams` (`bow`, `nbsvm`), `rnn`, `transformer`,
  `doc2vec`, `encoder`, `lm_classifier`; each holds its config, its Keras model, how
  reviews become its inputs, its classifier and `build(config, data)`.
- `shared`: what the families share (the base config, texts and batches, the classifier
  folder and `load_classifier`); `token_ids`: the prepared token ids the RNNs and the
  Transformer read, and their `TokenClassifier`.
- `calibration`, `pyfunc`, `reviews`: Platt scaling, the one pyfunc of every classifier
  folder, the request check every sentiment pyfunc shares.
- `evaluation`, `metrics`: the test metrics and figures.
- `augmentation`: extra train rows (round-trip translation, random edits).
- `ensemble`, `ensemble_run`, `ensemble_pyfunc`, `lexicon`: stacking weights fitted on
  validation, the lesson's `ensemble` step and its pyfunc, the optional lexicon column.
"""
