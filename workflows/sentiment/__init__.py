"""IMDB sentiment models, the machinery behind `workflows.imdb_sentiment`.

- One module per model family: `ngrams` (`bow`, `nbsvm`), `rnn`, `transformer`,
  `doc2vec`, `encoder` (and `hub_classifier`, its keras-hub presets, whose WordPiece
  vocabulary `hub_vocabulary` grows with the user's words), `lm_classifier`;
  each holds its config, its Keras network, its preprocessor layer and
  `build(config, data)`.
- `text_classifier`: every family's classifier as one Keras model (preprocessor and
  network, saved in one `.keras` file); `family`: what the families share (the base
  config, its loss and metrics, class weights, batch lengths); `token_ids`: the prepared
  token ids the RNNs and the Transformer read, and their `ReviewTokens`.
- `calibration`, `pyfunc`, `reviews`: the one calibration (Platt scaling for two
  classes), the one pyfunc of every classifier
  folder, the request check every sentiment pyfunc shares.
- `sources`: where a run's labelled texts come from (the IMDB reviews or a user's
  file), one interface; `user_texts`: a labelled file scored against a run's classes,
  the leaderboard of `run --texts`.
- `evaluation`, `metrics`: the test metrics and figures, of any number of classes.
- `exported`: a classifier as the `export` step writes it (calibration inside).
- `augmentation`: extra train rows (round-trip translation, random edits).
- `ensemble`, `ensemble_run`, `ensemble_pyfunc`, `lexicon`: stacking weights fitted on
  validation, the lesson's `ensemble` step and its pyfunc, the optional lexicon column.
"""
