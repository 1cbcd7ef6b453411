"""Datasets, tokenization and word vectors: loaded carefully, cached, never modified.

Knows nothing of models or MLflow. One module per dataset (`imdb`, `spa_eng`) and per
embedding source (`glove`, `word2vec`); `sources` finds, downloads and extracts
archives; `cache` keys prepared data by the settings that produced it.
"""
