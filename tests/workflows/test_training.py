import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from workflows.core.checkpoints import TrainingFolder
from workflows.core.fitting import Checkpointing, EpochHooks, fit_resumably
from workflows.core.stopping import Stopping
from workflows.core.weight_files import average_weights, load_values

STEPS = 8  # batches per epoch


def small_model():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
    return model


def epoch_dataset(epoch):
    rng = np.random.default_rng(epoch)
    x = rng.normal(size=(STEPS * 4, 3)).astype("float32")
    y = (x.sum(axis=1) > 0).astype("float32")
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(4)


class InterruptAt(keras.callbacks.Callback):
    def __init__(self, epoch, batch):
        super().__init__()
        self.epoch, self.batch = epoch, batch

    def on_train_batch_end(self, batch, logs=None):
        if self.model.optimizer.iterations.numpy() == self.epoch * STEPS + self.batch + 1:
            raise KeyboardInterrupt


class CountBatches(keras.callbacks.Callback):
    count = 0

    def on_train_batch_end(self, batch, logs=None):
        CountBatches.count += 1


def test_interrupted_training_resumes_mid_epoch_without_redoing_batches(tmp_path):
    validation = epoch_dataset(99)
    with pytest.raises(KeyboardInterrupt):
        fit_resumably(small_model(), epoch_dataset, validation, tmp_path, Stopping(3, patience=9),
                      checkpointing=Checkpointing(every_steps=3),
                      hooks=EpochHooks(callbacks=[InterruptAt(epoch=1, batch=4)]), verbose=0)
    state = TrainingFolder(tmp_path).load_state()
    assert (state.epoch, state.step, len(state.history)) == (1, 5, 1)
    assert not state.finished and (tmp_path / state.checkpoint).exists()

    model = small_model()
    CountBatches.count = 0
    state = fit_resumably(model, epoch_dataset, validation, tmp_path, Stopping(3, patience=9),
                          hooks=EpochHooks(callbacks=[CountBatches()]), verbose=0)
    assert CountBatches.count == (STEPS - 5) + STEPS  # the rest of epoch 2, then epoch 3
    assert int(model.optimizer.iterations.numpy()) == 3 * STEPS  # optimizer state restored
    assert len(state.history) == 3 and not state.finished  # the caller marks it finished
    assert "epoch_seconds" in state.history[0] and "epoch_seconds" not in state.history[1]
    saved = json.loads((tmp_path / "state.json").read_text())
    previous = json.loads((tmp_path / "state.previous.json").read_text())
    assert saved["epoch"] == 3 and previous["epoch"] == 2  # the newest and the one before
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == sorted(
        [saved["checkpoint"], previous["checkpoint"]])


def test_an_interruption_in_the_epoch_end_work_checkpoints_the_trained_batches(
        tmp_path, capsys):
    def stop_after_the_second_epoch(epoch, metrics):  # the lesson's epoch-end work
        if epoch == 1:
            raise KeyboardInterrupt

    validation = epoch_dataset(99)
    with pytest.raises(KeyboardInterrupt):
        fit_resumably(small_model(), epoch_dataset, validation, tmp_path, Stopping(3, patience=9),
                      hooks=EpochHooks(epoch_metrics=stop_after_the_second_epoch), verbose=0)
    assert capsys.readouterr().out.endswith(
        "Interrupted: checkpoint saved (epoch 2, all its batches trained). Rerun the same "
        "command to resume.\n")
    CountBatches.count = 0
    state = fit_resumably(small_model(), epoch_dataset, validation, tmp_path,
                          Stopping(3, patience=9), hooks=EpochHooks(callbacks=[CountBatches()]),
                          verbose=0)
    assert CountBatches.count == STEPS and len(state.history) == 3  # only epoch 3's batches
    assert all("loss" in epoch and "val_loss" in epoch for epoch in state.history)


