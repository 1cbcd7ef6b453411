"""Run a lesson's steps in a JAX subprocess where TensorFlow cannot be imported.

A GPU machine often has JAX and no TensorFlow: `run_steps` runs Python code there
as it would run on such a machine (TensorFlow, tensorflow-text and tf-keras hidden
from the import system) and returns what it printed last, as JSON.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HIDE_TENSORFLOW = """
from importlib.machinery import PathFinder
_find = PathFinder.find_spec.__func__
def _find_spec(cls, name, path=None, target=None):
    if name.split(".")[0] in {"tensorflow", "tensorflow_text", "tf_keras"}:
        return None
    return _find(cls, name, path, target)
PathFinder.find_spec = classmethod(_find_spec)
"""


def run_steps(code, env=None, timeout=600, hide_tensorflow=True):
    """Runs `code` under `KERAS_BACKEND=jax` (with TensorFlow hidden); its last output
    line is JSON, returned parsed. A failure shows the end of its stderr."""
    environment = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu",
                   "PYTHONPATH": str(ROOT), **(env or {})}
    environment.pop("XLA_FLAGS", None)
    script = (HIDE_TENSORFLOW if hide_tensorflow else "") + code
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            env=environment, timeout=timeout, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def programs(result, prefix):
    """How many programs of functions named `prefix...` a run's `counts` hold."""
    return sum(n for name, n in result["counts"].items() if name.startswith(prefix))


def hits(result, prefix):
    """How many of those came from the persistent compilation cache."""
    return sum(n for name, n in result["hits"].items() if name.startswith(prefix))
