"""Where a dataset comes from: an explicit local path, else a cached copy, else the
official download, verified against its checksum; archives extracted safely (no path
outside the target, no links out, read to the archive's real end) and atomically into
the work folder (`cache.py`)."""

import bz2
import gzip
import json
import lzma
import os
import shutil
import tarfile
import tempfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from data_prep.cache import (
    damage,
    newest_prepared,
    prepared_dir,
    producing,
    replace_from_sibling,
    sha256_of,
    source_digest,
    work_dir,
)
from process.errors import UserError

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
