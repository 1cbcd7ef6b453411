"""Training plan of the classifier on a pretrained text encoder (`--model encoder`)."""

import dataclasses

from data_prep import encoders
from data_prep.padding import pad_rows
from data_prep.wordpiece import WordPiece
from workflows.core.lesson import TrainingPlan
from workflows.sentiment.encoder_classifier import EncoderClassifier, token_rows
from workflows.sentiment.presets import build_model
from workflows.sentiment.training_texts import split_texts


def plan(config, prepared, folder, batches_of, export):
    """The encoder of `folder` under a classifier head, trained on the train reviews and
    their sentence slices read as its WordPiece tokens. `batches_of(ids, labels, seed)`
    batches a split by length; `export` says how the classifier is logged (its `save` is
    filled in here)."""
    vocabulary, lowercase = encoders.read_vocabulary(folder), encoders.lowercases(folder)
    tokenizer = WordPiece(vocabulary, lowercase)
    print(f"Tokenizing the reviews with the WordPiece vocabulary of {config.encoder}")
    splits = {}
    for split in ("train", "val"):
        texts, labels = split_texts(config, prepared, split)
        rows = token_rows(tokenizer, texts, config.max_review_tokens, config.read)
        splits[split] = (pad_rows(rows, config.max_review_tokens), labels)

    def split_batches(split, epoch=None):
        return batches_of(*splits[split], None if epoch is None else config.seed + epoch)

    backbone = encoders.load_backbone(folder)
    model = build_model(config, len(vocabulary), backbone, len(split_batches("train", 0)))
    classifier = EncoderClassifier(model, vocabulary, config.max_review_tokens, lowercase,
                                   config.read)
    return TrainingPlan(
        model, lambda epoch: split_batches("train", epoch), split_batches("val"),
        len(splits["train"][1]), export=dataclasses.replace(export, save=classifier.save),
        tags={"model_family": "encoder"},
        metrics={"encoder_weights": backbone.count_params()},
        artifacts={"vocabulary.txt": "\n".join(vocabulary)})
