"""What a training run logs to MLflow, from its setup to its exported model.

Used by `lifecycle.train`: the params, tags and artifacts of a new run, each epoch's
metrics (and those a crash left unlogged), the summary, curves and schedule, the choice
between the best epoch and the average of the last ones, and the logged pyfunc model.
"""

import dataclasses
import shutil

import keras
import matplotlib.pyplot as plt
import mlflow
import numpy as np

from data_prep.errors import UserError
from workflows import distribution, figures, precision, tracking
from workflows.training import average_weights


def log_epoch(epoch, metrics, after_epoch=None):
    mlflow.log_metrics(metrics, step=epoch + 1)
    if after_epoch:
        after_epoch(epoch, metrics)


def log_run_setup(config, plan, fingerprint, folder):
    mlflow.log_params({**tracking.flat_params(config), **plan.params})
    mlflow.set_tags(tracking.run_tags(fingerprint, run_folder=str(folder), **plan.tags))
    if hasattr(config, "dtype_policy"):  # "auto" as this device resolved it
        mlflow.set_tag("dtype_policy_used", precision.resolve(config.dtype_policy))
    mlflow.log_dict(dataclasses.asdict(config), "config.json")
    for name, content in plan.artifacts.items():
        (mlflow.log_dict if isinstance(content, dict) else mlflow.log_text)(content, name)
    if plan.metrics:
        mlflow.log_metrics(plan.metrics)


def add_epoch_metrics(plan, epoch, metrics):
    """The lesson's own epoch metrics and the learning rate, before the checkpoint."""
    if plan.epoch_end:
        plan.epoch_end(epoch, metrics)
    metrics["learning_rate"] = float(keras.ops.convert_to_numpy(plan.model.optimizer.learning_rate))


def log_missing_epochs(run_id, history):
    """Logs the epochs the run folder has but the run lacks (a crash or an unreachable
    server between a checkpoint and its logging); each epoch is logged once."""
    logged = {m.step for m in mlflow.MlflowClient().get_metric_history(run_id, "loss")}
    for epoch, metrics in enumerate(history, start=1):
        if epoch not in logged:
            mlflow.log_metrics(metrics, step=epoch)


def log_training_summary(plan, state):
    """Best epoch, its validation metrics, mean timings and rates; curves and schedule."""
    best = state.history[state.best_epoch - 1]
    summary = {"best_epoch": state.best_epoch, "trained_epochs": len(state.history),
               "best_val_loss": state.best_val_loss, "train_minutes": state.train_seconds / 60}
    summary.update({f"best_{name}": value for name, value in best.items()
                    if name.startswith("val_") and name != "val_loss"})
    timed = [epoch for epoch in state.history if "epoch_seconds" in epoch]
    rates = sorted({name for epoch in timed for name in epoch if name.endswith("_per_second")})
    for name in ("epoch_seconds", *rates):
        values = [epoch[name] for epoch in timed if name in epoch]
        if values:
            summary[f"mean_{name}"] = float(np.mean(values))
        if len(values) > 1 and timed[0] is state.history[0]:  # epoch 1 compiled the steps
            summary[f"steady_{name}"] = float(np.mean(values[1:]))
    mlflow.log_metrics(summary)
    curves = figures.learning_curves(state.history, plan.curves)
    mlflow.log_figure(curves, "learning_curves.png")
    plt.close(curves)
    schedule = plan.model.optimizer.get_config()["learning_rate"]
    if isinstance(schedule, dict):  # a serialized LearningRateSchedule, not a constant
        schedule = keras.optimizers.schedules.deserialize(schedule)
        mlflow.log_figure(figures.learning_rate_schedule(
            schedule, keras.ops.convert_to_numpy(plan.model.optimizer.iterations),
            type(schedule).__name__), "lr_schedule.png")


