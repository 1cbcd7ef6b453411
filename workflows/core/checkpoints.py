"""A run folder's checkpoints: the training state, the weight files and their digests
(the files themselves: `weight_files.py`).

A run folder holds `state.json` (a `TrainingState`: where training is, each epoch's
metrics, the digest of every weights file), the latest checkpoint and the one before
it (the values of the model's variables, then its optimizer's, as `.npz`), the best
epoch's weights and the last epochs' (for averaging). Every file is written to a
temporary sibling and renamed into place, so a stop or crash at any moment leaves a
state whose checkpoint is complete; a damaged newest checkpoint falls back to the
newest intact one. `fitting.fit_resumably` decides when to write them.
"""

import dataclasses
import json
import math
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from data_prep.cache import remove, sha256_of
from process.errors import UserError
from workflows.core.weight_files import (
    assign_values,
    load_values,
    replace_atomically,
    weight_values,
    write_values,
)

STATE_FILE = "state.json"
PREVIOUS_STATE_FILE = "state.previous.json"  # the state of the checkpoint before
BEST_WEIGHTS = "best.weights.npz"
CHECKPOINT = re.compile(r"checkpoint-e(\d+)-s(\d+)(-trained)?\.npz")
# A checkpoint costs at most this share of the time since the one before it (it is
# skipped at an epoch end until then), unless it takes under `CHEAP_CHECKPOINT_SECONDS`.
CHECKPOINT_SHARE = 0.05
CHEAP_CHECKPOINT_SECONDS = 0.25


class DamagedStateError(UserError):
    """A run folder holds checkpoints but no readable state to resume them from."""


@dataclass
class TrainingState:
    """What a run folder records about its training, saved with every checkpoint."""

    epoch: int = 0  # completed epochs
    step: int = 0  # batches already trained in the current epoch
    epoch_trained: bool = False  # all the current epoch's batches are trained (not validated)
    partial: dict = field(default_factory=dict)  # the current epoch's metrics so far
    checkpoint: str = ""  # weights + optimizer file of this state
    history: list = field(default_factory=list)  # metrics of each completed epoch
    scores: list = field(default_factory=list)  # each epoch's monitored value, lower is better
    best_score: float = math.inf  # the best epoch's monitored value, lower is better
    best_epoch: int = 0
    epochs_without_improvement: int = 0
    run_id: str = ""
    train_seconds: float = 0.0  # time in training batches, over every resumption
    wall_seconds: float = 0.0  # wall time of `train` up to this state, likewise
    finished: bool = False  # trained, summarized and the model logged: nothing left to do
    digests: dict = field(default_factory=dict)  # weights file -> SHA-256 when written
    partials: dict = field(default_factory=dict)  # checkpoint kept -> its `partial`

    @property
    def where(self):
        if self.epoch and not self.step and not self.epoch_trained:
            return f"after epoch {self.epoch}"  # (not "epoch 4, after batch 0" of 3)
        return (f"epoch {self.epoch + 1}, " + ("all its batches trained" if self.epoch_trained
                                               else f"after batch {self.step}"))

    def back_to(self, checkpoint):
        """This state as it was at an older `checkpoint` of the same run (its name says
        where it is; the history is append-only), or None for another name."""
        match = CHECKPOINT.fullmatch(checkpoint)
        if not match or int(match[1]) > self.epoch or len(self.scores) < int(match[1]):
            return None
        epoch = int(match[1])
        scores = self.scores[:epoch]
        best = min(range(epoch), key=scores.__getitem__, default=-1)
        return dataclasses.replace(
            self, epoch=epoch, step=int(match[2]), epoch_trained=bool(match[3]),
            partial=dict(self.partials.get(checkpoint, {})),
            checkpoint=checkpoint, history=self.history[:epoch], scores=scores,
            best_score=scores[best] if best >= 0 else math.inf, best_epoch=best + 1,
            epochs_without_improvement=epoch - best - 1, finished=False,
            digests={name: digest for name, digest in self.digests.items()
                     if name != BEST_WEIGHTS or best + 1 == self.best_epoch})


def _renamed(saved):
    """A saved state's fields under today's names (`best_val_loss` was `best_score`'s
    name before it held monitors other than the validation loss)."""
    if "best_val_loss" in saved:
        saved["best_score"] = saved.pop("best_val_loss")
    return saved


