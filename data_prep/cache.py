"""The work folder: downloads, extracted archives and prepared data, keyed by settings."""

import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

WORK_DIR_ENV = "NLPKIT_WORK_DIR"
SETTINGS_FILE = "settings.json"


def work_dir(path=None):
    """The work folder: `path`, else `$NLPKIT_WORK_DIR`, else `./work`."""
    return Path(path or os.environ.get(WORK_DIR_ENV) or "work").expanduser().resolve()


def settings_key(settings):
    """A short stable hash of a JSON-serializable settings dict."""
    text = json.dumps(settings, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def prepared_dir(name, settings, root=None):
    """Where the data prepared by `name` with `settings` lives (it may not exist yet)."""
    return work_dir(root) / "prepared" / f"{name}-{settings_key(settings)}"


def is_complete(directory):
    """A prepared folder is complete once its settings file exists (written last)."""
    return (Path(directory) / SETTINGS_FILE).is_file()


def write_atomically(directory, settings, fill):
    """Calls `fill(tmp)` on a temporary sibling folder, then renames it to `directory`.

    A crash leaves only a `*.partial-*` folder, never a half-written `directory`.
    """
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{directory.name}.partial-", dir=directory.parent))
    try:
        fill(tmp)
        (tmp / SETTINGS_FILE).write_text(json.dumps(settings, indent=2, sort_keys=True))
        if directory.exists():  # a concurrent run finished first; keep its result
            shutil.rmtree(tmp)
        else:
            tmp.rename(directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return directory


def print_summary(prepared, started):
    """Prints a prepared dataset's folder and summary, and the seconds since `started`."""
    print(json.dumps({"directory": str(prepared.directory), **prepared.summary}, indent=2))
    print(f"Done in {time.perf_counter() - started:.1f} s")


def sha256_of(path, chunk_size=1 << 20):
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for chunk in iter(lambda: file.read(chunk_size), b""):
            digest.update(chunk)
    return digest.hexdigest()
