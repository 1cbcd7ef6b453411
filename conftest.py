"""Suite-wide (tests and the layers' doctests): each test starts from float32 layers;
JAX compiles without its costly optimizations.

Building a mixed-precision model sets Keras' global dtype policy; with the suite spread
over workers, a later test or doctest in the same worker would inherit it.
"""

import os

# The suite's tiny models compile more often than they run: JAX (in this process and in
# the lessons' subprocesses, which inherit it) skips XLA's costly optimization passes,
# which buy nothing here; the programs compute the same, up to float rounding.
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")

import keras  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def float32_policy():
    keras.config.set_dtype_policy("float32")
    yield
    keras.config.set_dtype_policy("float32")


def pytest_collection_modifyitems(items):
    """Files with slow tests first, then the files with the most tests.

    The test runner hands whole files to its workers in this order (pyproject sets
    `--no-loadscope-reorder`), so both start on the longest work and the short files
    fill in at the end instead of one worker finishing a long file alone.
    """
    files = {}
    for item in items:
        files.setdefault(item.nodeid.split("::")[0], []).append(item)
    slow = {name for name, tests in files.items()
            if any(test.get_closest_marker("slow") for test in tests)}
    order = sorted(files, key=lambda name: (name not in slow, -len(files[name])))
    items[:] = [item for name in order for item in files[name]]
