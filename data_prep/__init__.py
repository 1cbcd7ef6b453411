"""Datasets, tokenization and word vectors: loaded carefully, cached, never modified.

Knows nothing of models or MLflow. One module per dataset (`imdb`, `spa_eng`) and per
embedding source (`glove`, `word2vec`); `sources` finds, downloads and extracts
archives; `cache` keys prepared data by the settings that produced it.
"""

from data_prep.commands import defer_heavy_imports

# TensorFlow, Keras, MLflow and the other heavy libraries load on first use, with
# TensorFlow's start-up noise hidden: a command's `--help` and a mistyped flag answer at
# once, whichever module of the kit is imported first.
defer_heavy_imports()
