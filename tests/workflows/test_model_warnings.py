"""Logging or loading a pyfunc prints none of MLflow's warnings about `Any` type hints
(on purpose here), and every other warning still."""

import warnings

import pytest
from mlflow.utils.warnings_utils import color_warning

from workflows.core import models


def test_mlflows_any_hint_warning_is_dropped_and_the_others_kept():
    with pytest.warns(UserWarning) as shown:
        with models.without_any_hint_warning():
            with warnings.catch_warnings():  # as MLflow's filter_user_warnings_once does
                warnings.simplefilter("once", category=UserWarning)
                color_warning("Any type hint is inferred as AnyType, and MLflow doesn't "
                              "validate the data for this type.", 1, "yellow_bold")
                warnings.warn("something else", UserWarning)
    assert [str(warning.message) for warning in shown] == ["something else"]
