"""A classifier on a pretrained text encoder (`encoder`; BERT architecture,
`data_prep.encoders`, all-MiniLM-L6-v2 by default), fine-tuned on the reviews and
sentence slices of them: what it learned of English before IMDB carries to short text
from other domains.

Reviews are read as the encoder's WordPiece tokens (`[CLS] ... [SEP]`, at most
`max_review_tokens`; plain Python, no TensorFlow needed): a longer review is cut to its
start (`head`) or to its start and its end (`head+tail`), where a review's verdict
usually is. The mean of the encoder's outputs over a review's tokens goes through dropout
to P(positive). The classifier reads raw texts through its `WordPieceRows`
(`preprocessors.py`), in batches of similar length padded to a few fixed lengths.
"""

from dataclasses import dataclass

from data_prep.text import SLICE_PLACES
from workflows.core.config import (
    MAX_BATCH_SIZE,
    MAX_LEARNING_RATE,
    option,
    training_option,
    unless,
)
from workflows.sentiment.family import TrainConfig

ENCODER_READS = ("head", "head+tail")  # a long review's start, or its start and its end


@dataclass(frozen=True)
class EncoderConfig(TrainConfig):
    """The mean of the encoder's outputs over a review's tokens -> Dropout -> sigmoid,
    every weight trained (`read`: which part of a long review it reads; the figures of
    each are in benchmarks/RESULTS.md)."""

    encoder: str = option("all-minilm-l6-v2", help="the pretrained encoder: "
                          "all-minilm-l6-v2 (fetched once), a BERT folder in Hugging Face "
                          "format, any folder keras-hub's TextClassifier.from_preset reads "
                          "(a keras-hub preset; a Hugging Face BERT, DistilBERT, RoBERTa, "
                          "XLM-RoBERTa or ALBERT folder) or, online, a keras-hub preset name")
    max_review_tokens: int = option(128, at_least=8, at_most=512,
                                    help="WordPiece tokens of a text read")
    read: str = option("head+tail", choices=ENCODER_READS, applies=lambda c: kit_bert(c),
                       help="a long text's start, or its start and its end (the kit's "
                            "BERT only; a keras-hub preset reads the start)")
    extend_vocabulary: int = option(
        0, at_least=0, at_most=50_000, applies=lambda c: not kit_bert(c),
        help="a keras-hub WordPiece preset: add the N most frequent words of the training "
             "texts that its tokenizer cuts into 3 or more pieces, as one token each (new "
             "embedding rows: the mean of their pieces'); 0: its vocabulary as it is")
    sentence_slices: int = option(1, at_least=0, help="slices of 1-2 sentences added "
                                  "per train review, labelled as it; 0: none")
    slices_from: str = option("anywhere", choices=SLICE_PLACES,
                              applies=unless("sentence_slices", 0),
                              help="where in a review its slices are taken")
    dropout: float = option(0.1, at_least=0, below=1, applies=lambda c: kit_bert(c),
                            help="dropout rate before the classification head (the kit's "
                                 "BERT only; a keras-hub preset keeps its own)")
    optimizer: str = option("adam", choices=("adam",), applies=lambda c: kit_bert(c),
                            help="the optimizer (the kit's BERT only; a keras-hub preset "
                                 "trains with its task's own)")
    learning_rate: float = option(3e-5, above=0, at_most=MAX_LEARNING_RATE,
                                  help="peak learning rate, after 10% warmup; then a "
                                       "linear decay")
    batch_size: int = option(32, at_least=1, at_most=MAX_BATCH_SIZE,
                             help="texts a training step")
    epochs: int = training_option("epochs", 2)
    patience: int = training_option("patience", 1)


MODELS = {"encoder": EncoderConfig(model="encoder")}


def kit_bert(config):
    """Whether the config's encoder is read as the kit's own BERT (not by keras-hub)."""
    from data_prep import encoders

    return not encoders.names_hub_preset(config.encoder)


