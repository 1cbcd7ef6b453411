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


LONG_MARKS = ("slow", "browser", "team_server")  # retrain, or start servers


def pytest_collection_modifyitems(items):
    """Each package's files together, the packages with long tests (`LONG_MARKS`) first,
    the one with the fewest such files leading; in a package, files with long tests
    first, then the files with the most tests.

    The test runner hands whole files to its workers in this order (pyproject sets
    `--no-loadscope-reorder`). Keeping a package's files together builds its package
    fixtures (the workflows' shared store) once per worker instead of at every return
    to the package; the package with one long file (the layer tests re-run on JAX)
    goes first, so one worker takes that file while the other starts the workflows,
    and the short files fill in at the end.
    """
    files = {}
    for item in items:
        files.setdefault(item.nodeid.split("::")[0], []).append(item)
    long = {name for name, tests in files.items()
            if any(test.get_closest_marker(mark) for test in tests for mark in LONG_MARKS)}
    packages = {}
    for name in files:
        packages.setdefault(name.rpartition("/")[0], []).append(name)
    long_files = {package: sum(name in long for name in names)
                  for package, names in packages.items()}
    package_order = sorted(packages, key=lambda package: (long_files[package] == 0,
                                                          long_files[package]))
    order = [name for package in package_order
             for name in sorted(packages[package],
                                key=lambda name: (name not in long, -len(files[name])))]
    items[:] = [item for name in order for item in files[name]]
