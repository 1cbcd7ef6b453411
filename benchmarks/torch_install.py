"""What the third backend adds to a fresh install: the PyTorch CPU wheel that `.ci/run`
installs (its pin read from there), fetched from the configured package index and
installed into an empty folder, and `import torch` timed in a fresh interpreter.

    python benchmarks/torch_install.py

The fetch measures the index this machine reaches (a local mirror or the registry); the
install and the import measure this machine's disk and CPU. Nothing of the environment
the kit runs in is touched.
"""

import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.reporting import write_results  # noqa: E402
from process.commands import cpu_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).with_name("results") / "torch_install.json"
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-cache-dir"]


def pinned_torch():
    """The `torch==...` requirement `.ci/run` installs."""
    found = re.search(r'"(torch==[^"]+)"', (ROOT / ".ci" / "run").read_text())
    if not found:
        raise SystemExit(".ci/run installs no pinned torch: nothing to measure")
    return found.group(1)


def timed(command, **options):
    """The seconds `command` took (it must succeed)."""
    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, text=True, **options)
    return time.perf_counter() - started


def megabytes(folder):
    return sum(path.stat().st_size for path in Path(folder).rglob("*")
               if path.is_file()) / 1e6


def measure(requirement):
    """Fetch, install and first-import figures of `requirement`, without its dependencies
    (the kit's own requirements already hold them)."""
    with tempfile.TemporaryDirectory(prefix="torch-install-") as scratch:
        wheels, target = Path(scratch) / "wheels", Path(scratch) / "site"
        fetch = timed([*PIP, "download", "--no-deps", "--dest", str(wheels), requirement])
        wheel = next(wheels.glob("*.whl"))
        install = timed([*PIP, "install", "--no-deps", "--target", str(target), str(wheel)])
        first_import = timed([sys.executable, "-c", "import torch"],
                             env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"})
        return {"wheel": wheel.name, "wheel_megabytes": round(wheel.stat().st_size / 1e6, 1),
                "fetch_seconds": round(fetch, 1), "install_seconds": round(install, 1),
                "installed_megabytes": round(megabytes(target)),
                "first_import_seconds": round(first_import, 1)}


def main():
    requirement = pinned_torch()
    write_results({"machine": {"cpu": cpu_model(), "python": sys.version.split()[0]},
                   "requirement": requirement, "command": "python benchmarks/torch_install.py",
                   **measure(requirement)}, RESULTS)


if __name__ == "__main__":
    main()
