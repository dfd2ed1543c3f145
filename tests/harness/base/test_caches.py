"""The suite's cache folder: where it is, files read whole or ignored with a
warning, and the libraries' compile caches kept under it."""

import os
import sys

import pytest

from harness.base import caches
from harness.base.errors import CacheWarning
from impls import backends


def test_the_folder_is_the_variable_else_the_users_cache(monkeypatch, tmp_path):
    monkeypatch.setenv(caches.ENV, str(tmp_path / "mine"))
    assert caches.cache_root() == tmp_path / "mine"
    monkeypatch.delenv(caches.ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert caches.cache_root() == tmp_path / "xdg" / "scatterbench"
    monkeypatch.delenv(caches.COMPILE_ENV, raising=False)
    assert caches.compile_cache_root() == tmp_path / "xdg" / "scatterbench" / "compile"


def test_a_file_is_written_whole_and_read_back(tmp_path):
    path = tmp_path / "deep" / "cache.json"
    assert caches.write_json(path, {"a": [1, 2]}) and caches.read_json(path) == {"a": [1, 2]}
    assert [entry.name for entry in path.parent.iterdir()] == ["cache.json"]  # no temporary left
    assert caches.read_json(tmp_path / "absent.json") is None  # none yet: no warning


@pytest.mark.parametrize("content", [b"{\"cut\": ", b"[1]", b"\xff\xfe"])
def test_a_damaged_file_is_a_warning_and_nothing(tmp_path, content):
    path = tmp_path / "cache.json"
    path.write_bytes(content)
    with pytest.warns(CacheWarning, match="cache.json"):
        assert caches.read_json(path) is None


def test_an_unwritable_folder_is_a_warning_not_an_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.warns(CacheWarning, match="cannot be written"):
        assert not caches.write_json(blocker / "cache.json", {})


def test_compile_caches_go_under_the_compile_folder_and_a_users_own_wins(monkeypatch, tmp_path):
    monkeypatch.setenv(caches.COMPILE_ENV, str(tmp_path))
    for name in ("TORCHINDUCTOR_CACHE_DIR", "TORCHINDUCTOR_FX_GRAPH_CACHE", *backends.JAX_COMPILE_CACHE):
        monkeypatch.setenv(name, "")  # recorded, so what the test sets goes again afterwards
        monkeypatch.delenv(name)
    monkeypatch.delitem(sys.modules, "jax", raising=False)  # as before jax's first import: its variables
    folders = caches.enable_compile_caches()
    assert folders["torch"] == str(tmp_path / "torch") == os.environ["TORCHINDUCTOR_CACHE_DIR"]
    assert os.environ["TORCHINDUCTOR_FX_GRAPH_CACHE"] == "1"
    if "jax" in folders:  # installed
        assert os.environ["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path / "jax")
        # JAX's thresholds would leave out every kernel of this suite's sizes
        assert os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"
        assert os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] == "-1"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/users/own")
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", "/users/jax")
    caches.enable_compile_caches()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/users/own" and os.environ["JAX_COMPILATION_CACHE_DIR"] == "/users/jax"
