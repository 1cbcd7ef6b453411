"""The work folder: downloads, extracted archives and prepared data, keyed by settings.

Every entry is produced under an inter-process lock (`producing`) and appears by an
atomic rename once complete, so two commands that need the same entry at once share
one result, a complete entry is never deleted, and partial copies left by a killed
process are removed by the next producer.
"""

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import filelock

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

    A crash leaves only a `*.partial-*` folder, never a half-written `directory`. If
    another process completes `directory` first, its result is kept and reused.
    """
    directory = Path(directory)
    with producing(directory):
        if is_complete(directory):
            return directory
        tmp = Path(tempfile.mkdtemp(prefix=f"{directory.name}.partial-", dir=directory.parent))
        try:
            fill(tmp)
            (tmp / SETTINGS_FILE).write_text(json.dumps(settings, indent=2, sort_keys=True))
            remove(directory)  # an incomplete copy (no settings file); nobody reads it
            tmp.rename(directory)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return directory


@contextlib.contextmanager
def producing(path, timeout=3600):
    """Holds the inter-process lock of cache entry `path` (a file or folder).

    Removes the `<name>.partial-*` leftovers of producers that were killed: whoever
    holds the lock is the only producer, so they belong to nobody. Lock files live in
    a per-user folder of the system's temporary directory, never among the entries.
    """
    path = Path(path).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(lock_path(path), timeout=timeout):
        for stale in path.parent.glob(f"{path.name}.partial-*"):
            remove(stale)
        yield


def lock_path(path):
    """Where the lock of `path` lives (the same file for every process of this user)."""
    folder = Path(tempfile.gettempdir()) / f"nlpkit-locks-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder / f"{hashlib.sha256(str(path).encode()).hexdigest()[:24]}.lock"


def partial_path(path):
    """A temporary sibling of `path` for this process, removed by `producing` if left over."""
    path = Path(path)
    return path.with_name(f"{path.name}.partial-{os.getpid()}")


def remove(path):
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


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
