"""Translation configs and presets: what `train --preset` picks (`seq2seq/transformer.py`
and `seq2seq/gru.py` build them).

Free of Keras, MLflow and TensorFlow, so `--help` and a config mistake answer at once,
and the same presets train from the prepared token arrays on any backend (a GPU
machine with JAX and no TensorFlow included).
"""

from dataclasses import dataclass

from workflows.core.config import (
    DTYPE_POLICIES,
    MAX_BATCH_SIZE,
    MAX_LEARNING_RATE,
    RANDOM_GENERATORS,
    Catalog,
    ConfigError,
    TrainingOptions,
    all_of,
    option,
    training_option,
    when,
)

EXPERIMENT = "translation"  # the MLflow experiment of the translators
MAX_BEAM_WIDTH = 64  # = translator.MAX_BEAM_WIDTH (the logged pyfunc ships without presets)

# One dataclass for both translators; fields of one model only say so with `applies`.
TRANSFORMER, GRU_ONLY = when("model", "transformer"), when("model", "gru_seq2seq")


BATCH_TOKENS_HELP = (
    "with bucketing, the token budget of a batch: pairs are padded to the first of a few "
    "fixed lengths (multiples of bucket_width up to sequence_length) that holds them, and "
    "a batch of length L holds batch_tokens // L pairs (a multiple of 8), so every batch "
    "costs about the same and a run compiles one train step per length")