# ## The model


def encoder_classifier(backbone, dropout, classes=2):
    """Token ids (0: padding) -> the backbone -> masked mean -> Dropout -> sigmoid (or
    a softmax over more classes)."""
    import keras

    from workflows.sentiment.family import output_layer

    backbone.get_layer("pooled_dense").trainable = False  # [CLS]'s pooler: unused
    ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
    mask = keras.ops.not_equal(ids, 0)
    outputs = backbone({"token_ids": ids, "segment_ids": keras.ops.zeros_like(ids),
                        "padding_mask": mask})["sequence_output"]
    pooled = keras.layers.GlobalAveragePooling1D(name="mean_of_tokens")(outputs, mask=mask)
    pooled = keras.layers.Dropout(dropout)(pooled)
    probability = output_layer(classes, dtype="float32",
                               name="positive" if classes == 2 else "classes")(pooled)
    return keras.Model(ids, probability, name="encoder_classifier")


def build_model(config, backbone, steps_per_epoch, classes=2):
    """`encoder_classifier` over the pretrained backbone, every weight trained with Adam
    at a rate warmed up over the first 10% of the steps, then decayed to 0."""
    import keras

    import layers
    from workflows.sentiment.family import compile_loss

    model = encoder_classifier(backbone, config.dropout, classes)
    total = max(config.epochs * steps_per_epoch, 2)
    schedule = layers.WarmupLinearDecay(config.learning_rate, max(total // 10, 1), total)
    return compile_loss(model, keras.optimizers.Adam(schedule), classes)


def build(config, data):
    """The encoder of `data.encoder` (a folder) under the classifier head, trained on
    the train reviews and their sentence slices read as its WordPiece tokens; a
    keras-hub preset through `hub_classifier`."""
    from data_prep import encoders, imdb

    if encoders.is_hub_preset(data.encoder):
        from workflows.sentiment import hub_classifier

        return hub_classifier.build(config, data)
    from data_prep.text import WordPiece, pad_rows
    from workflows.core.batches import token_batches
    from workflows.sentiment.family import REVIEW_LENGTHS, Trainable, class_weights
    from workflows.sentiment.preprocessors import WordPieceRows, wordpiece_rows
    from workflows.sentiment.text_classifier import TextClassifier

    weights = class_weights(config, data.prepared.labels("train"), data.prepared.classes)
    vocabulary = encoders.read_vocabulary(data.encoder)
    lowercase = encoders.lowercases(data.encoder)
    tokenizer = WordPiece(vocabulary, lowercase)
    print(f"Tokenizing the reviews with the WordPiece vocabulary of {config.encoder}")
    splits = {}
    for split in ("train", "val"):
        texts, labels = imdb.split_texts(data.prepared, split, config.sentence_slices,
                                         config.seed, config.slices_from)
        rows = wordpiece_rows(tokenizer, texts, config.max_review_tokens, config.read)
        splits[split] = (pad_rows(rows, config.max_review_tokens), labels)

    def batches(split, epoch=None):
        return token_batches(*splits[split], REVIEW_LENGTHS, config.batch_size,
                             seed=None if epoch is None else config.seed + epoch,
                             weights=weights[splits[split][1]] if split == "train" else None)

    backbone = encoders.load_backbone(data.encoder)
    model = build_model(config, backbone, len(batches("train", 0)), len(data.prepared.classes))
    classifier = TextClassifier(model, WordPieceRows(vocabulary, config.max_review_tokens,
                                                     lowercase, config.read),
                                data.prepared.classes, requires=["keras_hub", "layers"])
    return Trainable(model, lambda epoch: batches("train", epoch), batches("val"),
                     len(splits["train"][1]), classifier, tags={"model_family": "encoder"},
                     metrics={"encoder_weights": backbone.count_params()},
                     artifacts={"vocabulary.txt": "\n".join(vocabulary)})
