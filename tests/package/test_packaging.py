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


def test_the_fixed_hypothesis_profile_is_the_default():
    """A plain `python -m pytest` (no CI, no HYPOTHESIS_PROFILE) checks the same examples every run; random
    exploration only when HYPOTHESIS_PROFILE=explore is asked for."""
    import subprocess
    import sys

    from hypothesis import settings

    fixed = settings.get_profile("fixed")
    assert fixed.derandomize and fixed.database is None and fixed.deadline is None and fixed.max_examples == 100
    assert not settings.get_profile("explore").derandomize
    if os.environ.get("HYPOTHESIS_PROFILE", "fixed") in ("fixed", "ci"):
        assert settings.default.derandomize and settings.default.database is None
    # the conftest as a fresh run loads it, with CI and HYPOTHESIS_PROFILE both unset
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "HYPOTHESIS_PROFILE")}
    code = ("import sys; sys.path.insert(0, 'tests'); import conftest; from hypothesis import settings; "
            "print(settings.default.derandomize, settings.default.database)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         cwd=REPO)
    assert out.stdout.split() == ["True", "None"], out.stderr