@dataclass(frozen=True)
class TranslationConfig(TrainingOptions):
    """One translator; the defaults are the tutorial's Transformer."""

    model: str = option("transformer", choices=("transformer", "gru_seq2seq"),
                        help="transformer, or the tutorial's GRU translator (gru_seq2seq)")
    preset: str = option("tutorial", help="the preset (--preset): tutorial, cpu or gpu")
    direction: str = option("en-es", help="source-target languages: en-es or es-en, or "
                                          "either order of --languages A-B with --pairs")
    # joint_wordpiece: one WordPiece vocabulary for both languages
    tokenization: str = option("word", choices=("word", "wordpiece", "joint_wordpiece"),
                               help="word (the tutorial's vocabularies), wordpiece (one per "
                                    "language) or joint_wordpiece (one for both)")
    joint_vocabulary_size: int = option(
        8000, at_least=16, applies=when("tokenization", "joint_wordpiece"),
                                        help="joint_wordpiece: the vocabulary's size")
    sequence_length: int = option(20, at_least=2,
                                  help="longest source / target input, in tokens")
    embed_dim: int = option(256, at_least=1, help="size of the token vectors")
    dense_dim: int = option(2048, at_least=1, applies=TRANSFORMER,
                            help="width of each block's feed-forward layer")
    num_heads: int = option(8, at_least=1, applies=TRANSFORMER, help="attention heads")
    key_dim: int | None = option(256, at_least=1, applies=TRANSFORMER,
                                 help="size of each head's queries and keys; empty: embed_dim // "
                                      "num_heads")  # None: embed/heads
    encoder_layers: int = option(1, at_least=1, applies=TRANSFORMER, help="encoder blocks")
    decoder_layers: int = option(1, at_least=1, applies=TRANSFORMER, help="decoder blocks")
    # inside the Transformer blocks and after the embeddings
    dropout: float = option(0.0, at_least=0, below=1, applies=TRANSFORMER,
                            help="dropout rate inside the blocks and after the embeddings")
    output_dropout: float = option(0.5, at_least=0, below=1,
                                   help="dropout rate before the output layer")
    norm_first: bool = option(False, applies=TRANSFORMER,
                              help="pre-LN blocks (normalize before each sublayer) instead of "
                                   "post-LN")
    position: str = option("learned", choices=("learned", "sine"), applies=TRANSFORMER,
                           help="position embeddings: learned, or Vaswani's sinusoids")
    tie_embeddings: bool = option(False, applies=TRANSFORMER,
                                  help="the output layer reuses the target embedding's weights")
    scale_embeddings: bool = option(False, applies=TRANSFORMER,
                                    help="scale the embeddings by sqrt(embed_dim), as Vaswani et "
                                         "al.")
    # one embedding layer for source and target (needs joint_wordpiece)
    share_embeddings: bool = option(
        False, applies=all_of(TRANSFORMER, when("tokenization", "joint_wordpiece")),
                                    help="one embedding layer for source and target (needs "
                                         "joint_wordpiece)")
    # each stack of blocks one scan over stacked weights: compiled once, not once a block
    scan_blocks: bool = option(False, applies=TRANSFORMER,
                               help="each stack of blocks one scan over stacked weights: compiled "
                                    "once, not once a block")
    latent_dim: int = option(1024, at_least=1, applies=GRU_ONLY,
                             help="gru_seq2seq: the GRU's units")
    attention: bool = option(False, applies=GRU_ONLY,
                             help="gru_seq2seq: additive (Bahdanau) attention over the source")
    optimizer: str = option("rmsprop", choices=("rmsprop", "adam"), help="the optimizer")
    # constant; noam: a scale of the curve; cosine: the peak
    learning_rate: float = option(0.001, above=0, at_most=MAX_LEARNING_RATE,
                                  help="constant: the rate; noam: a scale of the curve; cosine: "
                                       "the peak")
    # cosine: warmup over a share of the steps the run affords (its epochs, or its wall
    # budget at the pace measured), then cosine decay to 0 at its end
    schedule: str = option("constant", choices=("constant", "noam", "cosine"),
                           help="constant; noam (warmup then inverse square root); cosine (warmup "
                                "over warmup_share of the steps the run affords, then decay to 0)")
    warmup_steps: int = option(4000, at_least=1, applies=when("schedule", "noam"),
                               help="noam: warmup steps")
    warmup_share: float = option(0.1, at_least=0, below=1, applies=when("schedule", "cosine"),
                                 help="cosine: share of the run's steps spent warming up")
    label_smoothing: float = option(0.0, at_least=0, below=1,
                                    help="label smoothing of the token loss")
    # bucketing: length buckets with fixed boundaries, batch sizes from batch_tokens; else
    # every batch is batch_size x sequence_length (the tutorial)
    bucketing: bool = option(False, help="batch pairs of similar length to a token budget "
                                         "(batch_tokens) instead of batch_size pairs")
    batch_size: int = option(64, at_least=1, at_most=MAX_BATCH_SIZE,
                             applies=when("bucketing", False),
                             help="without bucketing: pairs a batch")
    batch_tokens: int = option(4096, at_least=8, applies=when("bucketing", True),
                               help=BATCH_TOKENS_HELP)
    # bucket lengths: multiples of this up to sequence_length (one train step each):
    # narrow buckets pad less (a CPU's gain), wide ones compile fewer steps (a GPU's)
    bucket_width: int = option(8, at_least=1, applies=when("bucketing", True),
                               help="bucket lengths are multiples of this: narrow pads less (a "
                                    "CPU's gain), wide compiles fewer steps (a GPU's)")
    epochs: int = training_option("epochs", 30)
    patience: int = training_option("patience", 3)
    dtype_policy: str = option("float32", choices=DTYPE_POLICIES,
                               help="Keras dtype policy; auto: what the device does best "
                                    "(core/precision.py)")
    # JAX's generator of dropout masks (core/devices.py: rbg compiles and runs faster)
    random_generator: str = option("threefry", choices=RANDOM_GENERATORS,
                                   help="JAX's generator of dropout masks (rbg compiles and runs "
                                        "faster)")
    beam_width: int = option(4, at_least=1, at_most=MAX_BEAM_WIDTH,
                             help="beams of the beam search that evaluate and translate use by "
                                  "default")
    validation_pairs: int = option(3000, at_least=1,
                                   help="validation pairs the validation loss is measured on (a "
                                        "fixed subset)")  # fixed val subset for the val loss
    bleu_sentences: int = option(300, at_least=1,
                                 help="validation sentences decoded for BLEU and chrF after an "
                                      "epoch")
    bleu_every_epochs: int = option(1, at_least=1,
                                    help="decode them every this many epochs (a GPU: several)")
    # batches dispatched back to back before the metrics are read (which waits for the
    # device): a GPU computes one while the host prepares the next
    steps_per_execution: int = option(1, at_least=1, at_most=1000,
                                      help="batches dispatched back to back before the metrics are"
                                           " read (a GPU computes one while the host prepares the "
                                           "next)")