def choose_averaged_weights(plan, placement, folder, state):
    """Checkpoint averaging: the mean of the last epochs' weights replaces the best
    epoch's (which the model holds) when its validation loss is lower. The chief logs
    both (`averaged_val_*` beside `best_val_*`) and an `exported_weights` tag saying
    which won. `folder` is the `TrainingFolder` the run trained in."""
    choice, metrics = _average_if_better(plan, placement, folder, state)
    if placement.processes.is_chief:
        mlflow.log_metrics({f"averaged_{name}": value for name, value in metrics.items()
                            if name.startswith("val_")})
        mlflow.set_tag("exported_weights", choice)


def _average_if_better(plan, placement, folder, state):
    """Loads the average of the last epochs if its validation loss beats the best
    epoch's; returns what the model holds and the average's validation metrics."""
    epochs = folder.intact_epoch_weights(
        range(max(state.epoch - plan.average_last_epochs + 1, 1), state.epoch + 1), state)
    if len(epochs) < 2:
        return f"best epoch {state.best_epoch} (fewer than two epochs to average)", {}
    average_weights(plan.model, [folder.epoch_weights(epoch) for epoch in epochs])
    metrics = {"val_loss": plan.model.evaluate(placement.batches(plan.validation_batches),
                                               verbose=0, return_dict=True)["loss"]}
    if plan.epoch_end:
        plan.epoch_end(state.epoch, metrics)
    span = f"epochs {epochs[0]}-{epochs[-1]}"
    if metrics["val_loss"] < state.best_val_loss:
        print(f"Exporting the average of {span}: val_loss {metrics['val_loss']:.4f} < "
              f"{state.best_val_loss:.4f} (best epoch {state.best_epoch})")
        return f"average of {span}", metrics
    folder.load_best_weights(plan.model, state)
    print(f"Keeping the best epoch {state.best_epoch}: the average of {span} has val_loss "
          f"{metrics['val_loss']:.4f} >= {state.best_val_loss:.4f}")
    return f"best epoch {state.best_epoch}", metrics


class ExportError(UserError):
    """A trained model that must not leave its run (non-finite weights or outputs)."""


def check_finite(plan, placement):
    """Refuses, in one line, to export a model whose weights or outputs are not finite:
    every weight is checked, and the model is evaluated on one validation batch."""
    for variable in plan.model.weights:
        if "float" in str(variable.dtype):
            value = keras.ops.convert_to_numpy(variable.value)
            if not np.isfinite(value).all():
                raise ExportError(f"The trained weight {variable.path} holds NaN or infinite "
                                  f"values: nothing was exported or logged. {RETRAIN_HINT}")
    loss = plan.model.evaluate(placement.batches(plan.validation_batches), steps=1, verbose=0,
                               return_dict=True)["loss"]
    if not np.isfinite(loss):
        raise ExportError(f"The trained model's loss on a validation batch is {loss}: nothing "
                          f"was exported or logged. {RETRAIN_HINT}")


RETRAIN_HINT = ("Train it again with --retrain (a lower --set learning_rate=... if the loss "
                "diverged).")


def export_and_log_model(export, folder, log=True):
    """Saves the model into the run folder (atomically), then logs it as a pyfunc
    (unless `log` is false: another process than the chief saves its copy, since saving
    weights is a step every process takes together)."""
    target = folder / export.artifact
    partial = folder / f".partial-{export.artifact}"
    _remove(partial)
    export.save(partial)
    _remove(target)
    partial.rename(target)
    if not log:
        return
    with distribution.on_this_process():  # MLflow loads and tries the model: alone
        tracking.log_pyfunc_model(
            export.python_model, {export.artifact.split(".")[0]: target},
            export.input_example, model_requirements(), packages=export.packages,
            params=export.params)
    mlflow.set_tag("model_logged", "true")


def model_requirements():
    """The pinned packages a logged model needs where it is loaded or served (gensim:
    the paragraph-vector classifier, and any ensemble that holds one)."""
    return tracking.pinned_requirements("keras", "keras-hub", "tensorflow", "tensorflow-text",
                                        "mlflow", "gensim")


def _remove(path):
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
