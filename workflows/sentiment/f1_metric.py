"""Macro-F1 as a Keras metric of sparse labels: what `tune --metric val_macro_f1`
maximizes, logged each epoch beside the accuracy (registered, so a compiled saved
classifier loads)."""

import keras


@keras.saving.register_keras_serializable(package="nlpkit")
class SparseMacroF1(keras.metrics.F1Score):
    """The mean of the classes' F1 over an epoch, from class indices and the model's
    probabilities: rows of `classes` probabilities, or one sigmoid P(class 1) of two."""

    def __init__(self, classes=2, name="macro_f1", **kwargs):
        kwargs.pop("average", None)
        kwargs.pop("threshold", None)
        super().__init__(average="macro", name=name, **kwargs)
        self.classes = classes

    def update_state(self, y_true, y_pred, sample_weight=None):
        ops = keras.ops
        y_true = ops.one_hot(ops.cast(ops.reshape(y_true, (-1,)), "int32"), self.classes)
        if y_pred.shape[-1] == 1:  # P(class 1) of two classes
            y_pred = ops.concatenate([1 - y_pred, y_pred], axis=-1)
        super().update_state(y_true, y_pred, sample_weight)

    def get_config(self):
        return {**super().get_config(), "classes": self.classes}
