"""SIGTERM at random moments of tiny trainings on jax: every stop ends the command
within seconds with status 130, and reruns finish the run with each epoch logged once
(`interrupts.py`). Five stops per lesson, at least four landing before the command ends."""

import pytest

from tests.workflows import interrupts

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.parametrize("case", [interrupts.translation, interrupts.sentiment_rnn,
                                  interrupts.dense_retriever], ids=lambda case: case.__name__)
def test_random_stops_resume_to_the_same_finished_run(case, tmp_path):
    stops = interrupts.interrupt_until_finished(case, "jax", tmp_path, seed=2,
                                                  stops=5)
    print(stops)  # (seconds after the start, exit status, seconds from the stop to the exit)
    assert sum(status == 130 for _, status, _ in stops) >= 4
