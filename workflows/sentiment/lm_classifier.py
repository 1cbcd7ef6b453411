"""A language model's GPT under a pooled classifier head (`lm_classifier`), fine-tuned
with discriminative learning rates and gradual unfreezing (ULMFiT); reviews are read as
the language model's WordPiece tokens.

The classifier reads raw texts through its `SubwordRows` (`preprocessors.py`):
tokenized the way the language model read its corpus (each document starts after
`[END]`), in batches of similar length.
"""

import dataclasses
from dataclasses import dataclass

from workflows.core.config import (
    DTYPE_POLICIES,
    MAX_BATCH_SIZE,
    MAX_LEARNING_RATE,
    ConfigError,
    option,
    training_option,
)
from workflows.sentiment.family import TrainConfig

LM_ARCHITECTURE = ("vocabulary_size", "sequence_length", "embed_dim", "dense_dim",
                   "num_heads", "num_layers", "dtype_policy")


@dataclass(frozen=True)
class LMClassifierConfig(TrainConfig):
    """`pretrained=False` trains the same architecture from scratch, for comparison.
    The architecture fields are the source run's (set from `init_from`)."""

    init_from: str | None = option(None, help="the language_model run (id or prefix) or "
                                                 "model URI whose GPT it fine-tunes")
    pretrained: bool = option(True, help="False: the same architecture and tokenizer with "
                                         "random weights (the baseline pretraining must beat)")
    max_review_tokens: int = option(512, at_least=2, help="subword tokens read per text")
    layer_lr_decay: float = option(0.5, above=0, at_most=1, help="learning-rate factor "
                                   "for each layer down from the top")
    unfreeze_epochs: float = option(1.0, at_least=0, help="epochs over which the layers "
                                    "are unfrozen top-down; 0: all trained from the start")
    dropout: float = option(0.1, at_least=0, below=1, help="dropout rate before the "
                            "classification head")
    optimizer: str = option("adam", choices=("adam",), help="the optimizer")
    learning_rate: float = option(2e-4, above=0, at_most=MAX_LEARNING_RATE,
                                  help="peak learning rate, after 10% warmup; then a "
                                       "linear decay")
    batch_size: int = option(16, at_least=1, at_most=MAX_BATCH_SIZE,
                             help="texts a training step")
    batch_tokens: int | None = option(
        None, at_least=8,
        help="with bucketing: padded tokens a batch (a batch of length L holds "
             "batch_tokens // L texts); empty: batch_size texts in every batch")
    epochs: int = training_option("epochs", 3)
    patience: int = training_option("patience", 1)
    vocabulary_size: int = option(5000, at_least=16, help="without init_from: the "
                                  "WordPiece vocabulary's size")
    sequence_length: int = option(128, at_least=4, help="the GPT's chunk length, tokens")
    embed_dim: int = option(256, at_least=8, help="size of the token vectors")
    dense_dim: int = option(1024, at_least=8, help="width of each feed-forward layer")
    num_heads: int = option(4, at_least=1, help="attention heads")
    num_layers: int = option(4, at_least=1, help="Transformer decoder blocks")
    dtype_policy: str = option("float32", choices=DTYPE_POLICIES, help="Keras dtype "
                               "policy; auto: what the device does best (core/precision.py)")


MODELS = {"lm_classifier": LMClassifierConfig(model="lm_classifier")}


def complete_config(config):
    """`config` with the language-model run it starts from (`init_from`, as a run id),
    and that run's architecture, vocabulary size and dtype policy."""
    from workflows.causal_lm import source as lm_source

    if not config.init_from:
        raise ConfigError("lm_classifier fine-tunes a language model: give --init-from with "
                          "a run id or model URI from `python -m workflows.language_model`.")
    run = lm_source.source_run(config.init_from)
    if run.data.tags.get("model_family") == "hub":
        raise ConfigError(f"Run {run.info.run_id} fine-tuned a keras-hub preset; lm_classifier "
                          "builds on the kit's own GPT runs (for a pretrained encoder: "
                          "--model encoder --set encoder=FOLDER).")
    source = lm_source.source_config(run)
    return dataclasses.replace(config, init_from=run.info.run_id,
                               **{name: getattr(source, name) for name in LM_ARCHITECTURE})


# ## The model


def build_model(config, pretrained_gpt, steps_per_epoch, classes=2):
    """GPTClassifier over the pretrained GPT (or a new one), compiled with LayerwiseAdam:
    each layer down trains at `layer_lr_decay` times the rate of the one above, and the
    layers unfreeze top-down, evenly over the first `unfreeze_epochs`."""
    import layers
    from workflows.causal_lm import models as gpt_models
    from workflows.core import precision
    from workflows.sentiment.family import compile_loss, output_units

    gpt = pretrained_gpt if config.pretrained else gpt_models.GPT(
        config.vocabulary_size, config.sequence_length, config.embed_dim, config.dense_dim,
        config.num_heads, config.num_layers, dropout=0.1,
        dtype=precision.resolve_precision(config.dtype_policy))
    model = gpt_models.GPTClassifier(gpt, config.dropout, num_classes=output_units(classes))
    names = ["final_norm", *(f"decoder_{i}" for i in reversed(range(config.num_layers))),
             "embedding"]  # top-down
    step = round(config.unfreeze_epochs * steps_per_epoch / len(names))
    groups = {name: (config.layer_lr_decay ** depth, depth * step)
              for depth, name in enumerate(names)}
    total = max(config.epochs * steps_per_epoch, 2)
    schedule = layers.WarmupLinearDecay(config.learning_rate, max(total // 10, 1), total)
    return compile_loss(model, layers.LayerwiseAdam(schedule, groups=groups), classes)


def build(config, data):
    """The language model's GPT and WordPiece vocabulary under the classifier head;
    the reviews read as its subword tokens, batched by length."""
    from data_prep.text import pad_rows
    from workflows.causal_lm import models as gpt_models
    from workflows.causal_lm import source as lm_source
    from workflows.core.batches import token_batches
    from workflows.sentiment.family import REVIEW_LENGTHS, Trainable, class_weights
    from workflows.sentiment.preprocessors import SubwordRows, subword_rows
    from workflows.sentiment.text_classifier import TextClassifier

    prepared = data.prepared
    weights = class_weights(config, prepared.labels("train"), prepared.classes)
    generator = lm_source.load_generator(lm_source.source_run(config.init_from))
    print(f"Tokenizing the reviews with the vocabulary of run {config.init_from}")
    splits = {}
    for split in ("train", "val"):
        rows = subword_rows(generator.tokenizer, prepared.texts(split),
                            config.max_review_tokens)
        splits[split] = (pad_rows(rows, config.max_review_tokens), prepared.labels(split))

    def batches(split, epoch=None):
        return token_batches(*splits[split], REVIEW_LENGTHS, config.batch_size,
                             getattr(config, "batch_tokens", None),
                             None if epoch is None else config.seed + epoch,
                             weights=weights[splits[split][1]] if split == "train" else None)

    model = build_model(config, generator.model, len(batches("train", 0)),
                        len(prepared.classes))
    rows = SubwordRows(generator.vocabulary, config.max_review_tokens,
                       generator.model.max_length)
    classifier = TextClassifier(model, rows, prepared.classes,
                                requires=["layers", gpt_models.__name__])
    return Trainable(model, lambda epoch: batches("train", epoch), batches("val"),
                     len(prepared.labels("train")), classifier,
                     tags={"model_family": "lm_classifier",
                           "pretrained": str(config.pretrained).lower()},
                     artifacts={"vocabulary.txt": "\n".join(generator.vocabulary)})
