"""The whole-lesson step (`run`) of every lesson: its parts called in the core's order."""

from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from workflows import imdb_sentiment, language_model, retrieval, translation
from workflows.core import runs, whole_lesson


@dataclass
class Config:
    model: str
    direction: str = "en-es"
    max_train_minutes: float = 10.0


class FakeCLI:
    """What `run_whole_lesson` asks of a `LessonCLI`, recording the calls."""

    def __init__(self, calls):
        self.calls = calls
        self.lesson = SimpleNamespace(catalog=SimpleNamespace(key="model"))
        self.run_filters = ("direction",)

    def configs(self, args):
        return [Config("bow"), Config("gru")]

    def train_config(self, args, config):
        self.calls.append(("train", config.model, config.max_train_minutes))
        return f"run-{config.model}"


def test_the_parts_run_in_order_for_each_config_then_the_runs_are_compared(monkeypatch):
    calls = []
    monkeypatch.setattr(runs, "compare", lambda lesson, **kw: calls.append(("compare", kw)))
    monkeypatch.setattr(runs, "print_where_results_are",
                        lambda lesson, work_dir: calls.append(("where", work_dir)))
    parts = whole_lesson.WholeLesson(
        prepare=lambda args, configs: calls.append(("prepare", len(configs))) or "data",
        evaluate=lambda args, run_id: calls.append(("evaluate", run_id)) or {"acc": 1},
        use=lambda args, config, run_id, prepared: calls.append(("use", run_id, prepared)),
        plan=lambda args, configs, prepared: configs[::-1],
        budget=lambda args, config, index, count, seconds: Config(
            config.model, max_train_minutes=(index + 1) / count + len(seconds)))
    board = whole_lesson.run_whole_lesson(FakeCLI(calls), parts, SimpleNamespace(work_dir="w"))
    assert calls == [("prepare", 2),
                     ("train", "gru", 0.5), ("evaluate", "run-gru"), ("use", "run-gru", "data"),
                     ("train", "bow", 2.0), ("evaluate", "run-bow"), ("use", "run-bow", "data"),
                     ("compare", {"params": {"direction": "en-es"}}), ("where", "w")]
    assert [(row.model, row.run_id, row.metrics) for row in board] == [
        ("gru", "run-gru", {"acc": 1}), ("bow", "run-bow", {"acc": 1})]
    assert all(row.minutes >= 0 for row in board)


def test_a_run_filter_narrows_the_comparison_only_where_every_config_shares_its_value():
    configs = [Config("a", "en-es"), Config("b", "es-en")]
    assert whole_lesson.shared_values(configs, ("direction",)) == {}
    assert whole_lesson.shared_values(configs[:1], ("direction", "absent")) == {
        "direction": "en-es"}


@pytest.mark.parametrize("lesson", [imdb_sentiment, translation, language_model, retrieval])
def test_every_lessons_run_is_the_shared_step_refused_under_several_processes(lesson):
    assert "run" in lesson.CLI.one_process_steps and "tune" in lesson.CLI.one_process_steps
