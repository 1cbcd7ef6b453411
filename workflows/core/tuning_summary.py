"""A study's summary: logged to the study's parent run, and printed."""

import time

import matplotlib.pyplot as plt
import mlflow
import optuna

from workflows.core.metric_groups import grouped_name


def summarize(study, parent_id, settings, wall_seconds, status="FINISHED"):
    """Logs the study's state to its parent run and prints it; returns the summary dict."""
    trials = study.get_trials(deepcopy=False)
    counts = {state: sum(trial_state(t) == state for t in trials) for state in STATES}
    complete = [t for t in trials
                if t.state == optuna.trial.TrialState.COMPLETE and t.value is not None]
    summary = {"study": study.study_name, "parent_run_id": parent_id, "trials": counts,
               "metric": settings.metric, "direction": settings.direction,
               "wall_minutes": wall_seconds / 60}
    client = mlflow.MlflowClient()
    client.log_batch(parent_id, metrics=[mlflow.entities.Metric(
        f"trials_{name}", count, int(time.time() * 1000), 0) for name, count in counts.items()])
    if complete:
        best = study.best_trial
        summary.update(best_value=best.value, best_params=best.params,
                       best_trial=best.number, best_run_id=best.user_attrs.get("mlflow_run_id"))
        client.log_metric(parent_id, grouped_name(f"best_{settings.metric}"), best.value)
        client.set_tag(parent_id, "best_child_run_id", summary["best_run_id"])
        client.set_tag(parent_id, "best_trial", str(best.number))
        client.log_dict(parent_id, best.params, "best_params.json")
        _log_plots(client, parent_id, study, len(complete))
    client.log_dict(parent_id, [_trial_row(t) for t in trials], "trials.json")
    client.set_terminated(parent_id, status)
    print(summary_text(summary))
    return summary


STATES = ("complete", "pruned", "fail", "stopped", "running")


def trial_state(trial):
    """Optuna's state of `trial`, lower case; "stopped" for a trial that a stop (Ctrl-C,
    SIGTERM) ended, which Optuna records as failed and the study queued again."""
    if trial.state == optuna.trial.TrialState.FAIL and trial.user_attrs.get("stopped"):
        return "stopped"
    return trial.state.name.lower()


def _trial_row(trial):
    return {"number": trial.number, "state": trial_state(trial).upper(), "value": trial.value,
            "params": trial.params, "epochs": trial.last_step,
            "run_id": trial.user_attrs.get("mlflow_run_id")}


def _log_plots(client, parent_id, study, complete):
    from optuna.visualization import matplotlib as plots

    figures = {"optimization_history.png": plots.plot_optimization_history}
    if complete >= 2 and len(study.best_trial.params) >= 1:
        figures["param_importances.png"] = plots.plot_param_importances
    for name, plot in figures.items():
        try:
            axes = plot(study)
        except (ValueError, RuntimeError, ZeroDivisionError) as error:  # too few varied trials
            print(f"(no {name}: {error})")
            continue
        figure = axes.figure
        figure.set_size_inches(8, 5)
        figure.tight_layout()
        client.log_figure(parent_id, figure, name)
        plt.close(figure)


def summary_text(summary):
    counts = summary["trials"]
    stopped = f", {counts['stopped']} stopped and queued again" if counts.get("stopped") else ""
    lines = [f"\nTuning {summary['study']}: {counts['complete']} complete, {counts['pruned']} "
             f"pruned, {counts['fail']} failed trials{stopped} in "
             f"{summary['wall_minutes']:.1f} minutes (parent run {summary['parent_run_id']})."]
    if "best_value" in summary:
        lines.append(f"Best {summary['metric']} {summary['best_value']:.4f}: trial "
                     f"{summary['best_trial']}, run {summary['best_run_id']}\n  "
                     f"{describe_values(summary['best_params'])}")
    return "\n".join(lines)


def describe_values(values):
    return ", ".join(f"{name}={value:.4g}" if isinstance(value, float) else f"{name}={value}"
                     for name, value in values.items())
