"""The work folder: downloads, extracted archives and prepared data, keyed by what they
were made from (the settings and the source's content digest).

Every entry is produced under an inter-process lock (`producing`) and appears by an
atomic rename once complete, so two commands that need the same entry at once share
one result, and partial copies left by a killed process are removed by the next
producer. A folder entry records the SHA-256, size and modification time of each of its
files (`manifest.json`), a file entry in a `.sha256` sidecar. When an entry is used,
a file whose size and time are as recorded is trusted and any other is hashed again: a
missing or damaged file makes the entry be built again. A file changed without
changing its size, its time set back, passes that check: `verify_work_folder` (the
lessons' `prepare --verify`) hashes every file again.

How a dataset is found and extracted into it is `sources.py`.
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

from process.errors import UserError

WORK_DIR_ENV = "NLPKIT_WORK_DIR"
SETTINGS_FILE = "settings.json"
MANIFEST_FILE = "manifest.json"
DIGESTS_FILE = "digests.json"  # content digests of sources, by path, size and mtime


def work_dir(path=None):
    """The work folder: `path`, else `$NLPKIT_WORK_DIR`, else `./work`."""
    folder = Path(path or os.environ.get(WORK_DIR_ENV) or "work").expanduser().resolve()
    if folder.exists() and not folder.is_dir():
        raise UserError(f"The work folder {folder} is a file: give --work-dir (or "
                        f"{WORK_DIR_ENV}) a folder, new or made by the kit.")
    return folder


def settings_key(settings):
    """A short stable hash of a JSON-serializable settings dict."""
    text = json.dumps(settings, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def prepared_dir(name, settings, root=None):
    """Where the data prepared by `name` with `settings` lives (it may not exist yet)."""
    return work_dir(root) / "prepared" / f"{name}-{settings_key(settings)}"


def newest_prepared(name, settings, root=None, damaged_too=False):
    """The newest intact entry of `name` prepared with `settings` (whatever its `source`
    setting says), or None; with `damaged_too`, the newest complete one."""
    found = []
    for entry in (work_dir(root) / "prepared").glob(f"{name}-*"):
        try:
            recorded = json.loads((entry / SETTINGS_FILE).read_text())
        except (OSError, ValueError):
            continue
        recorded.pop("source", None)
        if recorded == json.loads(json.dumps(settings, default=str)) \
                and (damaged_too or is_intact(entry)):
            found.append(((entry / SETTINGS_FILE).stat().st_mtime, entry))
    return max(found)[1] if found else None


def is_complete(directory):
    """A prepared folder is complete once its settings file exists (the folder is
    renamed into place whole, settings and manifest included)."""
    return (Path(directory) / SETTINGS_FILE).is_file()


def damage(directory, verify=False):
    """Why a complete folder entry cannot be used (a file missing, changed, or no
    manifest), or None when every file matches its recorded digest. Only files whose
    size or modification time differ from the manifest's are hashed (all with `verify`)."""
    manifest = Path(directory) / MANIFEST_FILE
    try:
        recorded = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return f"{manifest.name} is missing or unreadable"
    if not isinstance(recorded, dict):
        return f"{manifest.name} is unreadable"
    for name, known in recorded.items():
        path = Path(directory) / name
        if not path.is_file():
            return f"{name} is missing"
        if not matches(path, known, verify):
            return f"{name} is damaged"
    return None


def file_record(path):
    """What a manifest or sidecar records of a file: its digest, size and time."""
    status = Path(path).stat()
    return {"sha256": sha256_of(path), "size": status.st_size, "mtime_ns": status.st_mtime_ns}


def matches(path, known, verify=False):
    """Whether `path` still holds what `known` (a `file_record`, or a bare digest)
    records: trusted when its size and time are as recorded, else hashed."""
    if not isinstance(known, dict):
        known = {"sha256": known}
    status = path.stat()
    if not verify and (status.st_size, status.st_mtime_ns) == (known.get("size"),
                                                               known.get("mtime_ns")):
        return True
    return sha256_of(path) == known.get("sha256")


def is_intact(directory):
    """Complete, and every file as it was written."""
    return is_complete(directory) and damage(directory) is None


def verify_work_folder(root=None):
    """Hashes every file of every prepared entry and cache file again; removes what is
    damaged (the next step that needs it builds it again). Returns what was removed."""
    folder, removed = work_dir(root), []
    for entry in sorted((folder / "prepared").glob("*")):
        if entry.is_dir() and ".partial-" not in entry.name and is_complete(entry):
            with producing(entry):
                problem = damage(entry, verify=True)
                if problem:
                    remove(entry)
                    removed.append(f"{entry}: {problem}")
    for sidecar in sorted(folder.rglob("*.sha256")):
        path = sidecar.with_name(sidecar.name.removesuffix(".sha256"))
        with producing(path):
            if path.is_file() and not matches(path, read_sidecar(sidecar), verify=True):
                remove(path)
                removed.append(f"{path}: damaged")
    return removed