def test_rerun_after_the_last_epoch_trains_nothing_and_restores_the_best_weights(tmp_path):
    trained = small_model()
    fit_resumably(trained, epoch_dataset, epoch_dataset(99), tmp_path, Stopping(2, patience=9),
                  verbose=0)
    CountBatches.count = 0
    rerun = small_model()
    state = fit_resumably(rerun, epoch_dataset, epoch_dataset(99), tmp_path,
                          Stopping(2, patience=9), hooks=EpochHooks(callbacks=[CountBatches()]),
                          verbose=0)
    assert CountBatches.count == 0 and len(state.history) == 2
    best = small_model()
    best.optimizer.build(best.trainable_variables)
    load_values(best, tmp_path / "best.weights.npz")
    for restored, expected in zip(rerun.get_weights(), best.get_weights(), strict=True):
        np.testing.assert_array_equal(restored, expected)
    TrainingFolder(tmp_path).mark_finished(state)
    assert TrainingFolder(tmp_path).load_state().finished


def test_a_state_saved_under_the_old_name_of_best_score_resumes(tmp_path):
    (tmp_path / "state.json").write_text(json.dumps(
        {"epoch": 2, "best_val_loss": 0.25, "best_epoch": 2, "scores": [0.3, 0.25]}))
    state = TrainingFolder(tmp_path).load_state()
    assert (state.epoch, state.best_score, state.best_epoch) == (2, 0.25, 2)


