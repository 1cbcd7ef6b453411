"""Suite-wide (tests and the layers' doctests): each test starts from float32 layers.

Building a mixed-precision model sets Keras' global dtype policy; with the suite spread
over workers, a later test or doctest in the same worker would inherit it.
"""

import keras
import pytest


@pytest.fixture(autouse=True)
def float32_policy():
    keras.config.set_dtype_policy("float32")
    yield
    keras.config.set_dtype_policy("float32")
