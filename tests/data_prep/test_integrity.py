"""What the work folder stores is keyed by its source and checked when it is used."""

import errno
import os
import tarfile
import zipfile

import numpy as np
import pytest

from data_prep import cache, imdb, sources, spa_eng
from process.errors import UserError, run_command
from tests.data_prep.fixtures import (
    SPA_LINES,
    write_imdb_folder,
    write_spa_eng_zip,
    write_tar_gz,
)

SETTINGS = imdb.ImdbSettings(max_tokens=60, sequence_length=12)


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.WORK_DIR_ENV, str(tmp_path / "work"))
    monkeypatch.delenv(imdb.ACL_IMDB.env_var, raising=False)
    return tmp_path / "work"


def imdb_archive(folder, archive, word="number"):
    base = write_imdb_folder(folder)
    for review in base.rglob("*.txt"):
        review.write_text(review.read_text().replace("number", word))
    return write_tar_gz(base, archive)


def test_another_archive_never_reuses_the_data_prepared_from_the_first(tmp_path, work):
    first = imdb.prepare(imdb_archive(tmp_path / "a", tmp_path / "a.tar.gz"), SETTINGS,
                         verbose=False)
    second = imdb.prepare(imdb_archive(tmp_path / "b", tmp_path / "b.tar.gz", "numero"),
                          SETTINGS, verbose=False)
    assert second.directory != first.directory
    assert all("numero" in text for text in second.texts("test"))
    assert all("number" in text for text in first.texts("test"))
    imdb_archive(tmp_path / "c", tmp_path / "unused.tar.gz", "nummer")
    folder = tmp_path / "c"
    from_folder = imdb.prepare(folder, SETTINGS, verbose=False)  # a folder: by its content
    assert all("nummer" in text for text in from_folder.texts("test"))
    (folder / "aclImdb" / "test" / "pos" / "0_7.txt").write_text("Changed in place. nummer")
    changed = imdb.prepare(folder, SETTINGS, verbose=False)
    assert changed.directory != from_folder.directory
    assert "Changed in place. nummer" in changed.texts("test")


def test_the_digest_of_a_source_is_computed_once_per_version(tmp_path, work, monkeypatch):
    archive = imdb_archive(tmp_path / "a", tmp_path / "a.tar.gz")
    digest = cache.source_digest(archive)
    monkeypatch.setattr(cache, "sha256_of", lambda path: pytest.fail("hashed again"))
    assert cache.source_digest(archive) == digest
    monkeypatch.undo()
    archive.write_bytes(archive.read_bytes() + b"\0" * 1024)  # a new version: new size
    assert cache.source_digest(archive) != digest


def test_a_gzip_archive_with_a_bad_checksum_is_refused_and_nothing_is_kept(tmp_path, work):
    archive = imdb_archive(tmp_path / "a", tmp_path / "aclImdb_v1.tar.gz")
    data = bytearray(archive.read_bytes())
    data[-8] ^= 0xFF  # the CRC-32 in gzip's trailer: only reading to the end notices
    archive.write_bytes(bytes(data))
    with tarfile.open(archive) as tar:
        assert len(tar.getnames()) > 10  # tarfile alone reads it without complaint
    with pytest.raises(sources.DataSourceError, match=f"{archive.name} is corrupted"):
        imdb.prepare(archive, SETTINGS, verbose=False)
    assert not list((work / "extracted").glob("*/*")) and not (work / "prepared").exists()


