"""A learning-rate schedule sized to the run as it trains: its warmup and decay fit the
steps the run affords (`ScheduleHorizon`, for `layers.WarmupCosineToHorizon`)."""

import math

import keras


class ScheduleHorizon:
    """Sizes a learning-rate schedule that can be (`set_horizon`, such as
    `layers.WarmupCosineToHorizon`) to the run, so that its warmup and decay fit it:
    the steps of every epoch it may train or, with a wall budget, the steps done plus
    those the rest of the budget affords at the pace measured so far. The pace is
    measured early in this command's first epoch, from its batches once compiled (a
    fifth more for the epochs' end work), then after each epoch from its whole wall
    time without its compiling. With several processes, from the epochs alone (each
    process's clock would size it differently). Nothing happens for other schedules."""

    END_WORK = 1.2  # an epoch's wall time over its batches' time, until measured
    EARLY_SECONDS = 2.0  # batches timed before the first measure, once compiled

    def __init__(self, model, budget, epochs, single_process=True):
        schedule = getattr(getattr(model, "optimizer", None), "_learning_rate", None)
        self.schedule = schedule if hasattr(schedule, "set_horizon") else None
        self.budget, self.epochs, self.single_process = budget, epochs, single_process
        self.steps_per_epoch = None
        self.wants_early_pace = False
        self.timed_from = None  # (perf_counter, batches) at the end of the first call

    def __bool__(self):
        return self.schedule is not None

    def start_epoch(self, state, steps_per_epoch):
        """At an epoch's start: the first one sizes the schedule by the epochs (or by the
        pace of the epochs a resumed run measured), then asks for an early measure."""
        first = self.steps_per_epoch is None
        self.steps_per_epoch = steps_per_epoch or self.steps_per_epoch
        if first and self.steps_per_epoch:
            self.size(state, self.measured_pace(state))
            self.wants_early_pace = self.timed_budget and not state.step

    @property
    def timed_budget(self):
        return self.budget.seconds is not None and self.single_process

    def early_pace(self, model, state, now, batches):
        """Called at each batch end of the first epoch: once the batches after the first
        call (which compiles) have run `EARLY_SECONDS`, sizes the schedule by them."""
        if self.timed_from is None:
            self.timed_from = (now, batches)
            return
        seconds, count = now - self.timed_from[0], batches - self.timed_from[1]
        if seconds < self.EARLY_SECONDS or count < 1:
            return
        self.wants_early_pace = False
        if keras.backend.backend() == "jax":
            model.jax_state_sync()  # the loop then reads the variables again, horizon too
        self.size(state, self.END_WORK * seconds / count)

    def after_epoch(self, state):
        """Once an epoch is over: sizes the schedule by its pace."""
        if self.steps_per_epoch:
            self.size(state, self.measured_pace(state))

    def measured_pace(self, state):
        """Wall seconds a step of the last epoch trained whole took, without compiling."""
        whole = [epoch for epoch in state.history if "epoch_seconds" in epoch]
        if not whole or not self.steps_per_epoch:
            return None
        last = whole[-1]
        wall = last.get("epoch_wall_seconds", 0.0) - last.get("epoch_compile_seconds", 0.0)
        return wall / self.steps_per_epoch if wall > 0 else None

    def size(self, state, seconds_per_step=None):
        most = self.epochs * self.steps_per_epoch
        horizon = most
        if seconds_per_step and self.timed_budget:
            done = state.epoch * self.steps_per_epoch + state.step
            left = max(0.0, self.budget.seconds - self.budget.used() - self.budget.reserve)
            horizon = min(most, done + math.ceil(left / seconds_per_step))
        if horizon != self.schedule.horizon_steps:
            self.schedule.set_horizon(horizon)