def test_early_stopping_keeps_the_best_weights(tmp_path):
    model = small_model()
    losses = iter([0.5, 0.4, 0.45, 0.6, 0.1])

    class FakeValidationLoss(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            logs["val_loss"] = next(losses)

    state = fit_resumably(model, epoch_dataset, None, tmp_path, Stopping(5, patience=2),
                          hooks=EpochHooks(callbacks=[FakeValidationLoss()]), verbose=0)
    assert len(state.history) == 4 and state.best_epoch == 2
    assert state.best_score == pytest.approx(0.4)
    best = small_model()
    best.optimizer.build(best.trainable_variables)
    load_values(best, tmp_path / "best.weights.npz")
    for restored, expected in zip(model.get_weights(), best.get_weights(), strict=True):
        np.testing.assert_array_equal(restored, expected)


class SlowEpochs(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        import time

        time.sleep(0.3)


def test_time_budget_stops_before_an_epoch_that_would_not_fit(tmp_path):
    state = fit_resumably(small_model(), epoch_dataset, epoch_dataset(99), tmp_path,
                          Stopping(5, patience=9, budget_seconds=0.5),
                          hooks=EpochHooks(callbacks=[SlowEpochs()]), verbose=0)
    # Epoch 1 takes > 0.3 s, so a second one (as slow as the slowest) would pass 0.5 s.
    assert len(state.history) == 1
    assert state.train_seconds >= 0.3
    resumed = fit_resumably(small_model(), epoch_dataset, epoch_dataset(99), tmp_path,
                            Stopping(5, patience=9, budget_seconds=0.5), verbose=0)
    assert len(resumed.history) == 1  # the budget counts the time already spent


class CompilingFirstEpoch(keras.callbacks.Callback):
    """Epoch 1 ends with a second of "compiling", timed as JAX's listeners would time it
    (on the last `Compilations` opened: `fit_resumably`'s)."""

    def __init__(self, opened):
        super().__init__()
        self.opened, self.compiled = opened, False

    def on_epoch_end(self, epoch, logs=None):
        import time

        if not self.compiled:
            time.sleep(1.0)
            self.opened[-1].seconds += 1.0
            self.compiled = True


def test_time_budget_measures_epochs_without_their_compiling(tmp_path, monkeypatch):
    from workflows.core import compilation

    opened = []

    class TimedCompilations(compilation.Compilations):  # on every backend: the test times it
        def __enter__(self):
            opened.append(self)
            return self

    monkeypatch.setattr(compilation, "Compilations", TimedCompilations)
    model = small_model()  # its steps traced first: the budget is about epochs here
    fit_resumably(model, epoch_dataset, epoch_dataset(99), tmp_path / "warm-up", Stopping(1),
                  verbose=0)
    state = fit_resumably(model, epoch_dataset, epoch_dataset(99), tmp_path / "run",
                          Stopping(50, patience=50, budget_seconds=2.5),
                          hooks=EpochHooks(callbacks=[CompilingFirstEpoch(opened)]), verbose=0)
    # epoch 1 took over a second, most of it compiling: the next ones fit in what is left
    assert state.history[0]["epoch_compile_seconds"] == pytest.approx(1.0)
    assert state.history[0]["epoch_wall_seconds"] > 1.0 and len(state.history) >= 2
    assert state.history[1].get("epoch_compile_seconds", 0.0) < 0.2


class SlowFirstCall(keras.callbacks.Callback):
    """The first batch's call takes a second longer, as a step's tracing and compiling do
    (timed by the training's own callback, which begins each batch before this one)."""

    def __init__(self):
        super().__init__()
        self.called = False

    def on_train_batch_begin(self, batch, logs=None):
        import time

        if not self.called:
            time.sleep(1.0)
            self.called = True


def test_time_budget_leaves_out_the_batches_first_calls_on_any_backend(tmp_path):
    model = small_model()  # its steps traced first: the slow call is the test's own
    fit_resumably(model, epoch_dataset, epoch_dataset(99), tmp_path / "warm-up", Stopping(1),
                  verbose=0)
    state = fit_resumably(model, epoch_dataset, epoch_dataset(99), tmp_path / "run",
                          Stopping(50, patience=50, budget_seconds=2.5),
                          hooks=EpochHooks(callbacks=[SlowFirstCall()]), verbose=0)
    assert state.history[0]["epoch_compile_seconds"] == pytest.approx(0.9, abs=0.2)
    assert len(state.history) >= 2


def test_epoch_weights_are_kept_for_the_last_epochs_and_average_to_their_mean(tmp_path):
    model = small_model()
    fit_resumably(model, epoch_dataset, epoch_dataset(99), tmp_path, Stopping(4, patience=9),
                  checkpointing=Checkpointing(keep_epoch_weights=3), verbose=0)
    folder = TrainingFolder(tmp_path)
    kept = sorted(path.name for path in tmp_path.glob("epoch-*.weights.npz"))
    assert kept == ["epoch-2.weights.npz", "epoch-3.weights.npz", "epoch-4.weights.npz"]
    checkpoints = []
    for epoch in (2, 3, 4):
        load_values(model, folder.epoch_weights(epoch))
        checkpoints.append([variable.numpy() for variable in model.weights])
    assert not np.allclose(checkpoints[0][0], checkpoints[2][0])  # the epochs differ
    average_weights(model, [folder.epoch_weights(epoch) for epoch in (2, 3, 4)])
    for variable, *values in zip(model.weights, *checkpoints, strict=True):
        np.testing.assert_allclose(variable.numpy(), np.mean(values, axis=0), rtol=1e-6)


def interrupted_run(folder):
    with pytest.raises(KeyboardInterrupt):
        fit_resumably(small_model(), epoch_dataset, epoch_dataset(99), folder,
                      Stopping(3, patience=9), checkpointing=Checkpointing(every_steps=3),
                      hooks=EpochHooks(callbacks=[InterruptAt(epoch=1, batch=4)]), verbose=0)
    return TrainingFolder(folder).load_state()


def damage(path, at=None):
    data = bytearray(path.read_bytes())
    start = len(data) // 2 if at is None else at
    data[start:start + 64] = bytes(64)  # 64 bytes overwritten, the size unchanged
    path.write_bytes(bytes(data))


def test_a_damaged_checkpoint_is_reported_and_the_run_resumes_from_the_one_before(
        tmp_path, capsys):
    state = interrupted_run(tmp_path)
    assert (state.epoch, state.step) == (1, 5)
    damage(tmp_path / state.checkpoint)
    model, CountBatches.count = small_model(), 0
    state = fit_resumably(model, epoch_dataset, epoch_dataset(99), tmp_path,
                          Stopping(3, patience=9), hooks=EpochHooks(callbacks=[CountBatches()]),
                          verbose=0)
    assert "is damaged" in capsys.readouterr().out
    assert CountBatches.count == (STEPS - 3) + STEPS  # from the checkpoint after batch 3
    assert int(model.optimizer.iterations.numpy()) == 3 * STEPS and state.epoch == 3


def test_a_truncated_checkpoint_with_no_intact_one_before_restarts_the_run_and_says_so(
        tmp_path, capsys):
    state = interrupted_run(tmp_path)
    newest = tmp_path / state.checkpoint
    newest.write_bytes(newest.read_bytes()[:100])  # truncated
    previous = json.loads((tmp_path / "state.previous.json").read_text())["checkpoint"]
    (tmp_path / previous).unlink()
    model = small_model()
    state = fit_resumably(model, epoch_dataset, epoch_dataset(99), tmp_path,
                          Stopping(2, patience=9), verbose=0)
    out = capsys.readouterr().out
    assert "no earlier one is intact: training this run again from its first epoch" in out
    assert state.epoch == 2 and len(state.history) == 2
    assert int(model.optimizer.iterations.numpy()) == 2 * STEPS


def test_a_damaged_newest_checkpoint_and_a_truncated_previous_state_fall_back_to_an_older_one(
        tmp_path, capsys):
    state = interrupted_run(tmp_path)  # checkpoints after batch 3 and at the stop (batch 5)
    older = json.loads((tmp_path / "state.previous.json").read_text())["checkpoint"]
    assert older in state.digests and older != state.checkpoint
    damage(tmp_path / state.checkpoint)
    previous = tmp_path / "state.previous.json"
    previous.write_text(previous.read_text()[:20])  # the state that named it, cut short
    model, CountBatches.count = small_model(), 0
    state = fit_resumably(model, epoch_dataset, epoch_dataset(99), tmp_path,
                          Stopping(3, patience=9), hooks=EpochHooks(callbacks=[CountBatches()]),
                          verbose=0)
    assert f"resuming from {older} (epoch 2, after batch 3)" in capsys.readouterr().out
    assert CountBatches.count == (STEPS - 3) + STEPS and len(state.history) == 3
    assert int(model.optimizer.iterations.numpy()) == 3 * STEPS


class FailAfterTraining(Exception):
    pass


def test_a_checkpoint_after_an_epochs_last_batch_resumes_at_its_validation(tmp_path):
    def crash_in_the_epoch_end_work(epoch, metrics):
        raise FailAfterTraining  # a crash, not a stop: no checkpoint at the moment

    with pytest.raises(FailAfterTraining):
        fit_resumably(small_model(), epoch_dataset, epoch_dataset(99), tmp_path,
                      Stopping(3, patience=9), checkpointing=Checkpointing(every_steps=STEPS),
                      hooks=EpochHooks(epoch_metrics=crash_in_the_epoch_end_work), verbose=0)
    state = TrainingFolder(tmp_path).load_state()
    assert (state.epoch, state.step, state.epoch_trained) == (0, STEPS, False)
    CountBatches.count = 0
    state = fit_resumably(small_model(), epoch_dataset, epoch_dataset(99), tmp_path,
                          Stopping(3, patience=9), hooks=EpochHooks(callbacks=[CountBatches()]),
                          verbose=0)
    assert CountBatches.count == 2 * STEPS and len(state.history) == 3  # epoch 1 validated
    assert all({"loss", "accuracy", "val_loss"} <= set(epoch) for epoch in state.history)


def test_a_resumed_epoch_logs_the_loss_of_all_its_batches(tmp_path):
    keras.utils.set_random_seed(3)
    plain = fit_resumably(small_model(), epoch_dataset, epoch_dataset(99), tmp_path / "plain",
                          Stopping(2, patience=9), verbose=0)
    keras.utils.set_random_seed(3)
    interrupted_run(tmp_path / "stopped")  # stopped after batch 5 of epoch 2
    resumed = fit_resumably(small_model(), epoch_dataset, epoch_dataset(99), tmp_path / "stopped",
                            Stopping(2, patience=9), verbose=0)
    # the same batches and weights: the epoch's loss is the mean over all 8 batches
    assert resumed.history[1]["loss"] == pytest.approx(plain.history[1]["loss"], rel=0.05)
    assert resumed.history[1]["val_loss"] == pytest.approx(plain.history[1]["val_loss"],
                                                           rel=1e-4)


def test_a_wall_time_budget_counts_the_epoch_end_work_and_ends_an_epoch_that_runs_over(
        tmp_path):
    import time

    def slow_epoch_end(epoch, metrics):
        time.sleep(0.4)

    model = small_model()  # its steps traced first: the budget is about epochs here
    fit_resumably(model, epoch_dataset, epoch_dataset(99), tmp_path / "warm-up", Stopping(1),
                  verbose=0)
    started = time.monotonic()
    state = fit_resumably(model, epoch_dataset, epoch_dataset(99), tmp_path / "run",
                          Stopping(50, patience=50, budget_seconds=2.0, started=started - 1.0),
                          hooks=EpochHooks(epoch_metrics=slow_epoch_end), verbose=0)
    # a second had gone before `fit_resumably` (imports, data): one second left
    assert time.monotonic() - started < 2.0 and 1 <= len(state.history) <= 3
    assert state.wall_seconds == pytest.approx(time.monotonic() - started + 1.0, abs=0.3)
    assert all(0 < epoch["training_share"] < 1 for epoch in state.history[1:])


def test_damaged_best_weights_are_reported_and_never_loaded(tmp_path, capsys):
    folder = TrainingFolder(tmp_path)
    fit_resumably(small_model(), epoch_dataset, epoch_dataset(99), folder, Stopping(2, patience=9),
                  verbose=0)
    state = folder.load_state()
    damage(folder.best_weights)
    model = small_model()
    model.optimizer.build(model.trainable_variables)
    assert not folder.load_best_weights(model, state)
    assert "best.weights.npz is damaged" in capsys.readouterr().out
    latest = small_model()
    latest.optimizer.build(latest.trainable_variables)
    load_values(latest, tmp_path / state.checkpoint)
    for mine, expected in zip(model.get_weights(), latest.get_weights(), strict=True):
        assert np.array_equal(mine, expected)  # the latest checkpoint's, all finite


def test_a_model_with_non_finite_weights_or_outputs_is_never_exported():
    from workflows.core.exported_weights import ExportError, check_finite

    model, validation = small_model(), epoch_dataset(99)
    check_finite(model, validation)  # a trained-looking model passes
    kernel, bias = model.get_weights()
    model.set_weights([np.full_like(kernel, np.nan), bias])
    with pytest.raises(ExportError, match="holds NaN or infinite values"):
        check_finite(model, validation)
    model.set_weights([np.full_like(kernel, 3e38), bias])  # finite, but the outputs are not
    model.layers[-1].activation = keras.activations.linear
    model.compile(optimizer="adam", loss="mse")
    with pytest.raises(ExportError, match="loss on a validation batch is"):
        check_finite(model, validation)


class CrashAt(InterruptAt):
    """A process killed at that batch's end: no stop checkpoint is written."""

    def on_train_batch_end(self, batch, logs=None):
        if self.model.optimizer.iterations.numpy() == self.epoch * STEPS + self.batch + 1:
            raise RuntimeError("killed")


@pytest.mark.parametrize("seconds, resumed_at", [(0.0, 5), (1e9, 0)])
def test_long_steps_are_checkpointed_on_time_before_their_step_count(
        tmp_path, monkeypatch, seconds, resumed_at):
    # steps of a minute on a CPU: a kill must not lose every batch since the epoch began
    monkeypatch.setattr("workflows.core.fitting.CHECKPOINT_EVERY_SECONDS", seconds)
    with pytest.raises(RuntimeError):
        fit_resumably(small_model(), epoch_dataset, epoch_dataset(99), tmp_path,
                      Stopping(2, patience=9), checkpointing=Checkpointing(every_steps=1000),
                      hooks=EpochHooks(callbacks=[CrashAt(epoch=0, batch=4)]), verbose=0)
    assert TrainingFolder(tmp_path).load_state().step == resumed_at


def cosine_model():
    import layers

    schedule = layers.WarmupCosineToHorizon(1e-2, warmup_share=0.25)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, activation="sigmoid")])
    optimizer = keras.optimizers.Adam(schedule)
    schedule.attach(optimizer)
    model.compile(optimizer=optimizer, loss="binary_crossentropy", metrics=["accuracy"])
    return model, schedule


