"""Which weights a run exports: the best epoch's, or the average of the last epochs'
where it validates better (checkpoint averaging), and never weights or outputs that
are not finite."""

import math

import keras
import numpy as np

from process.errors import UserError
from workflows.core.stopping import VALIDATION_LOSS
from workflows.core.weight_files import average_weights


def average_if_better(model, validation_batches, folder, state, last_epochs, epoch_end,
                       monitor=VALIDATION_LOSS):
    """Loads the average of the `last_epochs` if its `monitor` beats the best epoch's;
    returns what the model holds and the average's validation metrics. `folder` is the
    `TrainingFolder` the run trained in."""
    epochs = folder.intact_epoch_weights(
        range(max(state.epoch - last_epochs + 1, 1), state.epoch + 1), state)
    if len(epochs) < 2:
        return f"best epoch {state.best_epoch} (fewer than two epochs to average)", {}
    average_weights(model, [folder.epoch_weights(epoch) for epoch in epochs])
    metrics = {f"val_{name}": value for name, value in model.evaluate(
        validation_batches, verbose=0, return_dict=True).items()}
    if epoch_end:
        epoch_end(-1, metrics)  # -1: not an epoch's weights
    span = f"epochs {epochs[0]}-{epochs[-1]}"
    best = state.history[state.best_epoch - 1].get(monitor.name, math.nan)
    averaged = metrics.get(monitor.name, math.nan)
    if monitor.beats(averaged, best):
        print(f"Exporting the average of {span}: {monitor.name} {averaged:.4f}, the best epoch "
              f"{state.best_epoch}'s {best:.4f}")
        return f"average of {span}", metrics
    folder.load_best_weights(model, state)
    print(f"Keeping the best epoch {state.best_epoch}: {monitor.name} {best:.4f}, the average of "
          f"{span}'s {averaged:.4f}")
    return f"best epoch {state.best_epoch}", metrics


class ExportError(UserError):
    """A trained model that must not leave its run (non-finite weights or outputs)."""


def check_finite(model, validation_batches):
    """Refuses, in one line, to export a model whose weights or outputs are not finite:
    every weight is checked, and the model is evaluated on one validation batch (if it
    has validation batches)."""
    for variable in model.weights:
        if "float" in str(variable.dtype):
            value = keras.ops.convert_to_numpy(variable.value)
            if not np.isfinite(value).all():
                raise ExportError(f"The trained weight {variable.path} holds NaN or infinite "
                                  f"values: nothing was exported or logged. {RETRAIN_HINT}")
    if validation_batches is None:  # (a custom trainer scored by its lesson: weights only)
        return
    loss = model.evaluate(validation_batches, steps=1, verbose=0, return_dict=True)["loss"]
    if not np.isfinite(loss):
        raise ExportError(f"The trained model's loss on a validation batch is {loss}: nothing "
                          f"was exported or logged. {RETRAIN_HINT}")


RETRAIN_HINT = ("Train it again with --retrain (a lower --set learning_rate=... if the loss "
                "diverged).")
