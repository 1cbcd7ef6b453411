"""Token cross-entropy that ignores padding, for sequence-to-sequence and language models."""

import keras
from keras import ops

PAD_ID = 0


@keras.saving.register_keras_serializable(package="nlpkit")
class MaskedCrossentropy(keras.losses.Loss):
    """Cross-entropy of next-token logits, averaged over real (non-padding) labels only.

    A batch of sentences padded to one length holds many padding labels (id 0); a plain
    mean over all positions would reward predicting padding and make short batches
    weigh more than long ones. This loss averages only where `y_true != 0`.

    With `label_smoothing=e` the target is `(1 - e)` on the right token and `e` spread
    uniformly over the vocabulary (Szegedy et al., 2016; *Attention Is All You Need*,
    5.4, uses `e = 0.1`). Logits are cast to float32 first, so the loss is stable under
    mixed precision.

    Args:
        label_smoothing: float in `[0, 1)`. Defaults to `0.0`.
        name: str. Defaults to `"masked_crossentropy"`.

    Example:
    >>> import numpy as np
    >>> loss = MaskedCrossentropy()
    >>> logits = np.log(np.array([[[0.5, 0.25, 0.25], [0.2, 0.6, 0.2]]], "float32"))
    >>> round(float(loss(np.array([[1, 0]]), logits)), 4)  # the padding label is ignored
    1.3863

    References:
        Szegedy et al., *Rethinking the Inception Architecture*, 2016 (label smoothing).
    """

    def __init__(self, label_smoothing=0.0, name="masked_crossentropy", **kwargs):
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"`label_smoothing` must be in [0, 1), got {label_smoothing}.")
        kwargs.setdefault("reduction", "mean_with_sample_weight")
        super().__init__(name=name, **kwargs)
        self.label_smoothing = label_smoothing

    def __call__(self, y_true, y_pred, sample_weight=None):
        # Padding labels weigh 0; Keras' reduction then divides by the real labels and,
        # under a tf.distribute strategy, scales the loss per replica.
        weight = ops.cast(ops.not_equal(ops.cast(y_true, "int32"), PAD_ID), "float32")
        if sample_weight is not None:
            sample_weight = ops.cast(sample_weight, "float32")
            while len(sample_weight.shape) < len(weight.shape):  # one weight per sequence
                sample_weight = ops.expand_dims(sample_weight, -1)
            weight = weight * sample_weight
        return super().__call__(y_true, y_pred, sample_weight=weight)

    def call(self, y_true, y_pred):
        # From the logits' log-sum-exp, without the (batch, length, vocabulary) tensor of
        # log-probabilities: -log p(label) = lse - logit(label), and the smoothing term
        # -mean(log p) = lse - mean(logits).
        logits = ops.cast(y_pred, "float32")
        log_normalizer = ops.logsumexp(logits, axis=-1)
        labels = ops.cast(y_true, "int32")
        label_logits = ops.squeeze(ops.take_along_axis(logits, labels[..., None], axis=-1), -1)
        loss = log_normalizer - label_logits
        if self.label_smoothing:
            smoothing = log_normalizer - ops.mean(logits, axis=-1)
            loss = (1.0 - self.label_smoothing) * loss + self.label_smoothing * smoothing
        return loss

    def get_config(self):
        return {"name": self.name, "label_smoothing": self.label_smoothing}
