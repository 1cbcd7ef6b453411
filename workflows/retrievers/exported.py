"""A dense or hybrid retriever as the export takes it (`core/export.py`): its sentence
encoder, `(token_ids, padding_mask) -> unit-length embedding`, with what a search needs
beside it: the encoder's WordPiece tokenizer as a Hugging Face `tokenizer.json` (`[CLS]`
and `[SEP]` added, cut at the query length), the documents' embeddings and their ids.

A query's embedding times `embeddings.npy` is the cosine similarity of the query to
each document (or passage: `owners.npy` gives each row's document), as the kit's dense
search ranks them; a hybrid's BM25 half stays in the kit (bm25s, Python).
"""

import json

from workflows.core.config import ConfigError
from workflows.core.export import Exportable
from workflows.retrievers.dense import pad
from workflows.retrievers.searcher import OWNERS_FILE, Searcher

EXAMPLE_QUERY = "vitamin D and bone fractures"


def exportable(run, folder):
    """The `Exportable` of `run`'s retriever, saved in `folder` (its `retriever/`)."""
    searcher = Searcher.load(folder)
    encoder, length = searcher.encoder, searcher.settings.query_length
    if encoder is None:
        raise ConfigError(f"Run {run.info.run_id[:12]} is a {searcher.settings.retriever} "
                          "retriever: no network to export (its index is bm25s files, in "
                          "the run's model). Export a dense or hybrid run.")
    encoder.model.jit_compile = False  # (Keras exports the model's own graph)
    token_ids, padding_mask = pad(encoder.tokenizer.ids([EXAMPLE_QUERY], length), length, 1)
    copies = {"embeddings.npy": folder / "embeddings.npy",
              "documents.jsonl": folder / "documents.jsonl"}
    if (folder / OWNERS_FILE).is_file():
        copies[OWNERS_FILE] = folder / OWNERS_FILE
    return Exportable(
        encoder.model, {"token_ids": token_ids, "padding_mask": padding_mask},
        {"tokenizer.json": hugging_face_tokenizer(encoder.tokenizer, length),
         "retriever.json": {"retriever": searcher.settings.retriever, "query_length": length,
                            "padding_mask": "token_ids != 0"}},
        outputs="each text's unit-length embedding (rows: texts); times embeddings.npy: "
                "its cosine similarity to each document of documents.jsonl",
        copies=copies)


def hugging_face_tokenizer(tokenizer, max_length):
    """The encoder's WordPiece (an `EncoderTokenizer`) as a `tokenizers` JSON value:
    `Tokenizer.from_file("tokenizer.json").encode(text).ids` are the ids the kit gives."""
    from tokenizers import Tokenizer, processors

    copy = Tokenizer.from_str(tokenizer.wordpiece.tokenizer.to_str())
    copy.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", tokenizer.first),
                                                 ("[SEP]", tokenizer.last)])
    copy.enable_truncation(max_length)
    return json.loads(copy.to_str())