@pytest.mark.parametrize("gzipped", [False, True])
def test_a_tar_with_a_damaged_member_header_is_refused_not_cut_short(tmp_path, work, gzipped):
    base = write_imdb_folder(tmp_path / "a")
    plain = tmp_path / "a.tar"
    with tarfile.open(plain, "w") as tar:
        tar.add(base, arcname=base.name)
    with tarfile.open(plain) as tar:
        middle = tar.getmembers()[len(tar.getmembers()) // 2]
    data = bytearray(plain.read_bytes())
    data[middle.offset + 10] ^= 0x01  # one bit of one header's name: its checksum fails
    archive = tmp_path / ("a.tar.gz" if gzipped else "a.tar")
    if gzipped:  # compressed again: the gzip checksum is valid
        import gzip

        archive.write_bytes(gzip.compress(bytes(data)))
    else:
        archive.write_bytes(bytes(data))
    with pytest.raises(sources.DataSourceError, match="is damaged: the header after member"):
        imdb.prepare(archive, SETTINGS, verbose=False)
    assert not list(work.glob("prepared/imdb-*"))  # nothing prepared from part of it


def test_a_zip_with_a_damaged_member_is_refused(tmp_path, work):
    archive = write_spa_eng_zip(tmp_path / "spa-eng.zip")
    with zipfile.ZipFile(archive) as zipped:
        info = zipped.getinfo("spa-eng/spa.txt")
    data = bytearray(archive.read_bytes())
    data[info.header_offset + 30 + len(info.filename) + 5] ^= 0x01  # inside its data
    archive.write_bytes(bytes(data))
    with pytest.raises(sources.DataSourceError, match="spa-eng.zip is corrupted"):
        spa_eng.prepare(archive, spa_eng.SpaEngSettings(), verbose=False)


def test_a_prepared_entry_with_a_missing_or_damaged_file_is_built_again(tmp_path, work,
                                                                          capsys):
    archive = imdb_archive(tmp_path / "a", tmp_path / "a.tar.gz")
    prepared = imdb.prepare(archive, SETTINGS, verbose=False)
    ids = prepared.token_ids("train")
    (prepared.directory / "train_ids.npy").unlink()
    again = imdb.prepare(archive, SETTINGS, verbose=False)
    assert "train_ids.npy is missing" in capsys.readouterr().out
    assert np.array_equal(again.token_ids("train"), ids)
    (prepared.directory / "settings.json").unlink()
    imdb.prepare(archive, SETTINGS, verbose=False)
    assert "settings.json is missing" in capsys.readouterr().out
    texts = prepared.directory / "test_texts.json"
    texts.write_text(texts.read_text().replace("number", "nmber"))  # other bytes
    again = imdb.prepare(archive, SETTINGS, verbose=False)
    assert "test_texts.json is damaged" in capsys.readouterr().out
    assert all("nmber" not in text for text in again.texts("test"))


def test_a_load_hashes_only_the_files_whose_size_or_time_changed(tmp_path, work, monkeypatch):
    archive = imdb_archive(tmp_path / "a", tmp_path / "a.tar.gz")
    prepared = imdb.prepare(archive, SETTINGS, verbose=False)
    hashed = []
    real = cache.sha256_of
    monkeypatch.setattr(cache, "sha256_of", lambda path: hashed.append(path) or real(path))
    imdb.prepare(archive, SETTINGS, verbose=False)
    assert not [path for path in hashed if prepared.directory in path.parents]
    texts = prepared.directory / "test_texts.json"
    texts.touch()  # a new time, the same content: hashed again, and still intact
    assert imdb.prepare(archive, SETTINGS, verbose=False).directory == prepared.directory
    assert [path for path in hashed if prepared.directory in path.parents] == [texts]


def test_verify_finds_an_edit_that_kept_the_size_and_time(tmp_path, work, capsys):
    archive = imdb_archive(tmp_path / "a", tmp_path / "a.tar.gz")
    prepared = imdb.prepare(archive, SETTINGS, verbose=False)
    texts = prepared.directory / "test_texts.json"
    status = texts.stat()
    texts.write_text(texts.read_text().replace("number", "numbar"))  # the same size
    os.utime(texts, ns=(status.st_atime_ns, status.st_mtime_ns))  # and the same time
    assert "numbar" in imdb.prepare(archive, SETTINGS, verbose=False).texts("test")[0]
    assert cache.verify_work_folder() == [f"{prepared.directory}: test_texts.json is damaged"]
    assert not prepared.directory.exists()
    assert all("numbar" not in text for text in imdb.prepare(archive, SETTINGS,
                                                               verbose=False).texts("test"))
    assert cache.verify_work_folder() == []


def test_an_extracted_copy_with_a_missing_file_is_extracted_again(tmp_path, work, capsys):
    archive = imdb_archive(tmp_path / "a", tmp_path / "a.tar.gz")
    folder = sources.resolve(imdb.ACL_IMDB, archive)
    review = next(folder.rglob("*.txt"))
    review.unlink()
    assert sources.resolve(imdb.ACL_IMDB, archive) == folder and review.exists()
    assert "Extracting again" in capsys.readouterr().out


def test_a_damaged_cache_file_is_written_again(tmp_path, work, capsys):
    path = work / "tokens" / "numbers.txt"
    calls = []

    def write(partial):
        calls.append(partial)
        partial.write_text("1 2 3")

    assert cache.produce_file(path, write).read_text() == "1 2 3"
    assert cache.produce_file(path, write) == path and len(calls) == 1  # reused
    path.write_text("1 2 4")
    assert cache.produce_file(path, write).read_text() == "1 2 3" and len(calls) == 2
    assert "damaged" in capsys.readouterr().out
    path.unlink()
    assert cache.produce_file(path, write).read_text() == "1 2 3" and len(calls) == 3


def test_without_a_source_a_damaged_entry_is_rebuilt_from_its_extracted_copy(
        tmp_path, work, monkeypatch, capsys):
    archive = imdb_archive(tmp_path / "a", tmp_path / "a.tar.gz", word="numeral")
    prepared = imdb.prepare(archive, SETTINGS, verbose=False)
    (prepared.directory / "test_texts.json").write_text("[]")  # damaged
    monkeypatch.setattr(sources, "download", lambda *args: pytest.fail("downloaded"))
    again = imdb.prepare(None, SETTINGS, verbose=False)  # no archive given this time
    assert "test_texts.json is damaged" in capsys.readouterr().out
    assert again.directory == prepared.directory
    assert any("numeral" in text for text in again.texts("test"))


def test_without_a_source_the_prepared_copy_is_used_as_it_is(tmp_path, work, monkeypatch):
    archive = imdb_archive(tmp_path / "a", tmp_path / "a.tar.gz")
    prepared = imdb.prepare(archive, SETTINGS, verbose=False)
    archive.unlink()  # a work folder copied to a machine that has no archive

    def no_download(*args, **kwargs):
        raise AssertionError("downloaded")

    monkeypatch.setattr(sources, "download", no_download)
    again = imdb.prepare(None, SETTINGS, verbose=False)
    assert again.directory == prepared.directory


@pytest.mark.parametrize("emptied", ["train/pos", "test/neg", "test"])
def test_an_imdb_tree_missing_a_class_or_split_is_refused_in_one_line(tmp_path, work,
                                                                      emptied):
    base = write_imdb_folder(tmp_path / "a")
    for review in (base / emptied).rglob("*.txt"):
        review.unlink()
    with pytest.raises(sources.DataSourceError, match="readable reviews"):
        imdb.prepare(base.parent, SETTINGS, verbose=False)
    assert not list(work.glob("prepared/imdb-*"))


@pytest.mark.parametrize("lines", [[], ["no tab on this line"], SPA_LINES[:3]])
def test_a_spa_eng_file_too_small_to_split_is_refused_in_one_line(tmp_path, work, lines):
    archive = write_spa_eng_zip(tmp_path / "spa-eng.zip", lines)
    with pytest.raises(sources.DataSourceError, match="too few to give the"):
        spa_eng.prepare(archive, verbose=False)


def test_a_work_folder_that_is_a_file_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.WORK_DIR_ENV, str(tmp_path / "afile"))
    (tmp_path / "afile").write_text("x")
    with pytest.raises(UserError, match="is a file"):
        cache.work_dir()


def test_a_file_the_command_may_not_write_is_one_line(capsys):
    def main(argv):
        raise PermissionError(errno.EACCES, "Permission denied", "/work/x.npy")

    assert run_command(main) == 2
    assert capsys.readouterr().err.startswith("error: cannot write /work/x.npy")
