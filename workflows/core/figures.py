"""Figures logged with runs: learning curves, learning-rate schedules, confusion matrices."""

import matplotlib

matplotlib.use("Agg")  # files only, never a window: runs happen on servers too

import keras  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def learning_curves(history, metrics=("loss", "accuracy")):
    """Train/validation curves per epoch for each of `metrics` found in `history`."""
    shown = [m for m in metrics if any(m in epoch or f"val_{m}" in epoch for epoch in history)]
    figure, axes = plt.subplots(1, len(shown), figsize=(5 * len(shown), 3.5), squeeze=False)
    epochs = range(1, len(history) + 1)
    for axis, metric in zip(axes[0], shown, strict=True):
        for prefix, label in (("", "train"), ("val_", "validation")):
            values = [epoch.get(prefix + metric, float("nan")) for epoch in history]
            axis.plot(epochs, values, marker="o", label=label)
        axis.set(title=metric, xlabel="epoch")
        axis.legend()
    figure.tight_layout()
    return figure


def learning_rate_schedule(schedule, steps_trained, title):
    """A Keras schedule over the steps trained (and a little beyond)."""
    steps = np.arange(1, max(int(steps_trained), 1) * 1.1 + 2)
    rates = keras.ops.convert_to_numpy(schedule(keras.ops.convert_to_tensor(steps - 1)))
    figure, axis = plt.subplots(figsize=(5, 3.5))
    axis.plot(steps, rates)
    axis.set(title=title, xlabel="step", ylabel="learning rate")
    figure.tight_layout()
    return figure


def confusion_matrix(matrix, labels=("negative", "positive")):
    size = max(4, 0.6 * len(labels) + 2.5)
    figure, axis = plt.subplots(figsize=(size, size * 0.875))
    axis.imshow(matrix, cmap="Blues")
    for (row, column), count in np.ndenumerate(np.asarray(matrix)):
        axis.text(column, row, str(count), ha="center", va="center")
    ticks = list(range(len(labels)))
    axis.set(xticks=ticks, yticks=ticks, xticklabels=labels, yticklabels=labels,
             xlabel="predicted", ylabel="true")
    if len(labels) > 4:
        plt.setp(axis.get_xticklabels(), rotation=45, ha="right")
    figure.tight_layout()
    return figure


def reliability_diagram(curve, title, of="positive"):
    """Observed fraction of positives against the mean predicted probability, per bin
    (`classification.calibration`); the diagonal is perfect calibration. `of`: what
    the probability is of (P(positive), or the top class's)."""
    figure, axis = plt.subplots(figsize=(4, 4))
    axis.plot([0, 1], [0, 1], linestyle="--", color="gray", label="perfectly calibrated")
    axis.plot(curve["mean_predicted"], curve["fraction_positive"], marker="o", label="model")
    axis.set(title=f"{title}\nECE {curve['expected_calibration_error']:.3f}",
             xlabel=f"mean predicted P({of})",
             ylabel="fraction positive" if of == "positive" else f"fraction the {of}",
             xlim=(0, 1),
             ylim=(0, 1))
    axis.legend(loc="upper left")
    figure.tight_layout()
    return figure


def heatmaps(panels):
    """One heatmap per `(title, x labels, y labels, weights)` panel, side by side."""
    figure, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4.5), squeeze=False)
    for axis, (title, x_labels, y_labels, weights) in zip(axes[0], panels, strict=True):
        axis.imshow(weights, cmap="viridis", aspect="auto")
        axis.set_xticks(range(len(x_labels)), x_labels, rotation=60, fontsize=8)
        axis.set_yticks(range(len(y_labels)), y_labels, fontsize=8)
        axis.set_title(title, fontsize=9)
    figure.tight_layout()
    return figure