def test_a_run_without_budget_sizes_its_schedule_to_its_epochs(tmp_path):
    model, schedule = cosine_model()
    state = fit_resumably(model, epoch_dataset, epoch_dataset(99), tmp_path,
                          Stopping(3, patience=9), verbose=0)
    assert [epoch["horizon_steps"] for epoch in state.history] == [3 * STEPS] * 3
    assert float(keras.ops.convert_to_numpy(model.optimizer.learning_rate)) == 0.0  # its end


def test_a_budget_sizes_the_schedule_to_the_steps_its_rest_affords():
    from types import SimpleNamespace

    from workflows.core.horizon import ScheduleHorizon
    from workflows.core.stopping import WallBudget

    model, schedule = cosine_model()
    budget = WallBudget(100.0, spent=20.0)
    horizon = ScheduleHorizon(model, budget, epochs=1000)
    state = SimpleNamespace(epoch=2, step=0, history=[])
    horizon.start_epoch(state, STEPS)  # nothing measured yet: every epoch
    assert schedule.horizon_steps == 1000 * STEPS and horizon.wants_early_pace
    horizon.size(state, seconds_per_step=0.5)
    left = 100.0 - budget.used() - budget.reserve
    assert abs(schedule.horizon_steps - (2 * STEPS + left / 0.5)) <= 1
    several = ScheduleHorizon(model, budget, epochs=1000, single_process=False)
    several.start_epoch(state, STEPS)  # each process's clock differs: the epochs decide
    several.size(state, seconds_per_step=0.5)
    assert schedule.horizon_steps == 1000 * STEPS and not several.wants_early_pace


