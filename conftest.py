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
# Likewise the retrieval lesson's encoder on TensorFlow compiles without XLA (3-4x faster
# for these tests) in the quick tier; the integration tier runs it as users do, with XLA
# (`xla_as_users_run_it`).
os.environ.setdefault("NLPKIT_XLA", "0")
# Two test workers share two cores: each runs TensorFlow's ops on one thread, which for
# these tiny models costs nothing and spares both workers the threads' contention.
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")

import pytest  # noqa: E402


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """A test worker (pytest-xdist) ends as soon as it has reported its last result,
    without Python's shutdown: TensorFlow's and JAX's took 5-10 s after every run on 2
    cores, which the runner waited for, up to its 10 s limit (`python -m pytest -n 0` or
    a single process ends as usual)."""
    if hasattr(config, "workerinput"):
        from process.stops import exit_at_once

        exit_at_once(0)


@pytest.fixture(autouse=True)
def xla_as_users_run_it(request, monkeypatch):
    if request.node.get_closest_marker("integration"):
        monkeypatch.setenv("NLPKIT_XLA", "1")


@pytest.fixture(autouse=True)
def float32_policy():
    import keras  # here, not at the top: the runner that starts the workers needs none

    keras.config.set_dtype_policy("float32")
    yield
    keras.config.set_dtype_policy("float32")


# The integration tier: second backends, several processes or devices, the browser,
# PostgreSQL, real servers, the lessons other than IMDB and second models trained end to
# end. `python -m pytest` (pyproject: -m "not integration") runs the rest, the quick
# tier; `python -m pytest -m integration` runs these; `.ci/run` runs both. A test joins
# it by its own mark (`@pytest.mark.integration`, or a module's `pytestmark`), or by one
# of these:
INTEGRATION_MARKS = ("slow", "browser", "team_server")


def is_integration(item):
    return any(item.get_closest_marker(mark) for mark in ("integration", *INTEGRATION_MARKS))


# A fixture built once per worker that uses it: every file that uses it goes to one worker.
SHARED_FIXTURES = ("store",)  # tests/workflows: the IMDB store, two models trained


@pytest.hookimpl(tryfirst=True)  # before the worker reads the groups, and `-m` the tiers
def pytest_collection_modifyitems(config, items):
    """Marks the integration tier; then orders the files for the two workers.

    The test runner hands whole files to its workers in this order (pyproject sets
    `--no-loadscope-reorder`), each package's files together, which builds its package
    fixtures (the workflows' shared store) once per worker instead of at every return
    to the package. The integration tier runs the packages with long (integration)
    tests first, the one with the fewest such files leading (the layer tests re-run on
    JAX: one worker takes that file while the other starts the workflows); the quick
    tier runs the packages with the most tests first (the lessons'). In a package,
    files with long tests first, then the files with the most tests; the short files
    fill in at the end. Each file is one group (`--dist loadgroup`: a worker takes it
    whole, and builds its module fixtures once); in the quick tier the files that use a
    fixture of `SHARED_FIXTURES` make one group together (the integration tier's are
    long: they spread over both workers, each building the fixture).
    """
    files = {}
    for item in items:
        if is_integration(item):
            item.add_marker(pytest.mark.integration)
        files.setdefault(item.nodeid.split("::")[0], []).append(item)
    long = {name for name, tests in files.items()
            if any(test.get_closest_marker("integration") for test in tests)}
    packages = {}
    for name in files:
        packages.setdefault(name.rpartition("/")[0], []).append(name)
    quick = config.getoption("markexpr") == "not integration"
    if quick:
        def package_order(package):
            return -sum(len(files[name]) for name in packages[package])
    else:
        long_files = {package: sum(name in long for name in names)
                      for package, names in packages.items()}

        def package_order(package):
            return long_files[package] == 0, long_files[package]
    order = [name for package in sorted(packages, key=package_order)
             for name in sorted(packages[package],
                                key=lambda name: (name not in long, -len(files[name])))]
    items[:] = [item for name in order for item in files[name]]
    for name in order:
        tests = files[name]
        shared = [fixture for fixture in SHARED_FIXTURES
                  if quick and any(fixture in test.fixturenames for test in tests)]
        group = f"{name.rpartition('/')[0]}:{shared[0]}" if shared else name
        for test in tests:
            test.add_marker(pytest.mark.xdist_group(group))
