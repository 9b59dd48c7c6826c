"""Numba's cache folder for a read-only install: private to the user (issue 14, item 4).

Numba's cache index is a pickle, so a cache folder that another user can write lets
them run code in the learner's process. `flashcourse.gpu.choose_cache_dir` accepts a
folder only if the current user owns it and nobody else can write to it; it creates
missing ones with mode 0700. These tests run in-process (no second user needed);
tests/test_cpu.py::test_cache_works_from_read_only_install runs the whole thing as
user nobody where that is possible.
"""

import os
import stat
import tempfile

import pytest

from flashcourse import gpu

pytestmark = pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX permissions")


@pytest.fixture
def places(tmp_path, monkeypatch):
    """XDG cache home and TMPDIR inside tmp_path; returns (xdg, tmp)."""
    xdg, tmp = tmp_path / "xdg", tmp_path / "tmp"
    xdg.mkdir()
    tmp.mkdir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return xdg, tmp


def mode(path):
    return stat.S_IMODE(path.stat().st_mode)


def test_creates_a_private_folder_in_the_user_cache(places):
    xdg, _ = places
    chosen = gpu.choose_cache_dir()
    assert chosen == xdg / "flashcourse-numba"
    assert mode(chosen) & 0o077 == 0 and chosen.stat().st_uid == os.getuid()


def test_a_world_writable_folder_is_refused(places):
    """Another user pre-created both places with mode 777: a fresh private temp dir."""
    xdg, tmp = places
    for bad in (xdg / "flashcourse-numba", tmp / f"flashcourse-numba-{os.getuid()}"):
        bad.mkdir()
        bad.chmod(0o777)
    chosen = gpu.choose_cache_dir()
    assert chosen.parent == tmp and chosen.name.startswith("flashcourse-numba-")
    assert chosen not in (xdg / "flashcourse-numba", tmp / f"flashcourse-numba-{os.getuid()}")
    assert mode(chosen) == 0o700


def test_group_writable_and_symlinked_folders_are_refused(places):
    xdg, tmp = places
    (xdg / "flashcourse-numba").mkdir(mode=0o770)
    (xdg / "flashcourse-numba").chmod(0o770)
    target = tmp / "elsewhere"
    target.mkdir(mode=0o700)
    (tmp / f"flashcourse-numba-{os.getuid()}").symlink_to(target)
    chosen = gpu.choose_cache_dir()
    assert chosen not in (xdg / "flashcourse-numba", target,
                          tmp / f"flashcourse-numba-{os.getuid()}")
    assert mode(chosen) == 0o700


def test_falls_back_to_a_per_user_temp_folder(places):
    xdg, tmp = places
    (xdg / "flashcourse-numba").write_text("a file, not a folder")
    chosen = gpu.choose_cache_dir()
    assert chosen == tmp / f"flashcourse-numba-{os.getuid()}"
    assert mode(chosen) & 0o077 == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a folder to another user")
def test_a_folder_owned_by_another_user_is_refused(places):
    xdg, _ = places
    other = xdg / "flashcourse-numba"
    other.mkdir(mode=0o700)
    os.chown(other, 65534, 65534)
    assert gpu.choose_cache_dir() != other


def test_select_cache_dir_leaves_a_writable_package_alone(monkeypatch):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setattr(os, "access", lambda *a, **k: True)
    gpu.select_cache_dir()
    assert "NUMBA_CACHE_DIR" not in os.environ


def test_select_cache_dir_refuses_a_world_writable_folder(places, monkeypatch):
    """The whole choice as `import flashcourse` makes it for a read-only package."""
    from pathlib import Path
    xdg, tmp = places
    for bad in (xdg / "flashcourse-numba", tmp / f"flashcourse-numba-{os.getuid()}"):
        bad.mkdir()
        bad.chmod(0o777)
    package_dir = Path(gpu.__file__).resolve().parent
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, m, **kw: False if Path(p) == package_dir
                        else real_access(p, m, **kw))
    monkeypatch.setenv("NUMBA_CACHE_DIR", "restored-after-the-test")
    monkeypatch.delenv("NUMBA_CACHE_DIR")
    gpu.select_cache_dir()
    chosen = Path(os.environ["NUMBA_CACHE_DIR"])
    assert chosen.parent == tmp and mode(chosen) == 0o700
    assert chosen not in (xdg / "flashcourse-numba", tmp / f"flashcourse-numba-{os.getuid()}")