def test_a_budget_measures_its_pace_early_in_the_first_epoch(tmp_path, monkeypatch):
    from workflows.core.horizon import ScheduleHorizon

    monkeypatch.setattr(ScheduleHorizon, "EARLY_SECONDS", 0.0)
    sized, size = [], ScheduleHorizon.size

    def record(self, state, seconds_per_step=None):
        sized.append((state.epoch, state.step, seconds_per_step))
        size(self, state, seconds_per_step)

    monkeypatch.setattr(ScheduleHorizon, "size", record)
    model, schedule = cosine_model()
    fit_resumably(model, epoch_dataset, epoch_dataset(99), tmp_path,
                  Stopping(2, patience=9, budget_seconds=3600), verbose=0)
    # at the start (every epoch), at the second batch's end (its pace), after each epoch
    assert [(epoch, step) for epoch, step, _ in sized] == [(0, 0), (0, 2), (1, 0), (2, 0)]
    assert sized[0][2] is None and all(pace > 0 for _, _, pace in sized[1:])


def test_several_steps_a_call_checkpoint_and_resume_without_losing_or_redoing_a_batch(tmp_path):
    class InterruptAfter(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if int(self.model.optimizer.iterations.numpy()) >= STEPS + 4:
                raise KeyboardInterrupt

    def model():
        built = small_model()
        built.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"],
                      steps_per_execution=3)
        return built

    with pytest.raises(KeyboardInterrupt):
        fit_resumably(model(), epoch_dataset, epoch_dataset(99), tmp_path, Stopping(3, patience=9),
                      checkpointing=Checkpointing(every_steps=4),
                      hooks=EpochHooks(callbacks=[InterruptAfter()]), verbose=0)
    state = TrainingFolder(tmp_path).load_state()
    assert (state.epoch, state.step) == (1, 6)  # calls of 3 steps: 3, 6 (past 4), stopped
    resumed = model()
    state = fit_resumably(resumed, epoch_dataset, epoch_dataset(99), tmp_path,
                          Stopping(3, patience=9), checkpointing=Checkpointing(every_steps=4),
                          verbose=0)
    assert int(resumed.optimizer.iterations.numpy()) == 3 * STEPS and len(state.history) == 3


