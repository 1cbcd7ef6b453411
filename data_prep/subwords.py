"""WordPiece vocabularies (keras-hub) that keep case, accents and punctuation."""

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[START]", "[END]")  # [PAD] is id 0


def learn_wordpiece(texts, vocabulary_size, special_tokens=SPECIAL_TOKENS):
    """A keras-hub WordPiece vocabulary learned from `texts` (case and accents kept).

    Unlike word-level vocabularies, punctuation and case survive, so a subword model
    writes readable text. The vocabulary starts with `special_tokens`.
    """
    import keras_hub  # with tensorflow-text, only to learn or apply WordPiece:
    import tensorflow as tf  # prepared token arrays load where they are absent (JAX)

    return keras_hub.tokenizers.compute_word_piece_vocabulary(
        tf.data.Dataset.from_tensor_slices(list(texts)).batch(1024),
        vocabulary_size, lowercase=False, strip_accents=False,
        reserved_tokens=list(special_tokens),
    )


def make_wordpiece_tokenizer(vocabulary, sequence_length=None, special_tokens=SPECIAL_TOKENS):
    """A keras-hub `WordPieceTokenizer` for a vocabulary from `learn_wordpiece`."""
    import keras_hub  # likewise

    return keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=vocabulary, sequence_length=sequence_length, lowercase=False,
        strip_accents=False, special_tokens=list(special_tokens),
    )