class TrainingFolder:
    """A run's folder: `state.json`, the latest checkpoint (and the one before it), the
    best epoch's weights and the last epochs' (for averaging).

    The best and epoch weights are held in memory and written with the next checkpoint,
    so an epoch that writes no checkpoint costs no disk time. With several processes,
    only the chief writes the folder: the others read it (the state and checkpoint they
    resume from, the weights they end with) but write their copies to `writes_to`, a
    scratch folder of their own. `barrier(name)` waits for every process.
    """

    def __init__(self, directory, writes_to=None, barrier=None):
        self.directory = Path(directory)
        self.output = Path(writes_to or directory)
        self.barrier = barrier
        self.unwritten = {}  # file name -> weight values not yet written
        self.checkpoint_seconds = 0.0  # what the last checkpoint took

    def synchronize(self, name):
        """Before reading what another process wrote: waits until every process is here."""
        if self.barrier:
            self.barrier(name)

    def load_state(self):
        """The saved state; if `state.json` is unreadable, the one before it (said so).
        A folder whose state files are both damaged is refused in one line
        (`DamagedStateError`): its checkpoints hold weights, not the epochs' history
        and scores a resumed run needs, and a silent fresh start would orphan its run."""
        for name in (STATE_FILE, PREVIOUS_STATE_FILE):
            state = self._read_state(self.directory / name, say=True)
            if state is not None:
                return state
        damaged = [name for name in (STATE_FILE, PREVIOUS_STATE_FILE)
                   if (self.directory / name).exists()]
        if damaged:
            checkpoints = sorted(p.name for p in self.directory.glob("checkpoint-*"))
            raise DamagedStateError(
                f"{self.directory}: {' and '.join(damaged)} are damaged, so the training "
                "cannot resume" + (f" from {checkpoints[-1]}" if checkpoints else "")
                + ": rerun with --retrain to train it again (the old run is marked FAILED), "
                "or put back a copy of the folder.")
        return TrainingState()

    @staticmethod
    def _read_state(path, say=False):
        if not path.exists():
            return None
        try:
            return TrainingState(**_renamed(json.loads(path.read_text())))
        except (OSError, ValueError, TypeError) as error:
            if say:
                print(f"{path} is damaged ({error}); trying the state before it.", flush=True)
            return None

    def save_state(self, state):
        self.output.mkdir(parents=True, exist_ok=True)
        replace_atomically(self.output / STATE_FILE,
                            lambda tmp: tmp.write_text(json.dumps(asdict(state), indent=2)))

    def checkpoint(self, model, state):
        """Writes the weights held in memory, a new checkpoint (weights and optimizer),
        then the state naming it; the state before it and its file are kept, to fall
        back on. A crash at any point leaves a state whose checkpoint is complete."""
        started = time.perf_counter()
        self.output.mkdir(parents=True, exist_ok=True)
        for name, values in self.unwritten.items():
            state.digests[name] = write_values(self.output / name, values)
        self.unwritten.clear()
        state.checkpoint = (f"checkpoint-e{state.epoch}-s{state.step}"
                            f"{'-trained' if state.epoch_trained else ''}.npz")
        state.digests[state.checkpoint] = write_values(self.output / state.checkpoint,
                                                        weight_values(model, optimizer=True))
        current = self.output / STATE_FILE
        if current.exists():
            os.replace(current, self.output / PREVIOUS_STATE_FILE)
        previous = self._read_state(self.output / PREVIOUS_STATE_FILE) or TrainingState()
        kept = (state.checkpoint, previous.checkpoint)
        state.digests = {name: digest for name, digest in state.digests.items()
                         if not name.startswith("checkpoint-") or name in kept}
        state.partials = {name: partial for name, partial in
                          {**state.partials, state.checkpoint: dict(state.partial)}.items()
                          if name in kept}
        self.save_state(state)
        for path in self.output.glob("checkpoint-*"):
            if path.name not in (state.checkpoint, previous.checkpoint):
                path.unlink(missing_ok=True)
        self.checkpoint_seconds = time.perf_counter() - started

    def due(self, since):
        """Whether a checkpoint is worth writing `since` seconds after the last one."""
        return (self.checkpoint_seconds < CHEAP_CHECKPOINT_SECONDS
                or self.checkpoint_seconds <= CHECKPOINT_SHARE * since)

    def _fallbacks(self, state):
        """The states to resume from, newest first: `state`, the one before it, then
        older checkpoints `state` names (or the folder holds), as `state` was then."""
        seen = {state.checkpoint}
        before = self._read_state(self.directory / PREVIOUS_STATE_FILE)
        named = [before] if before and before.checkpoint else []
        names = sorted({*state.digests, *(p.name for p in self.directory.glob("checkpoint-*"))},
                       key=_checkpoint_order, reverse=True)
        named += [state.back_to(name) for name in names]
        for candidate in named:
            if candidate is not None and candidate.checkpoint not in seen:
                seen.add(candidate.checkpoint)
                yield candidate

    def can_resume(self, state):
        """Whether `state`'s checkpoint, or an older one, is intact (by its recorded
        digest); True when there is nothing to resume from."""
        return not state.checkpoint or any(
            self.problem_with(candidate.checkpoint, candidate) is None
            for candidate in [state, *self._fallbacks(state)])

    def mark_finished(self, state):
        """Records that the run is complete; call it after the model is logged."""
        state.finished = True
        self.save_state(state)

    def restore(self, model, state):
        """Loads the state's checkpoint and returns the state to go on from: if that
        checkpoint is missing or damaged (said so), the newest intact one before it,
        else a fresh start of the training (said so too)."""
        if not state.checkpoint:
            return state
        if model.optimizer is not None and not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)
        problem = self.load_weights(model, state.checkpoint, state)
        if problem is None:
            return state
        for candidate in self._fallbacks(state):
            if self.load_weights(model, candidate.checkpoint, candidate) is None:
                print(f"Checkpoint {state.checkpoint} {problem}: resuming from "
                      f"{candidate.checkpoint} ({candidate.where}).", flush=True)
                if BEST_WEIGHTS not in candidate.digests:  # of epochs that are gone
                    (self.output / BEST_WEIGHTS).unlink(missing_ok=True)
                return candidate
        print(f"Checkpoint {state.checkpoint} {problem} and no earlier one is intact: "
              "training this run again from its first epoch.", flush=True)
        return TrainingState(run_id=state.run_id)

    def problem_with(self, name, state):
        """What is wrong with weights file `name`: missing, or not the bytes whose digest
        `state` recorded (None if neither)."""
        path = self.directory / name
        if not path.is_file():
            return "is missing"
        recorded = state.digests.get(name)
        if recorded is not None and sha256_of(path) != recorded:
            return "is damaged (its contents changed since it was written)"
        return None

    def load_weights(self, model, name, state):
        """Loads weights file `name` if it is intact; returns None, or what is wrong."""
        problem = self.problem_with(name, state)
        if problem is not None:
            return problem
        try:
            load_values(model, self.directory / name)
        except (OSError, ValueError, KeyError, EOFError) as error:  # e.g. a truncated file
            return f"cannot be read ({type(error).__name__}: {error})"
        return None

    @property
    def best_weights(self):
        return self.directory / BEST_WEIGHTS

    def keep_best_weights(self, model):
        """Holds the model's weights as the best epoch's (written with the next checkpoint)."""
        self.unwritten[BEST_WEIGHTS] = weight_values(model)

    def load_best_weights(self, model, state):
        """Gives `model` the best epoch's weights; if their file is damaged, says so and
        leaves the model as it is (the latest checkpoint's weights). Returns whether
        the best weights were loaded."""
        if BEST_WEIGHTS in self.unwritten:
            assign_values(model, self.unwritten[BEST_WEIGHTS])
            return True
        if not self.best_weights.exists():
            return False
        problem = self.load_weights(model, BEST_WEIGHTS, state)
        if problem is None:
            return True
        print(f"{self.best_weights} {problem}: keeping the weights of the latest checkpoint "
              f"(epoch {state.epoch}) instead of the best epoch's.", flush=True)
        if state.checkpoint:
            self.load_weights(model, state.checkpoint, state)
        return False

    def epoch_weights(self, epoch):
        """The weights at the end of `epoch` (1-based), kept for checkpoint averaging."""
        return self.directory / _epoch_file(epoch)

    def keep_epoch_weights(self, model, epoch, keep, state):
        """Holds `epoch`'s weights (written with the next checkpoint) and drops those
        older than the last `keep` epochs."""
        self.unwritten[_epoch_file(epoch)] = weight_values(model)
        for name in [*self.unwritten, *(p.name for p in self.output.glob("epoch-*.npz"))]:
            if name.startswith("epoch-") and int(name.split("-")[1].split(".")[0]) <= epoch - keep:
                self.unwritten.pop(name, None)
                (self.output / name).unlink(missing_ok=True)
                state.digests.pop(name, None)

    def intact_epoch_weights(self, epochs, state):
        """Those of `epochs` whose weights file exists and matches its digest."""
        return [epoch for epoch in epochs
                if self.problem_with(_epoch_file(epoch), state) is None]


def _epoch_file(epoch):
    return f"epoch-{epoch}.weights.npz"


def _checkpoint_order(name):
    match = CHECKPOINT.fullmatch(name)
    return (int(match[1]), bool(match[3]), int(match[2])) if match else (-1, False, -1)


def starting_state(folder, retrain=False):
    """The run folder's saved state; with `retrain`, the folder is wiped first."""
    if retrain and Path(folder).exists():
        shutil.rmtree(folder)
    return TrainingFolder(folder).load_state()


def remove_partial_files(folder):
    """Temporary files and folders (a model exported as a folder) left by a killed
    trainer (call while no other process trains here)."""
    for partial in Path(folder).glob(".partial-*"):
        remove(partial)
