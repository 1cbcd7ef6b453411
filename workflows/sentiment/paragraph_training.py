"""Training plan of the paragraph-vector classifier (`--model doc2vec`)."""

import dataclasses

from data_prep import paragraph_vectors
from workflows.core.lesson import TrainingPlan
from workflows.sentiment.paragraph_classifier import ParagraphVectorClassifier
from workflows.sentiment.presets import build_model


def paragraph_vector_settings(config):
    return paragraph_vectors.ParagraphVectorSettings(
        config.vector_size, config.dm, config.dbow_words, config.window, config.min_count,
        config.negative, config.sample, config.doc2vec_epochs, config.seed)


def plan(config, prepared, export):
    """Doc2Vec trained once on the unlabelled and train reviews; every review's vector
    inferred (and cached), so training sees vectors made as the served model makes them.
    The minutes those took are logged (`doc2vec_train_minutes`, `*_inference_minutes`).
    `export` says how the classifier is logged; its `save` is filled in here."""
    settings = paragraph_vector_settings(config)
    vectors, folder = paragraph_vectors.load_or_train(prepared, settings)
    inputs, seconds = {}, {"doc2vec_train": paragraph_vectors.training_seconds(folder)}
    for split in ("train", "val"):
        inputs[split], seconds[f"{split}_inference"] = paragraph_vectors.split_vectors(
            prepared, split, settings)

    def split_batches(split, epoch=None):
        import tensorflow as tf  # doc2vec (gensim) runs where TensorFlow does

        dataset = tf.data.Dataset.from_tensor_slices((inputs[split], prepared.labels(split)))
        if epoch is not None:
            dataset = dataset.shuffle(len(inputs[split]), seed=config.seed + epoch)
        return dataset.batch(config.batch_size).prefetch(tf.data.AUTOTUNE)

    model = build_model(config, vectors.vector_size)
    classifier = ParagraphVectorClassifier(model, vectors)
    return TrainingPlan(
        model, lambda epoch: split_batches("train", epoch), split_batches("val"),
        len(inputs["train"]),
        export=dataclasses.replace(export, save=classifier.save),
        tags={"model_family": "paragraph_vectors"},
        metrics={"doc2vec_vocabulary_size": len(vectors.model.wv),
                 **{f"{name}_minutes": value / 60 for name, value in seconds.items()
                    if value is not None}})
