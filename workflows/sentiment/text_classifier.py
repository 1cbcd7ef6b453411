"""Every sentiment family's classifier as one Keras model, built the way keras-hub builds a
task: a preprocessor (raw strings -> the arrays its network reads) and the network
(those arrays -> class probabilities), saved together in one `.keras` file.

    import workflows.sentiment.text_classifier  # registers the classes below
    model = keras.saving.load_model("classifier/model.keras")
    model.predict(["A gripping, beautifully shot film."])  # P(positive), or class rows

`predict` of strings scores them shortest first, in batches of one size (the last one
topped up with empty texts), each padded by the preprocessor to one of a few widths:
a handful of shapes to compile, whatever the texts. A family's preprocessor is a
`TextPreprocessor` (its module registers it); what it learned (a vocabulary, a Doc2Vec
model) is saved as the model's assets, never as lines that a text's own line breaks
could split.
"""

import importlib
import json
from pathlib import Path

import keras
import numpy as np

from workflows.core.compilation import compiled

PACKAGE = "nlpkit_sentiment"
MODEL_KIND = "text_classifier"  # the kind of its model folder (`core/model_folder.py`)
# the packages a saved classifier may import on loading, to register the classes it names
IMPORTABLE = ("layers", "keras_hub", "workflows")


@keras.saving.register_keras_serializable(package=PACKAGE)
class TextPreprocessor(keras.layers.Layer):
    """Strings -> one batch of a network's inputs (`encode`). Subclasses keep what they
    learned in plain Python objects and name it in `assets()`, a dict of JSON values
    written beside the model and given back to `restore(assets)` on loading."""

    def __init__(self, **kwargs):
        super().__init__(**{"trainable": False, **kwargs})
        self.built = True

    def encode(self, texts):
        raise NotImplementedError

    def call(self, texts):
        return self.encode(texts)

    def get_config(self):
        return {"name": self.name}  # subclasses add their settings, never what they learned

    def assets(self):
        return {}

    def restore(self, assets):
        """Takes back what `assets()` gave (subclasses with assets override it)."""

    def save_assets(self, dir_path):
        for name, value in self.assets().items():
            Path(dir_path, f"{name}.json").write_text(json.dumps(value, ensure_ascii=False),
                                                      encoding="utf-8")

    def load_assets(self, dir_path):
        self.restore({path.stem: json.loads(path.read_text(encoding="utf-8"))
                      for path in Path(dir_path).glob("*.json")})


@keras.saving.register_keras_serializable(package=PACKAGE)
class TextClassifier(keras.Model):
    """`preprocessor` (a `TextPreprocessor`) then `network` (a Keras model: its arrays in,
    one sigmoid unit or a softmax over the classes out), for `classes` (the label of
    each class index). `requires`: modules whose import registers the network's layers
    (imported again when the model is loaded)."""

    def __init__(self, network, preprocessor, classes, requires=(), batch_size=32, **kwargs):
        super().__init__(name=kwargs.pop("name", "text_classifier"), **kwargs)
        self.network, self.preprocessor = network, preprocessor
        self.classes, self.requires = list(classes), tuple(requires)
        self.batch_size = batch_size
        self._forward = compiled(lambda inputs: self.network(inputs, training=False),
                                 network, name="classify")
        self.built = True

    def call(self, inputs, training=False):
        return self.network(inputs, training=training)

    def predict(self, x, batch_size=None, verbose=0, **kwargs):
        """P(class 1) of each text for two classes, else each text's row of class
        probabilities; anything but a list of strings goes to the network as Keras's
        `predict` sends it."""
        if not (isinstance(x, (list, tuple)) and all(isinstance(t, str) for t in x)):
            return super().predict(x, batch_size=batch_size, verbose=verbose, **kwargs)
        return self.probabilities(list(x), batch_size or self.batch_size)

    def probabilities(self, texts, batch_size):
        def score(batch):
            asked = batch + [""] * (batch_size - len(batch))
            output = keras.ops.convert_to_numpy(self._forward(self.preprocessor.encode(asked)))
            return class_probabilities(output[:len(batch)], len(self.classes))

        return shortest_first(texts, batch_size, score,
                              (0,) if len(self.classes) == 2 else (0, len(self.classes)))

    def get_config(self):
        network = keras.saving.serialize_keras_object(self.network)
        network.pop("compile_config", None)  # how it trained: not what it answers with
        return {"name": self.name, "classes": self.classes, "requires": list(self.requires),
                "batch_size": self.batch_size, "network": network,
                "preprocessor": keras.saving.serialize_keras_object(self.preprocessor)}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        modules = [*config.get("requires", ()), config["preprocessor"].get("module", "")]
        for module in modules:
            if module.split(".")[0] in IMPORTABLE:
                importlib.import_module(module)
        network = keras.saving.deserialize_keras_object(config.pop("network"))
        preprocessor = keras.saving.deserialize_keras_object(config.pop("preprocessor"))
        return cls(network, preprocessor, **config)


def shortest_first(texts, batch_size, score, empty_shape):
    """`score(batch of texts)` of every text, the texts taken shortest first in batches of
    `batch_size` (so each batch pads to few widths), back in their order; an array of
    `empty_shape` for no texts."""
    order = np.argsort([len(text) for text in texts], kind="stable")
    rows = np.zeros(empty_shape)
    for start in range(0, len(texts), batch_size):
        batch = order[start:start + batch_size]
        scores = np.asarray(score([texts[i] for i in batch]), "float64")
        if not start:
            rows = np.zeros((len(texts), *scores.shape[1:]))
        rows[batch] = scores
    return rows


def class_probabilities(output, classes):
    """A network's `(rows, units)` output as a classifier answers: P(class 1) for two
    classes (one sigmoid unit, or the second of a softmax of two), else the rows."""
    output = np.asarray(output, "float64").reshape(len(output), -1)
    return output[:, -1] if classes == 2 else output


def save_classifier(folder, classifier, answers="classes"):
    """Writes `classifier` as a model folder (`model.keras`, its kind and how its pyfunc
    `answers`: each text's classes, or P(class 1) alone); returns the folder."""
    from workflows.core.model_folder import save_folder

    return save_folder(folder, classifier, MODEL_KIND, {"answers": answers})


def calibrated(classifier, prepared, answers="classes"):
    """`save(folder)`: `save_classifier`, then the classifier's calibration
    (`calibration.py`) fitted on the validation texts of `prepared` (never test) as the
    saved classifier scores them."""
    from workflows.sentiment.calibration import Calibration

    def save(folder):
        save_classifier(folder, classifier, answers)
        probabilities = load_classifier(folder).predict(prepared.texts("val"))
        fitted = Calibration.fit(prepared.labels("val"), probabilities)
        fitted.save(folder)
        print(f"Calibration on the validation texts: p -> {fitted}")

    return save


def load_classifier(folder):
    """The `TextClassifier` that `save_classifier` wrote in `folder` (a folder of
    another version or kind: one line saying to train again)."""
    from workflows.core.model_folder import read_folder

    return read_folder(folder, [MODEL_KIND])[0]