CPU = {"preset": "cpu", "tokenization": "wordpiece", "sequence_length": 40, "embed_dim": 256,
       "dense_dim": 1024, "num_heads": 4, "key_dim": None, "encoder_layers": 2,
       "decoder_layers": 2, "dropout": 0.1, "output_dropout": 0.0, "norm_first": True,
       "tie_embeddings": True, "scale_embeddings": True, "optimizer": "adam",
       "learning_rate": 1.0, "schedule": "noam", "warmup_steps": 2000, "label_smoothing": 0.1,
       "bucketing": True, "batch_tokens": 1536, "bucket_width": 4, "epochs": 40, "patience": 3,
       "max_train_minutes": 60.0, "dtype_policy": "auto"}
# fairseq's IWSLT recipe for ~100k-pair corpora (transformer_iwslt_de_en; Sennrich & Zhang
# 2019): one vocabulary with every embedding shared, a narrow FFN, 4 heads, dropout 0.3,
# large token batches, and the mean of the last epochs' weights; the learning rate warms
# up over a tenth of the steps the budget affords and decays to 0 at its end.
GPU = {**CPU, "preset": "gpu", "tokenization": "joint_wordpiece", "share_embeddings": True,
       "embed_dim": 512, "dense_dim": 1024, "num_heads": 4, "encoder_layers": 6,
       "decoder_layers": 6, "dropout": 0.3, "batch_tokens": 8192, "bucket_width": 16,
       "schedule": "cosine", "learning_rate": 0.001, "warmup_share": 0.1,
       "max_train_minutes": 12.0, "epochs": 200, "patience": 8, "average_epochs": 5,
       "bleu_every_epochs": 5,
       "dtype_policy": "auto", "random_generator": "rbg", "steps_per_execution": 16,
       "scan_blocks": True}
GRU = {"model": "gru_seq2seq", "tokenization": "wordpiece", "sequence_length": 40,
       "attention": True, "optimizer": "adam", "output_dropout": 0.3, "bucketing": True,
       "epochs": 40}
CATALOG = Catalog({
    "transformer": {"tutorial": TranslationConfig(), "cpu": TranslationConfig(**CPU),
                    "gpu": TranslationConfig(**GPU)},
    "gru_seq2seq": {
        "tutorial": TranslationConfig(model="gru_seq2seq", epochs=15),
        "cpu": TranslationConfig(**GRU, preset="cpu", latent_dim=512, batch_tokens=1536,
                                 bucket_width=4,
                                 max_train_minutes=60.0),
        "gpu": TranslationConfig(**GRU, preset="gpu", latent_dim=1024, batch_tokens=8192,
                                 bucket_width=16,
                                 dtype_policy="auto"),
    },
}, default_preset="tutorial")
make_config = CATALOG.make



def check_length_penalty(alpha):
    if alpha is not None and not 0 <= alpha <= 5:
        raise ConfigError(f"--length-penalty (alpha) must be from 0 to 5, got {alpha} "
                          "(0.6-1.0 is usual).")


def length_penalty_flag(parser, what):
    parser.add_argument("--length-penalty", type=float, metavar="ALPHA", help=f"{what} by "
                        "log-likelihood / ((5 + length) / 6) ** ALPHA (Wu et al. 2016; "
                        "0.6-1.0 is usual; choose it on validation with "
                        "benchmarks/length_penalty.py; default 0: no penalty)")


def beam_width_flag(parser):
    parser.add_argument("--beam-width", type=int, help="1 for greedy (default: the run's)")


def check_beam_width(beam_width):
    if beam_width is not None and not 1 <= beam_width <= MAX_BEAM_WIDTH:
        raise ConfigError(f"--beam-width must be from 1 (greedy) to {MAX_BEAM_WIDTH}, "
                          f"got {beam_width}.")


def check_limit(limit):
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit must be at least 1, got {limit}.")


def check_n_best(n_best):
    if n_best is not None and not 1 <= n_best <= MAX_BEAM_WIDTH:
        raise ConfigError(f"--n-best must be from 1 to {MAX_BEAM_WIDTH}, got {n_best}.")