@pytest.mark.parametrize("stop", ["mid-epoch", "after the epoch's batches"])
def test_a_fallback_to_an_older_checkpoint_keeps_that_epochs_metrics(tmp_path, stop):
    """The newest checkpoint damaged and the state before it cut short: the run goes on
    from an older checkpoint, and the epoch it resumes logs the loss and accuracy of all
    its batches, as the run that was never stopped does."""
    keras.utils.set_random_seed(3)
    plain = fit_resumably(small_model(), epoch_dataset, epoch_dataset(99), tmp_path / "plain",
                          Stopping(2, patience=9), verbose=0)
    keras.utils.set_random_seed(3)
    folder = tmp_path / "stopped"
    if stop == "mid-epoch":
        interrupted_run(folder)  # checkpoints after batches 3 and 5 of epoch 2
    else:
        def crash_then_stop(epoch, metrics):  # epoch 2: a checkpoint at its last batch,
            raise KeyboardInterrupt            # then one at the stop in its epoch-end work

        with pytest.raises(KeyboardInterrupt):
            fit_resumably(small_model(), epoch_dataset, epoch_dataset(99), folder,
                          Stopping(2, patience=9), Checkpointing(every_steps=STEPS),
                          EpochHooks(epoch_metrics=lambda epoch, metrics: epoch
                                     and crash_then_stop(epoch, metrics)), verbose=0)
    state = TrainingFolder(folder).load_state()
    older = json.loads((folder / "state.previous.json").read_text())["checkpoint"]
    damage(folder / state.checkpoint)
    previous = folder / "state.previous.json"
    previous.write_text(previous.read_text()[:20])
    resumed = fit_resumably(small_model(), epoch_dataset, epoch_dataset(99), folder,
                            Stopping(2, patience=9), verbose=0)
    assert older != state.checkpoint and len(resumed.history) == 2
    for name in ("loss", "accuracy"):
        assert resumed.history[1][name] == pytest.approx(plain.history[1][name], rel=0.05)


