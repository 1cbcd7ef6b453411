"""The retrieval lesson's configuration: one typed config for every retriever (`--retriever`),
its fields checked before any run starts; a field that does not apply to the chosen
retriever is refused. Light on purpose (no TensorFlow, no MLflow): `--help` reads it."""

from dataclasses import dataclass

import Stemmer

from workflows.core.config import Catalog, TrainingOptions, option, training_option

RETRIEVERS = ("bm25", "dense", "rerank", "intersection", "hybrid")
STEMMERS = ("none", *Stemmer.algorithms())
# the languages of the stop-word lists bm25s ships (`en_plus`: a longer English list)
STOP_WORDS = ("none", "da", "de", "en", "en_plus", "es", "fr", "it", "ko", "nl", "no", "pt",
              "ru", "sv", "tr", "zh")


def reads_bm25(config):
    return config.retriever != "dense"


def reads_encoder(config):
    return config.retriever != "bm25"


def fuses(config):
    return config.retriever in ("rerank", "intersection", "hybrid")


def fine_tunes(config):
    return config.retriever == "dense"


@dataclass(frozen=True)
class RetrievalConfig(TrainingOptions):
    retriever: str = option("bm25", choices=RETRIEVERS,
                            help="bm25, dense (the dual encoder), or BM25 and it together: rerank,"
                                 " intersection, hybrid")
    # BM25 (Lucene's defaults: k1 1.2, b 0.75)
    k1: float = option(1.2, at_least=0.0, at_most=10.0, applies=reads_bm25,
                       help="BM25: how fast repeated terms saturate (Lucene: 1.2)")
    b: float = option(0.75, at_least=0.0, at_most=1.0, applies=reads_bm25,
                      help="BM25: how much long documents are discounted, 0-1 (Lucene: 0.75)")
    # the catalogue's language: any Snowball stemmer (PyStemmer's list), and the stop
    # words bm25s ships for a language (`es`, `fr`, `de`, ...), or `none` for either
    stemmer: str = option("english", choices=STEMMERS, applies=reads_bm25,
                          help="the catalogue's language for stemming: any Snowball stemmer "
                               "PyStemmer has, or none")
    stop_words: str = option("en", choices=STOP_WORDS, applies=reads_bm25,
                             help="the stop words dropped: a list bm25s ships (en, es, fr, de, "
                                  "...), or none")
    # the dual encoder: a known name, a Hugging Face BERT folder, or a fine-tuned dense run
    # (`encoder_run`: what a fused retriever reads; what a dense one fine-tunes further,
    # e.g. a second round of `hybrid_answers` taught by that encoder's hybrid)
    encoder: str = option("all-minilm-l6-v2", applies=reads_encoder,
                          help="the dual encoder: a known name or a local Hugging Face BERT-"
                               "architecture folder")
    encoder_run: str = option("", applies=reads_encoder,
                              help="a fine-tuned dense run (id or prefix) whose encoder a fused "
                                   "retriever reads, or a dense run fine-tunes further")
    query_length: int = option(64, at_least=8, at_most=512, applies=reads_encoder,
                               help="WordPiece tokens of a query read")
    document_length: int = option(256, at_least=16, at_most=512, applies=reads_encoder,
                                  help="WordPiece tokens of a document read (the model's own "
                                       "limit: 256)")
    encode_batch_size: int = option(32, at_least=1, at_most=1024, applies=reads_encoder,
                                    help="texts encoded at once")
    exact_limit: int = option(100_000, at_least=1, applies=reads_encoder,
                              help="documents searched exactly; above it, an HNSW graph")  # documents; then HNSW
    # each document also as windows of this many sentences, its score its best window's
    # (HNSW of the windows above exact_limit documents); 0: one vector per document
    passage_sentences: int = option(0, at_least=0, at_most=100, applies=reads_encoder,
                                    help="each document also as windows of this many sentences, "
                                         "scored by its best window; 0: one vector a document")
    # putting the two together
    depth: int = option(100, at_least=1, at_most=10_000, applies=fuses,
                        help="documents each retriever hands to the fusion")
    # convex: w * dense + (1 - w) * bm25, a document missing from a list at its least;
    # rescored: the same, each document of either list scored by both retrievers
    fusion: str = option("convex", choices=("convex", "rescored", "rrf"),
                         applies=lambda c: c.retriever == "hybrid",
                         help="hybrid: convex (w * dense + (1 - w) * bm25), rescored (every "
                              "candidate scored by both) or rrf")
    hybrid_weight: float = option(-1.0, at_least=-1.0, at_most=1.0,  # -1: chosen on validation
                                  applies=lambda c: c.retriever == "hybrid",
                                  help="hybrid: the dense weight w; -1: chosen on validation")
    rrf_k: int = option(60, at_least=1, at_most=10_000, applies=lambda c: c.retriever == "hybrid",
                        help="reciprocal rank fusion's k")
    # fine-tuning the dual encoder (dense; 0 epochs: zero-shot)
    epochs: int = training_option("epochs", 0, at_least=0, at_most=100, applies=fine_tunes,
                                  help="fine-tuning epochs of the dual encoder; 0: zero-shot")
    batch_size: int = option(32, at_least=2, at_most=1024, applies=fine_tunes,
                             help="query-document pairs a step (the others' documents are each "
                                  "query's negatives)")
    learning_rate: float = option(2e-5, above=0.0, at_most=1e-2, applies=fine_tunes,
                                  help="fine-tuning learning rate")
    scale: float = option(20.0, above=0.0, at_most=1000.0, applies=fine_tunes,
                          help="the similarity scale of the contrastive loss (inverse temperature)")
    # texts embedded at once in a training step (the cached loss, no dropout); 0: the
    # whole batch at once, with dropout (memory grows with batch_size)
    chunk_size: int = option(8, at_least=0, at_most=1024, applies=fine_tunes,
                             help="texts embedded at once in a step (the cached loss, no dropout);"
                                  " 0: the whole batch, with dropout")
    negatives_depth: int = option(10, at_least=1, at_most=1000, applies=fine_tunes,
                                  help="rank depth from which hard negatives are drawn")
    # who mines the hard negatives: BM25, or the encoder before fine-tuning (documents
    # close in meaning that it must learn to tell apart)
    negatives_from: str = option("bm25", choices=("bm25", "encoder"), applies=fine_tunes,
                                 help="who mines the hard negatives: BM25, or the encoder before "
                                      "fine-tuning")
    # a cold start: pairs made with no judgement read (retrievers/pseudo_queries.py)
    pseudo_queries: str = option("none", choices=("none", "titles", "sentences",
                                                  "hybrid_answers"), applies=fine_tunes,
                                 help="a cold start: pairs made with no judgement read (titles, "
                                      "sentences, hybrid_answers); none")
    pseudo_query_count: int = option(2000, at_least=1, at_most=10_000_000,
                                     applies=lambda c: fine_tunes(c)
                                     and c.pseudo_queries != "none", help="pseudo-queries made")
    # hybrid_answers: the share of the queries kept, those whose first answer leads the
    # second by the widest margin (the teacher is right more often where it is surest)
    answer_share: float = option(1.0, above=0.0, at_most=1.0,
                                 applies=lambda c: fine_tunes(c)
                                 and c.pseudo_queries == "hybrid_answers",
                                 help="hybrid_answers: the share of the queries kept, those the "
                                      "teacher is surest of")
    # hybrid_answers with soft labels: each query's hard negative the teacher's second
    # answer, the target shared with its first by their fused scores' softmax at this
    # temperature (choose it on validation: docs/retrieval.md); 0: the first only
    answer_temperature: float = option(0.0, at_least=0.0, at_most=10.0,
                                       applies=lambda c: fine_tunes(c)
                                       and c.pseudo_queries == "hybrid_answers",
                                       help="hybrid_answers: soft labels from the first two "
                                            "answers at this temperature; 0: the first only")
    # with passages: what a pair's document and hard negative are, the whole document or
    # its window that the encoder before fine-tuning finds best for the query (what the
    # retriever will search is what it learns to rank; judged pairs or hybrid_answers)
    positives: str = option("documents", choices=("documents", "passages"),
                            applies=lambda c: fine_tunes(c) and c.passage_sentences > 0
                            and c.pseudo_queries in ("none", "hybrid_answers"),
                            help="with passages: a pair's document as the whole document, or its "
                                 "window the encoder finds best")
    patience: int = training_option("patience", 1, at_most=100, applies=fine_tunes)
    max_train_minutes: float | None = training_option("max_train_minutes", 30.0,
                                                      applies=fine_tunes)
    checkpoint_every_steps: int = training_option("checkpoint_every_steps", 50, at_least=1,
                                                  at_most=1_000_000, applies=fine_tunes)
    # the mean of several epochs' weights is scored on a validation loss, which a
    # fine-tuning of ranking has not (it keeps its best epoch by nDCG@10)
    average_epochs: int = training_option("average_epochs", 0, applies=lambda c: False)
    validation_pool_depth: int = option(10, at_least=1, at_most=1000, applies=fine_tunes,
                                        help="documents a validation query's pool holds (BM25's "
                                             "top ones)")
    # the data
    validation_share: float = option(0.2, at_least=0.0, below=1.0,
                                     help="share of the train queries held out for validation "
                                          "(when the data has no dev split)")
    distribution: str = training_option(
        "distribution", "none", choices=("none",),
        why="The retrieval lesson fine-tunes on one device: its negatives are the whole "
            "batch's, and the cached loss (chunk_size) grows the batch within one device's "
            "memory; leave distribution out.")


CATALOG = Catalog({name: {"default": RetrievalConfig(retriever=name)} for name in RETRIEVERS},
                  key="retriever")
