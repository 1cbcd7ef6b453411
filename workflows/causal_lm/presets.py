"""Language-model configs and presets: what `train --preset` picks
(`causal_lm/models.py` builds them).

Free of Keras, MLflow and TensorFlow, so `--help` and a config mistake answer at once,
and the same presets train from the prepared token streams on any backend (a GPU
machine with JAX alone included).
"""

from dataclasses import dataclass

from workflows.core.config import (
    DTYPE_POLICIES,
    MAX_BATCH_SIZE,
    MAX_LEARNING_RATE,
    Catalog,
    TrainingOptions,
    option,
    training_option,
)

EXPERIMENT = "language_model"  # the MLflow experiment of the language models


@dataclass(frozen=True)
class LMConfig(TrainingOptions):
    model: str = option("gpt", choices=("gpt",), help="the language model: gpt (a small GPT)")
    preset: str = option("cpu", help="the size preset (--preset): cpu or gpu")
    corpus: str | None = option(None, help="a UTF-8 text file, a folder of them or a "
                                          ".zip/.tar.gz (None: the IMDB reviews)")
    init_from: str | None = option(None, help="fine-tune this run (id or prefix), model URI "
                                             "or keras-hub causal LM (preset folder or name)")
    # fine-tuning: add this many words of the new corpus that the vocabulary splits worst,
    # their embeddings initialised from Word2Vec vectors (or from their pieces)
    extend_vocabulary: int = option(0, at_least=0, applies=lambda c: c.init_from is not None,
                                    help="fine-tuning: add this many words of the new corpus that "
                                         "the vocabulary splits worst")
    extension_init: str = option("word2vec", choices=("word2vec", "pieces"),
                                 applies=lambda c: c.extend_vocabulary > 0,
                                 help="their embeddings started from Word2Vec vectors or from "
                                      "their pieces")
    lora_rank: int = option(0, at_least=0, at_most=1024,
                            applies=lambda c: c.init_from is not None,
                            help="fine-tuning a keras-hub preset: train only low-rank adapters "
                                 "of its attention, of this rank (0: every weight)")
    vocabulary_size: int = option(5000, at_least=16,
                                  help="WordPiece entries learned on the train split")  # WordPiece entries learned on train
    sequence_length: int = option(128, at_least=4, at_most=4096,
                                  help="tokens of each training window")
    embed_dim: int = option(256, at_least=8, help="size of the token vectors")
    dense_dim: int = option(1024, at_least=8, help="width of each block's feed-forward layer")
    num_heads: int = option(4, at_least=1, help="attention heads")
    num_layers: int = option(4, at_least=1, help="Transformer decoder blocks")
    dropout: float = option(0.1, at_least=0, below=1, help="dropout rate inside the blocks")
    # peak of warmup, then linear decay
    learning_rate: float = option(1e-3, above=0, at_most=MAX_LEARNING_RATE,
                                  help="peak learning rate, after warmup; then a linear decay")
    warmup_steps: int = option(500, at_least=0, help="warmup steps")
    batch_size: int = option(32, at_least=1, at_most=MAX_BATCH_SIZE, help="windows a training step")
    steps_per_epoch: int = option(500, at_least=1,
                                  help="batches an epoch")  # an epoch is this many batches
    epochs: int = training_option("epochs", 20)
    max_train_minutes: float | None = training_option("max_train_minutes", 60.0)
    validation_windows: int = option(512, at_least=1,
                                     help="validation windows the perplexity is measured on each "
                                          "epoch (a fixed set)")  # fixed val windows, each epoch
    sample_tokens: int = option(30, at_least=1,
                                help="tokens generated from each prompt after an epoch")  # generated from each prompt, each epoch
    dtype_policy: str = option("auto", choices=DTYPE_POLICIES,
                               help="Keras dtype policy; auto: what the device does best "
                                    "(core/precision.py)")


CATALOG = Catalog({"gpt": {
    "cpu": LMConfig(),
    "gpu": LMConfig(preset="gpu", sequence_length=256, embed_dim=512, dense_dim=2048,
                    num_heads=8, num_layers=8, batch_size=64, steps_per_epoch=1000,
                    learning_rate=6e-4, warmup_steps=2000, max_train_minutes=None,
                    dtype_policy="auto"),
}}, default_preset="cpu")