def _epoch_end_lines():
    """Each statement of the epoch's end: `update_early_stopping`, `_Epoch.end` and the
    checkpoint and logging it may call (`_Epoch.save`), as (code, line) pairs."""
    import dis

    from workflows.core import fitting, stopping

    codes = (stopping.update_early_stopping.__code__, fitting._Epoch.end.__code__,
             fitting._Epoch.save.__code__)
    return [(code, line) for code in codes
            for line in sorted({lineno for _, lineno in dis.findlinestarts(code)
                                if lineno} - {code.co_firstlineno})]


@pytest.mark.integration
@pytest.mark.parametrize("where", _epoch_end_lines(),
                         ids=lambda where: f"{where[0].co_name}:{where[1]}")
def test_a_stop_at_any_statement_of_an_epoch_end_keeps_each_epoch_once(tmp_path, where):
    """A stop signal delivered at a statement of epoch 2's end (as a SIGTERM may be; a
    statement that epoch does not reach gets none): the rerun logs each epoch exactly
    once, with its own metrics, and scores three."""
    import signal
    import sys

    from process import stops
    from process.stops import Stop

    code, line = where
    logged, delivered = [], []

    def tracer(frame, event, arg):
        if frame.f_code is not code:
            return None

        def local(frame, event, arg):
            if event == "line" and frame.f_lineno == line and len(logged) == 1 \
                    and not Stop.requested:
                delivered.append(line)
                stops.interrupt(signal.SIGTERM, frame)  # as the handler does
            return local
        return local

    def log(epoch, metrics):
        logged.append((epoch, metrics["loss"]))

    validation = epoch_dataset(99)
    sys.settrace(tracer)
    stopped = False
    try:
        fit_resumably(small_model(), epoch_dataset, validation, tmp_path, Stopping(3, patience=9),
                      hooks=EpochHooks(on_epoch_end=log), verbose=0)
    except KeyboardInterrupt:
        stopped = True
    finally:
        sys.settrace(None)
        Stop.requested, Stop.signals, Stop.reported = False, 0, False
    assert stopped == bool(delivered)
    state = fit_resumably(small_model(), epoch_dataset, validation, tmp_path,
                          Stopping(3, patience=9), hooks=EpochHooks(on_epoch_end=log), verbose=0)
    assert [epoch for epoch, _ in logged] == [0, 1, 2]
    assert len(state.history) == 3 and len(state.scores) == 3 and state.epoch == 3
    assert [loss for _, loss in logged] == [epoch["loss"] for epoch in state.history]
