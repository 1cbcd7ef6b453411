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

Below: how a dataset is found (an explicit local path, a cached copy, or the official
download, verified) and extracted (safely, and read to the archive's real end).
"""

import bz2
import contextlib
import gzip
import hashlib
import json
import lzma
import os
import shutil
import tarfile
import tempfile
import time
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import filelock

from data_prep.commands import UserError

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


# ## Find a dataset: explicit local path > cached copy > verified official download

class DataSourceError(UserError):
    """A dataset could not be found, downloaded, verified or extracted."""


@dataclass(frozen=True)
class DatasetSource:
    """Where a dataset comes from and how to recognise it once extracted."""

    name: str  # short name, used for cache folders
    archive_name: str  # file name of the official archive
    url: str
    sha256: str | None  # of the official archive; None if unpublished
    marker: str  # relative path that exists in a complete extracted copy
    env_var: str  # environment variable naming a local archive or folder
    flag: str  # the CLI flag that does the same

    def how_to_provide(self):
        return (
            f"Download {self.archive_name} from {self.url} and pass it with "
            f"{self.flag} PATH or the environment variable {self.env_var}=PATH "
            "(the archive or its extracted folder)."
        )


def add_location_arguments(parser, source):
    """Adds the dataset's path flag (if there is a `source`) and `--work-dir` to a
    command-line parser."""
    if source is not None:
        parser.add_argument(source.flag, help=f"{source.archive_name} or its extracted "
                            f"folder (default: ${source.env_var}, then the cache, then the "
                            "download)")
    parser.add_argument("--work-dir", help="cache folder (default: $NLPKIT_WORK_DIR or ./work)")


def resolve(source, path=None, root=None, key=None):
    """Returns a folder holding `source.marker`, from the best available source: the path
    given, else the intact copy extracted from the archive whose content key is `key`
    (what a prepared entry records as its source), else the official archive's copy,
    else the download."""
    path = path or os.environ.get(source.env_var)
    if path:
        return _from_local_path(source, Path(path).expanduser(), root)
    earlier = work_dir(root) / "extracted" / f"{source.name}-{key}"
    if key and (earlier / source.marker).exists() and damage(earlier) is None:
        return earlier
    extracted = work_dir(root) / "extracted" / source.name
    if (extracted / source.marker).exists() and damage(extracted) is None:
        return extracted
    archive = download(source, root)
    return extract(archive, extracted, source)


def source_key(source, path=None, root=None):
    """What prepared data made from this source is keyed by: the content digest of the
    user's archive or folder (computed once per file version), else the official
    archive's published SHA-256."""
    path = path or os.environ.get(source.env_var)
    if not path:
        return (source.sha256 or "official")[:16]
    path = Path(path).expanduser()
    if not path.exists():
        raise DataSourceError(f"{path} does not exist. {source.how_to_provide()}")
    return source_digest(path, root)[:16]


def prepared_entry(source, name, settings, path=None, root=None):
    """`(folder, settings)` of the data prepared from `source` with `settings`: keyed by
    the content of the archive or folder given; with none given, the newest entry
    prepared with these settings (a work folder copied to another machine is used as
    it is), else the official archive's."""
    given = path or os.environ.get(source.env_var)
    if not given:  # intact first; else a damaged one, to build again from its source
        found = newest_prepared(name, settings, root) \
            or newest_prepared(name, settings, root, damaged_too=True)
        if found is not None:
            return found, json.loads((found / "settings.json").read_text())
    keyed = {**settings, "source": source_key(source, path, root)}
    return prepared_dir(name, keyed, root), keyed


def _from_local_path(source, path, root=None):
    if not path.exists():
        raise DataSourceError(f"{path} does not exist. {source.how_to_provide()}")
    if path.is_dir():
        for folder in (path, path.parent):
            if (folder / source.marker).exists():
                return folder
        raise DataSourceError(
            f"{path} is a folder but has no {source.marker}; point at the extracted "
            f"dataset (the folder that contains {PurePosixPath(source.marker).parts[0]}) "
            "or at the archive itself."
        )
    key = source_digest(path, root)[:16]
    return extract(path, work_dir(root) / "extracted" / f"{source.name}-{key}", source)


def download(source, root=None):
    """Downloads the official archive into the work folder and checks its SHA-256.

    The transfer goes to a partial folder first, so an interrupted download never
    leaves a truncated archive under the real name.
    """
    import keras

    target = work_dir(root) / "downloads" / source.archive_name
    with producing(target):
        if not target.exists():
            partial = Path(tempfile.mkdtemp(prefix=f"{target.name}.partial-",
                                            dir=target.parent))
            try:
                fetched = keras.utils.get_file(fname=source.archive_name, origin=source.url,
                                               cache_dir=str(partial), cache_subdir=".")
                Path(fetched).rename(target)
            except Exception as error:  # get_file raises bare Exception for HTTP errors
                raise DataSourceError(
                    f"Could not download {source.archive_name} from {source.url} "
                    f"({type(error).__name__}: {error}). If you are offline: "
                    f"{source.how_to_provide()}"
                ) from error
            finally:
                shutil.rmtree(partial, ignore_errors=True)
    verify_checksum(target, source)
    return target


def verify_checksum(archive, source):
    if source.sha256 is None:
        return
    actual = sha256_of(archive)
    if actual != source.sha256:
        archive.unlink()  # our own download, not the user's file
        raise DataSourceError(
            f"Checksum mismatch for {archive.name}: expected SHA-256 {source.sha256}, got "
            f"{actual}. The download was corrupted or the file changed upstream; it has "
            "been deleted, run again to retry."
        )


def extract(archive, target, source=None):
    """Verifies `archive` end to end, then extracts it into `target` atomically, with
    the digest of every file; returns `target`.

    With a `source`, the archive must hold its marker file. Under the entry's lock: a
    process that finds `target` intact (another one just extracted it) reuses it; a
    copy with a missing or damaged file is extracted again.
    """
    archive, target = Path(archive), Path(target)
    with producing(target):
        if (target / (source.marker if source else ".")).exists():
            problem = damage(target)
            if problem is None:
                return target
            print(f"Extracting again: {target}: {problem}.")
        verify_archive(archive)
        print(f"Extracting {archive} -> {target}")

        def extract_checked(tmp):
            _extract_into(archive, tmp)
            if source and not (tmp / source.marker).exists():
                raise DataSourceError(
                    f"{archive} does not look like {source.archive_name}: it has no "
                    f"{source.marker}."
                )

        replace_from_sibling(target, extract_checked)
    return target


STREAMS = {b"\x1f\x8b": gzip.open, b"BZh": bz2.open, b"\xfd7zXZ\x00": lzma.open}


def verify_archive(archive):
    """Reads the whole archive once, checking what its format guards: a zip's CRC of
    every member, a gzip/bzip2/xz stream's checksum and length, a tar's headers.
    A damaged archive is one `DataSourceError` naming it; nothing is extracted."""
    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as zipped:
                bad = zipped.testzip()
            if bad is not None:
                raise zipfile.BadZipFile(f"CRC check failed for member {bad!r}")
            return
        with open(archive, "rb") as file:
            head = file.read(6)
        opener = next((open_ for magic, open_ in STREAMS.items() if head.startswith(magic)),
                      None)
        if opener is not None:
            with opener(archive, "rb") as stream:
                while stream.read(1 << 22):
                    pass
        if not tarfile.is_tarfile(archive):
            raise DataSourceError(
                f"{archive} is neither a zip nor a tar archive (corrupted or wrong file?).")
        with tarfile.open(archive) as tar:
            for _ in tar:  # every header, with its checksum
                pass
            _check_read_to_the_end(tar, archive)
    except (FileNotFoundError, PermissionError, IsADirectoryError) as error:
        raise DataSourceError(f"Cannot read {archive}: {error.strerror}.") from error
    except (tarfile.TarError, EOFError, OSError, zlib.error, zipfile.BadZipFile,
            lzma.LZMAError) as error:
        raise DataSourceError(
            f"{archive} is corrupted or truncated ({type(error).__name__}: {error}): nothing was "
            "extracted. Get a fresh copy (download it again) and rerun.") from error


def _check_read_to_the_end(tar, archive):
    """`tarfile` stops at a damaged member header as if the archive ended there: what
    follows the last member it read must be the zero blocks that end a tar."""
    tar.fileobj.seek(tar.offset)
    while chunk := tar.fileobj.read(1 << 20):
        if chunk.strip(b"\0"):
            raise DataSourceError(
                f"{archive} is damaged: the header after member {len(tar.members)} cannot be "
                "read, and the archive goes on after it (nothing was extracted). Get a "
                "fresh copy (download it again) and rerun.")


def _extract_into(archive, destination):
    try:
        if zipfile.is_zipfile(archive):
            _extract_zip(archive, destination)
        elif tarfile.is_tarfile(archive):
            with tarfile.open(archive) as tar:
                tar.extractall(destination, filter="data")
        else:
            raise DataSourceError(
                f"{archive} is neither a zip nor a tar archive (corrupted or wrong file?)."
            )
    except tarfile.FilterError as error:
        raise DataSourceError(
            f"Refused to extract {archive}: {error}. The archive tries to write outside "
            "its folder (unsafe); get a clean copy from the official source."
        ) from error
    except (tarfile.ReadError, EOFError, zlib.error, zipfile.BadZipFile, gzip.BadGzipFile) as error:
        raise DataSourceError(
            f"{archive} is corrupted or truncated ({type(error).__name__}: {error}). "
            "Delete it and download it again."
        ) from error


def _extract_zip(archive, destination):
    with zipfile.ZipFile(archive) as zipped:
        for info in zipped.infolist():
            parts = PurePosixPath(info.filename).parts
            if info.filename.startswith(("/", "\\")) or ".." in parts or ":" in info.filename:
                raise tarfile.FilterError(f"unsafe member path {info.filename!r}")
            is_link = (info.external_attr >> 16) & 0o170000 == 0o120000
            if is_link:
                raise tarfile.FilterError(f"symbolic link member {info.filename!r}")
        bad = zipped.testzip()
        if bad is not None:
            raise zipfile.BadZipFile(f"CRC check failed for member {bad!r}")
        zipped.extractall(destination)
