"""BERT's WordPiece tokenization through Hugging Face `tokenizers`: pretrained encoders
read text the way they were trained to, on any backend and without TensorFlow.

As BERT's reference tokenizer: invisible characters dropped, control characters read as
spaces (IMDB's "\\x97" dashes part words), CJK characters split apart, optional
lowercasing (with compatibility forms normalized, NFKC, and accents stripped),
punctuation split off, then each word greedily cut into the longest pieces of the
vocabulary (`##` marks a piece inside a word); a word with no such cut, or over 100
characters, is `[UNK]`. The same ids as the plain-Python tokenizer it replaced, on
3,000 IMDB reviews and the cases of `tests/data_prep/test_wordpiece.py`.
"""

MAX_WORD_CHARACTERS = 100


class WordPiece:
    """`WordPiece(vocabulary, lowercase)(texts)`: each text's token ids."""

    def __init__(self, vocabulary, lowercase=True, unknown="[UNK]"):
        from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers

        self.ids = {token: i for i, token in enumerate(vocabulary)}
        self.lowercase, self.unknown = lowercase, self.ids[unknown]
        self.tokenizer = Tokenizer(models.WordPiece(
            self.ids, unk_token=unknown, max_input_chars_per_word=MAX_WORD_CHARACTERS))
        steps = [normalizers.NFKC()] if lowercase else []  # full-width letters, "…", "½"
        steps += [normalizers.Replace(Regex(r"[\p{Cc}&&[^\t\n\r]]"), " "),
                  normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                             strip_accents=lowercase, lowercase=lowercase)]
        self.tokenizer.normalizer = normalizers.Sequence(steps)
        self.tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()

    def __call__(self, texts):
        return [encoding.ids for encoding in
                self.tokenizer.encode_batch(list(texts), add_special_tokens=False)]

    def encode(self, text):
        return self.tokenizer.encode(text, add_special_tokens=False).ids
