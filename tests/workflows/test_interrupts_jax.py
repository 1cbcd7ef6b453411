"""SIGTERM at random moments of tiny trainings on jax (`interrupts.py`)."""

import pytest

from tests.workflows import interrupts

pytestmark = [pytest.mark.integration, pytest.mark.slow]
test_random_stops_resume_to_the_same_finished_run = interrupts.random_stops_test("jax",
                                                                                 seed=2)
