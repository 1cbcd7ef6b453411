"""IMDB sentiment models, the machinery behind `workflows.imdb_sentiment`.

- `presets`: one config dataclass per model family (bag of n-grams, RNNs,
  Transformer encoder), the catalog of named models, and the compiled models.
"""
