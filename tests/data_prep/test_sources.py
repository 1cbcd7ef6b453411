import tarfile
import zipfile

import pytest

from data_prep import cache, sources
from data_prep.imdb import ACL_IMDB
from data_prep.spa_eng import SPA_ENG
from tests.data_prep.fixtures import (
    add_tar_member,
    write_imdb_folder,
    write_spa_eng_zip,
    write_tar_gz,
)


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.WORK_DIR_ENV, str(tmp_path / "work"))
    monkeypatch.delenv(ACL_IMDB.env_var, raising=False)
    monkeypatch.delenv(SPA_ENG.env_var, raising=False)
    return tmp_path / "work"


def snapshot(path):
    return sorted((p.relative_to(path), p.stat().st_mtime_ns, p.stat().st_size)
                  for p in path.rglob("*"))


def test_local_archive_is_extracted_and_left_untouched(tmp_path, work):
    archive = write_tar_gz(write_imdb_folder(tmp_path / "src"), tmp_path / "aclImdb_v1.tar.gz")
    before = archive.read_bytes()
    folder = sources.resolve(ACL_IMDB, archive)
    assert (folder / "aclImdb/train/pos").is_dir()
    assert folder.is_relative_to(work)
    assert archive.read_bytes() == before
    assert not list(folder.parent.glob("*.partial-*"))


def test_local_folder_is_used_in_place_and_not_modified(tmp_path, work):
    base = write_imdb_folder(tmp_path / "data")
    before = snapshot(tmp_path / "data")
    assert sources.resolve(ACL_IMDB, base) == tmp_path / "data"  # the folder or its parent
    assert sources.resolve(ACL_IMDB, tmp_path / "data") == tmp_path / "data"
    assert snapshot(tmp_path / "data") == before


def test_environment_variable_names_the_local_copy(tmp_path, work, monkeypatch):
    archive = write_spa_eng_zip(tmp_path / "spa-eng.zip")
    monkeypatch.setenv(SPA_ENG.env_var, str(archive))
    assert (sources.resolve(SPA_ENG) / "spa-eng/spa.txt").is_file()


def test_folder_without_the_dataset_is_a_clear_error(tmp_path, work):
    with pytest.raises(sources.DataSourceError, match="has no aclImdb/train/pos"):
        sources.resolve(ACL_IMDB, tmp_path)


def test_missing_path_is_a_clear_error(tmp_path, work):
    with pytest.raises(sources.DataSourceError, match="does not exist.*--imdb-path"):
        sources.resolve(ACL_IMDB, tmp_path / "nope.tar.gz")


def test_path_traversal_is_refused(tmp_path, work):
    archive = add_tar_member(tmp_path / "evil.tar.gz", "../escaped.txt")
    with pytest.raises(sources.DataSourceError, match="outside its folder"):
        sources.resolve(ACL_IMDB, archive)
    assert not (work / "extracted" / "escaped.txt").exists()
    assert not (tmp_path / "escaped.txt").exists()
    assert not list((work / "extracted").glob("*"))  # nothing half-extracted left


def test_link_escaping_the_target_is_refused(tmp_path, work):
    archive = add_tar_member(tmp_path / "link.tar.gz", "aclImdb/link", kind=tarfile.SYMTYPE,
                             linkname="/etc/passwd")
    with pytest.raises(sources.DataSourceError, match="outside its folder"):
        sources.resolve(ACL_IMDB, archive)


def test_zip_with_dotdot_member_is_refused(tmp_path, work):
    archive = tmp_path / "spa-eng.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("spa-eng/spa.txt", "Go.\tVe.\n")
        zipped.writestr("spa-eng/../../evil.txt", "x")
    with pytest.raises(sources.DataSourceError, match="unsafe member path"):
        sources.resolve(SPA_ENG, archive)


def test_corrupted_archive_is_reported(tmp_path, work):
    archive = write_tar_gz(write_imdb_folder(tmp_path / "src"), tmp_path / "aclImdb_v1.tar.gz")
    data = archive.read_bytes()
    archive.write_bytes(data[: len(data) // 2])  # truncated download
    with pytest.raises(sources.DataSourceError, match="corrupted or truncated"):
        sources.resolve(ACL_IMDB, archive)
    assert not list((work / "extracted").glob("*"))


def test_not_an_archive_is_reported(tmp_path, work):
    bogus = tmp_path / "aclImdb_v1.tar.gz"
    bogus.write_text("<html>404 not found</html>")
    with pytest.raises(sources.DataSourceError, match="neither a zip nor a tar"):
        sources.resolve(ACL_IMDB, bogus)


def test_checksum_mismatch_is_reported_and_the_download_removed(tmp_path, work):
    archive = write_spa_eng_zip(tmp_path / "spa-eng.zip")
    downloads = work / "downloads"
    downloads.mkdir(parents=True)
    cached = downloads / "spa-eng.zip"
    cached.write_bytes(archive.read_bytes())
    with pytest.raises(sources.DataSourceError, match="Checksum mismatch"):
        sources.resolve(SPA_ENG)
    assert not cached.exists()


def test_verified_download_is_extracted_to_the_cache(tmp_path, work):
    archive = write_spa_eng_zip(tmp_path / "spa-eng.zip")
    source = sources.DatasetSource(**{**SPA_ENG.__dict__, "sha256": cache.sha256_of(archive),
                                      "url": archive.as_uri()})
    folder = sources.resolve(source)
    assert folder == work / "extracted" / "spa-eng"
    assert sources.resolve(source) == folder  # second call: the cached copy


def test_offline_without_local_copy_names_the_file_and_the_flag(work):
    offline = sources.DatasetSource(**{**ACL_IMDB.__dict__, "url": "http://127.0.0.1:9/x.tar.gz"})
    with pytest.raises(sources.DataSourceError) as error:
        sources.resolve(offline)
    message = str(error.value)
    assert "aclImdb_v1.tar.gz" in message and "--imdb-path" in message
    assert "NLPKIT_IMDB_PATH" in message
    assert not list((work / "downloads").glob("*"))  # no partial file left
