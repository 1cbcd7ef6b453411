"""A sentiment run's classifier as the export takes it (`core/export.py`): its network
with its calibration inside (so an exported model answers what the pyfunc answers),
from the arrays its preprocessor makes of texts to the probability of each class.

What stays outside is how texts become those arrays, written beside the artifact:
`classes.json` and `preprocessing.json` (the preprocessor's kind, its settings and its
vocabulary). An ensemble (several models and a lexicon in Python) is not exported:
export its members.
"""

import json
from pathlib import Path

import keras
import numpy as np

from workflows.core.config import ConfigError
from workflows.core.export import Exportable
from workflows.sentiment.calibration import EPSILON, Calibration
from workflows.sentiment.text_classifier import load_classifier, shortest_first

EXPORTED_CLASSES = "classes.json"


class CalibratedClasses(keras.layers.Layer):
    """A network's output (one sigmoid unit, or class probabilities) -> the calibrated
    probability of each class: `Calibration.apply` (`calibration.py`) in `keras.ops`."""

    def __init__(self, classes, slope=1.0, bias=(), **kwargs):
        super().__init__(**kwargs)
        self.classes, self.slope, self.bias = classes, slope, list(bias) or [0.0] * classes

    def call(self, outputs):
        ops = keras.ops
        if self.classes == 2 and outputs.shape[-1] == 1:  # one sigmoid unit: P(class 1)
            outputs = ops.concatenate([1 - outputs, outputs], axis=-1)
        scores = self.slope * ops.log(ops.clip(outputs, EPSILON, 1))
        return ops.softmax(scores + ops.convert_to_tensor(self.bias, scores.dtype), axis=-1)

    def get_config(self):
        return {**super().get_config(), "classes": self.classes, "slope": self.slope,
                "bias": self.bias}


def exportable(run, folder):
    """The `Exportable` of `run`'s classifier, saved in `folder` (its model folder)."""
    if run.data.params.get("model") == "ensemble":
        raise ConfigError(f"Run {run.info.run_id[:12]} is an ensemble: several models and "
                          "Python code. Export its members (their run ids are its "
                          "`members` param) one by one.")
    classifier = load_classifier(folder)
    model = calibrated_network(classifier, Calibration.load(folder))
    preprocessor = classifier.preprocessor
    example = preprocessor.encode(["A gripping, beautifully shot film."])
    return Exportable(model, as_arrays(example, model), {
        EXPORTED_CLASSES: classifier.classes,
        "preprocessing.json": {"kind": type(preprocessor).__name__,
                               **preprocessor.get_config(),
                               **described_assets(preprocessor)}},
        outputs=f"the probability of each class (rows: texts; columns: {EXPORTED_CLASSES})")


def calibrated_network(classifier, calibration):
    """A functional model: the network's inputs -> `CalibratedClasses`."""
    network = classifier.network
    inputs = keras.tree.map_structure(
        lambda tensor: keras.Input(tensor.shape[1:], dtype=tensor.dtype,
                                   name=tensor.name.split(":")[0]), network.input)
    outputs = CalibratedClasses(len(classifier.classes), calibration.slope,
                                calibration.bias)(network(inputs))
    return keras.Model(inputs, outputs, name="exported_classifier")


def as_arrays(encoded, model):
    """A preprocessor's output as the exported model's inputs take it: dense NumPy
    arrays of the inputs' dtypes."""
    return keras.tree.map_structure(lambda value, tensor: dense(value).astype(tensor.dtype),
                                    encoded, model.input)


def dense(value):
    """A preprocessor's array (a `tf.SparseTensor` too) as a dense NumPy array."""
    if hasattr(value, "indices") and hasattr(value, "dense_shape"):  # tf.SparseTensor
        import tensorflow as tf

        value = tf.sparse.to_dense(value)
    return keras.ops.convert_to_numpy(value)


def described_assets(preprocessor):
    """What a preprocessor learned, as the files beside the artifact hold it: its JSON
    assets (a vocabulary), a `TextVectorization`'s vocabulary, or where inputs come from."""
    assets = preprocessor.assets()
    vectorizer = getattr(preprocessor, "vectorizer", None)
    if hasattr(vectorizer, "get_vocabulary"):
        assets = {"vocabulary": vectorizer.get_vocabulary(),
                  "vectorizer": keras.saving.serialize_keras_object(vectorizer)["config"]}
    if hasattr(preprocessor, "vectors"):
        assets = {"inputs": "paragraph vectors inferred by the run's Doc2Vec model (gensim), "
                            "in the classifier's assets"}
    if hasattr(preprocessor, "preprocessor"):  # a keras-hub preset's
        assets = {"inputs": "the preset's own preprocessor: keras_hub.models."
                            f"{type(preprocessor.preprocessor).__name__}"}
    return {key: value for key, value in assets.items() if not isinstance(value, np.ndarray)}


class ExportedAnswers:
    """A classifier's calibrated class probabilities through its export in `folder`
    (`core/export.py`): `preprocessor` (the classifier's) makes the arrays, the format's
    runtime answers; `batch_size` texts a call, shortest first (few padded widths)."""

    def __init__(self, folder, preprocessor, batch_size=64):
        from workflows.core.export import load_export

        settings = json.loads((Path(folder) / "export.json").read_text("utf-8"))
        self.answer, self.names = load_export(folder)
        self.dtypes = {name: spec["dtype"] for name, spec in settings["inputs"].items()}
        self.preprocessor, self.batch_size = preprocessor, batch_size

    def probabilities(self, texts):
        from workflows.core.export import named_arrays

        def score(batch):
            encoded = keras.tree.map_structure(dense, self.preprocessor.encode(batch))
            return self.answer({name: array.astype(self.dtypes[name]) for name, array in
                                named_arrays(encoded, self.names).items()})

        return shortest_first(texts, self.batch_size, score, (0, 0))


def classifier_folder(model_folder):
    """The classifier inside a logged pyfunc model's folder."""
    return Path(model_folder) / "artifacts" / "classifier"
