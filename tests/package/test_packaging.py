"""Packaging: the bundled specs travel inside the wheel, and a missing set of them is an error."""

from __future__ import annotations

import os
import re
from importlib import metadata

import pytest

from conftest import REPO


def test_manifest_grafts_every_bundled_folder():
    from rubinperf.bundled import SPEC_FOLDERS

    grafted = set(re.findall(r"^graft\s+(\S+)", (REPO / "MANIFEST.in").read_text(), flags=re.M))
    assert set(SPEC_FOLDERS) <= grafted


def test_setup_hook_reads_the_same_folder_list():
    text = (REPO / "setup.py").read_text()
    assert "SPEC_FOLDERS" in text and "bundled.py" in text


def test_bundled_folders_come_from_the_package_when_the_wheel_carried_them(tmp_path, monkeypatch):
    from importlib import resources

    from rubinperf import bundled

    (tmp_path / "_data" / "hardware").mkdir(parents=True)
    monkeypatch.setattr(resources, "files", lambda pkg: tmp_path)
    bundled.data_root.cache_clear()   # the folder is found once per run
    try:
        assert bundled.folder("hardware") == tmp_path / "_data" / "hardware"
    finally:
        bundled.data_root.cache_clear()


def test_source_checkout_fallback():
    from rubinperf import bundled

    # In this checkout no wheel data exists inside the package: the top-level folders are read.
    bundled.data_root.cache_clear()
    assert bundled.folder("hardware") == REPO / "hardware"
    assert not (REPO / "rubinperf" / "_data").exists()


def test_no_bundled_specs_is_an_error_not_an_empty_table(cli, tmp_path, monkeypatch):
    from rubinperf import bundled
    from rubinperf.errors import SpecError
    from rubinperf.specs.loader import bundled_names

    monkeypatch.setattr(bundled, "data_root", lambda: tmp_path)
    with pytest.raises(SpecError, match="no bundled hardware specs"):
        bundled_names("hardware")
    r = cli("list", "hardware")
    assert r.code == 2 and r.out == ""
    assert r.err.count("\n") == 1 and "no bundled hardware specs" in r.err
    r = cli("estimate", "-m", "nosuch")
    assert r.code == 2 and "no bundled model specs" in r.err


def test_version_comes_from_the_installed_metadata():
    import rubinperf

    assert rubinperf.__version__ == metadata.version("rubinperf")


def test_ci_selects_the_deterministic_hypothesis_profile():
    from hypothesis import settings

    ci = settings.get_profile("ci")
    assert ci.derandomize and ci.database is None and ci.deadline is None and ci.max_examples == 100
    if os.environ.get("CI"):
        assert settings.default.derandomize and settings.default.database is None
