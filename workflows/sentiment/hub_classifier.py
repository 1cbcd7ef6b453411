"""The `encoder` family on any keras-hub text classifier: a preset folder that keras-hub
wrote (`save_to_preset`), a Hugging Face folder keras-hub converts (BERT, DistilBERT,
RoBERTa, XLM-RoBERTa, ALBERT) or, online, a keras-hub preset name
(`keras_hub.models.TextClassifier.presets`), fine-tuned with a new head of one output per
class (`data_prep.encoders.hub_preset` tells these from the kit's own BERT folders).

The preset's own preprocessor reads the texts (its tokenizer, its special tokens, cut or
padded to `max_review_tokens`: one shape), ahead of training; the model trains on the
token arrays, with Adam warmed up over 10% of the steps, then decayed to 0, as the
kit's BERT path; `extend_vocabulary` first grows a WordPiece preset's vocabulary with
the texts' words (`hub_vocabulary.py`). The classifier holds the task (without its
preprocessor) as its network and the preprocessor in its `HubFeatures`
(`preprocessors.py`), and scores raw texts in batches of one shape.
Its tokenizers are TensorFlow layers: this path needs TensorFlow where it trains and
where it serves.
"""

import numpy as np

from workflows.core.batches import BucketedBatches, for_backend, real_rows_and_weights
from workflows.sentiment import hub_vocabulary

KIND = "hub_preset"


def load_task(preset, classes, max_tokens):
    """The keras-hub `TextClassifier` of `preset` with a softmax head of `classes`
    outputs, its preprocessor cut to `max_tokens` tokens."""
    import keras_hub

    from data_prep.encoders import EncoderError

    try:
        task = keras_hub.models.TextClassifier.from_preset(
            str(preset), num_classes=classes, activation="softmax")
    except (ValueError, KeyError, OSError) as error:
        reason = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
        raise EncoderError(f"keras-hub cannot read {preset} as a text classifier ({reason})."
                           ) from error
    task.preprocessor.sequence_length = max_tokens
    return task


class FeatureBatches(BucketedBatches):
    """`(features, labels, weights)` batches of the preprocessor's arrays, all of one
    shape: top-up rows repeat a real row of the batch with weight 0."""

    def __init__(self, arrays, labels, plan, seed=None, order=None, weights=None):
        self.arrays, self.labels = arrays, np.asarray(labels)
        self.weights = weights
        lengths = np.ones(len(self.labels), "int64")
        super().__init__(plan, lengths, seed, order)

    def make(self, bucket, rows):
        rows, weights = real_rows_and_weights(rows, self.weights)
        return ({name: array[rows] for name, array in self.arrays.items()},
                self.labels[rows], weights)

    def with_order(self, order):
        return FeatureBatches(self.arrays, self.labels, self.plan, order=order,
                              weights=self.weights)


def build(config, data):
    """The preset's classifier with a new head, trained on the train texts (and their
    sentence slices) as its preprocessor reads them."""
    import keras

    import layers
    from data_prep import imdb
    from data_prep.text import BucketPlan
    from workflows.sentiment.family import Trainable, class_weights, compile_loss
    from workflows.sentiment.preprocessors import HubFeatures, hub_features
    from workflows.sentiment.text_classifier import TextClassifier

    classes = len(data.prepared.classes)
    task = load_task(data.encoder, classes, config.max_review_tokens)
    added = []
    if config.extend_vocabulary:
        task, added = hub_vocabulary.extended(task, data.prepared.texts("train"),
                                              config.extend_vocabulary)
        print(f"Added {len(added):,} of the texts' words to the vocabulary of "
              f"{config.encoder}" + (f", e.g. {', '.join(added[:5])}" if added else ""))
    preprocessor = task.preprocessor
    print(f"Tokenizing the texts with the preprocessor of {config.encoder}")
    splits = {}
    for split in ("train", "val"):
        texts, labels = imdb.split_texts(data.prepared, split, config.sentence_slices,
                                         config.seed, config.slices_from)
        splits[split] = (hub_features(preprocessor, texts), labels)
    weights = class_weights(config, data.prepared.labels("train"), data.prepared.classes)
    plan = BucketPlan.single(config.max_review_tokens, config.batch_size)

    def batches(split, epoch=None):
        arrays, labels = splits[split]
        return for_backend(FeatureBatches(
            arrays, labels, plan, None if epoch is None else config.seed + epoch,
            weights=weights[labels] if split == "train" else None))

    task.preprocessor = None  # trains on the arrays; the saved classifier has it back
    steps = len(FeatureBatches(*splits["train"], plan, seed=0))
    total = max(config.epochs * steps, 2)
    schedule = layers.WarmupLinearDecay(config.learning_rate, max(total // 10, 1), total)
    compile_loss(task, keras.optimizers.Adam(schedule), classes, one_sigmoid=False)
    classifier = TextClassifier(task, HubFeatures(preprocessor), data.prepared.classes,
                                requires=["keras_hub"])
    return Trainable(task, lambda epoch: batches("train", epoch), batches("val"),
                     len(splits["train"][1]), classifier,
                     tags={"model_family": "encoder", "encoder_kind": KIND,
                           "architecture": type(task).__name__},
                     metrics={"encoder_weights": task.backbone.count_params(),
                              "added_words": len(added)},
                     artifacts={"added_words.txt": "\n".join(added)} if added else {})
