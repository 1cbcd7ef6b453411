"""Datasets, tokenization and word vectors: loaded carefully, cached, never modified.

Knows nothing of models or MLflow. One module per dataset (`imdb`, `spa_eng`, `corpus`,
`retrieval_corpus`) and per embedding source (`glove`, `word2vec`, `encoders`); `cache`
finds, verifies and extracts sources and keys prepared data by the settings that
produced it; `text` turns text into token ids. How a command starts and fails is the
`process` package's. Heavy libraries are imported inside the functions that use them.
"""