def write_atomically(directory, settings, fill):
    """Calls `fill(tmp)` on a temporary sibling folder, records the digest of every
    file it wrote, then renames it to `directory`.

    A crash leaves only a `*.partial-*` folder, never a half-written `directory`. If
    another process completes `directory` first, its result is kept and reused; a
    complete entry with a missing or damaged file is built again (and says so).
    """
    directory = Path(directory)
    with producing(directory):
        if is_complete(directory):
            problem = damage(directory)
            if problem is None:
                return directory
            print(f"Rebuilding {directory}: {problem}.")
        elif directory.exists():
            print(f"Rebuilding {directory}: its {SETTINGS_FILE} is missing.")

        def fill_with_settings(tmp):
            fill(tmp)
            (tmp / SETTINGS_FILE).write_text(json.dumps(settings, indent=2, sort_keys=True))

        replace_from_sibling(directory, fill_with_settings)
    return directory


def replace_from_sibling(directory, fill):
    """Calls `fill(tmp)` on a new `*.partial-*` sibling of `directory`, records the
    digest of every file in it, then puts it in `directory`'s place (the caller holds
    `producing(directory)`). A failure removes the sibling and leaves `directory` as it
    was."""
    tmp = Path(tempfile.mkdtemp(prefix=f"{directory.name}.partial-", dir=directory.parent))
    try:
        fill(tmp)
        write_manifest(tmp)
        remove(directory)  # incomplete or damaged; the lock keeps readers out
        tmp.rename(directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_manifest(folder):
    files = sorted(p for p in Path(folder).rglob("*") if p.is_file())
    records = {str(p.relative_to(folder)): file_record(p) for p in files}
    (Path(folder) / MANIFEST_FILE).write_text(json.dumps(records, indent=1))


def read_sidecar(sidecar):
    """A `.sha256` sidecar's record (or bare digest); None when unreadable."""
    try:
        text = Path(sidecar).read_text()
    except OSError:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text.strip()


def produce_file(path, write):
    """The cache file `path`, written by `write(partial_path)` once (under its lock) with
    a `.sha256` sidecar, and written again when it is missing or no longer matches."""
    path = Path(path)
    sidecar = path.with_name(path.name + ".sha256")
    with producing(path):
        if path.exists() or sidecar.exists():
            known = read_sidecar(sidecar)
            if known and path.is_file() and matches(path, known):
                return path
            print(f"Rebuilding {path}: it is missing or damaged.")
            remove(path)
            remove(sidecar)
        partial = partial_path(path)
        try:
            write(partial)
            sidecar_partial = partial_path(sidecar)
            os.replace(partial, path)  # a rename keeps the time the sidecar records
            sidecar_partial.write_text(json.dumps(file_record(path)))
            os.replace(sidecar_partial, sidecar)
        except BaseException:
            remove(partial)
            raise
    return path


def source_digest(path, root=None):
    """The SHA-256 of a file's content, or of a folder's (its files' paths and
    contents), computed once and remembered by path, size and modification time."""
    path = Path(path).resolve()
    if path.is_file():
        stat = path.stat()
        stamp = f"{stat.st_size}:{stat.st_mtime_ns}"
    else:
        files = sorted(p for p in path.rglob("*") if p.is_file())
        stamp = hashlib.sha256("\n".join(
            f"{p.relative_to(path)}:{p.stat().st_size}:{p.stat().st_mtime_ns}"
            for p in files).encode()).hexdigest()
    known = work_dir(root) / DIGESTS_FILE
    with producing(known):
        digests = json.loads(known.read_text()) if known.is_file() else {}
        entry = digests.get(str(path))
        if entry and entry["stamp"] == stamp:
            return entry["sha256"]
    digest = sha256_of(path) if path.is_file() else folder_digest(path)
    with producing(known):
        digests = json.loads(known.read_text()) if known.is_file() else {}
        digests[str(path)] = {"stamp": stamp, "sha256": digest}
        partial = partial_path(known)
        partial.write_text(json.dumps(digests, indent=1))
        os.replace(partial, known)
    return digest


def folder_digest(folder):
    """SHA-256 over every file of `folder`: relative paths and contents, in order."""
    folder = Path(folder)
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        digest.update(bytes.fromhex(sha256_of(path)))
    return digest.hexdigest()


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
