"""Training plan of the n-gram models (`bow`, `nbsvm`): TensorFlow's `TextVectorization`
adapted on the train texts turns each review into n-gram features on the fly; the
exported model takes raw strings."""

import dataclasses

import keras

from data_prep import imdb
from layers.naive_bayes_linear import log_count_ratios
from workflows.core.lesson import TrainingPlan
from workflows.sentiment.end_to_end import EndToEndClassifier
from workflows.sentiment.ngrams import class_feature_counts, ngram_vectorizer
from workflows.sentiment.presets import NBSVMConfig, build_model
from workflows.sentiment.training_texts import split_texts


def plan(config, prepared, export):
    """The vectorizer (NBSVM's binary and sparse, with its naive-Bayes log-count ratios
    as the prior), the model on its features, and `(features, label)` batches of the
    train texts (reviews and their sentence slices) and validation reviews. `export`
    says how the classifier is logged; its `save` is filled in here."""
    vectorizer, prior = ngram_vectorizer(config, prepared), None
    if isinstance(config, NBSVMConfig):
        negative, positive = class_feature_counts(config, vectorizer, prepared)
        prior = log_count_ratios(positive, negative, config.alpha)
    model = build_model(config, vectorizer.vocabulary_size(), prior)
    texts = {split: split_texts(config, prepared, split) for split in ("train", "val")}

    def split_batches(split, epoch=None):
        import tensorflow as tf  # the vectorizer is a TensorFlow layer

        shuffle, seed = epoch is not None, config.seed + (epoch or 0)
        dataset = imdb.text_dataset(*texts[split], config.batch_size, shuffle, seed)
        return dataset.map(lambda text, label: (vectorizer(text), label),
                           num_parallel_calls=tf.data.AUTOTUNE)

    def save(folder):  # the trained model behind the vectorizer
        return EndToEndClassifier(end_to_end_model(model, vectorizer)).save(folder)

    return TrainingPlan(
        model, lambda epoch: split_batches("train", epoch), split_batches("val"),
        len(texts["train"][1]), export=dataclasses.replace(export, save=save),
        tags={"model_family": type(config).__name__.removesuffix("Config").lower()})


def end_to_end_model(model, vectorizer):
    """Raw review strings in, P(positive) out: the vectorizer and the trained model."""
    reviews = keras.Input(shape=(), dtype="string", name="review")
    return keras.Model(reviews, model(vectorizer(reviews)), name=f"{model.name}_end_to_end")
