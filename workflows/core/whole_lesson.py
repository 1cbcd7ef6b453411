"""The whole lesson in one command (`run`), the same in every lesson: its data prepared,
then each model trained, evaluated and tried on the lesson's examples, then the runs
compared.

A lesson says what each part is with `WholeLesson` and adds the step with
`add_whole_lesson(CLI, help, WholeLesson(...))`; the order is this module's.
"""

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple


class Trained(NamedTuple):
    """One row of a whole-lesson run: the model's name, its test metrics, the minutes
    its training and evaluation took, and its MLflow run id."""

    model: str
    metrics: dict
    minutes: float
    run_id: str


@dataclass(frozen=True)
class WholeLesson:
    """The parts of a lesson's `run`, each given the step's parsed `args`:

    `prepare(args, configs)` -> the prepared data; `evaluate(args, run_id)` -> its test
    metrics; `use(args, config, run_id, prepared)` tries the model on the lesson's
    examples. Optional: `configs(args)` (default: the step's configs), `plan(args,
    configs, prepared)` -> the configs to train, `budget(args, config, index, count,
    evaluation_seconds)` -> the config to train `index`-th (its share of a budget), and
    `finish(args, board)` (default: the lesson's runs compared, of the run filters'
    values the configs share), `board` holding one `Trained` per config."""

    prepare: Callable[..., Any]
    evaluate: Callable[..., dict]
    use: Callable[..., Any]
    configs: Callable[..., list] | None = None
    plan: Callable[..., list] | None = None
    budget: Callable[..., Any] | None = None
    finish: Callable[..., Any] | None = None


def add_whole_lesson(cli, help_text, lesson, *, train="one", check=None):
    """Adds the `run` step to `cli` (a `LessonCLI`): `lesson`'s parts, in order."""
    return cli.step("run", help_text, functools.partial(run_whole_lesson, cli, lesson),
                    data=True, train=train, check=check, one_process=True)


def run_whole_lesson(cli, lesson, args):
    """Prepares, trains, evaluates and uses each config, then finishes; returns the board."""
    from workflows.core import runs

    configs = lesson.configs(args) if lesson.configs else cli.configs(args)
    prepared = lesson.prepare(args, configs)
    if lesson.plan:
        configs = lesson.plan(args, configs, prepared)
    board, evaluation_seconds = [], []
    for index, config in enumerate(configs):
        if lesson.budget:
            config = lesson.budget(args, config, index, len(configs), evaluation_seconds)
        began = time.perf_counter()
        run_id = cli.train_config(args, config)
        trained = time.perf_counter()
        metrics = lesson.evaluate(args, run_id)
        lesson.use(args, config, run_id, prepared)
        evaluation_seconds.append(time.perf_counter() - trained)
        board.append(Trained(getattr(config, cli.lesson.catalog.key), metrics,
                             (time.perf_counter() - began) / 60, run_id))
    if lesson.finish:
        lesson.finish(args, board)
    else:
        runs.compare(cli.lesson, params=shared_values(configs, cli.run_filters))
    runs.print_where_results_are(cli.lesson, args.work_dir)
    return board


def shared_values(configs, names):
    """`{name: value}` of the fields of `names` that every config holds the same value of."""
    values = {name: {getattr(config, name, None) for config in configs} for name in names}
    return {name: found.pop() for name, found in values.items()
            if len(found) == 1 and None not in found}
