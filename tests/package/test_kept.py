"""Results kept between runs (rubinperf/kept.py) are the ones computed afresh, bit for bit, and a change of the tree
computes them again."""

from __future__ import annotations

import math

from rubinperf import kept
from rubinperf.roofline import expected_max_normal
from rubinperf.step.latency import time_per_token_factor


def _fresh(fn):
    """The function under its lru_cache and kept wrappers."""
    return fn.__wrapped__.__wrapped__


def test_a_kept_factor_is_the_computed_float(tmp_path, monkeypatch):
    monkeypatch.setattr(kept, "_DIR", tmp_path)
    args = (5.0, 3.51, 21.5, 0.0145, 90.0)
    want = _fresh(time_per_token_factor)(*args)
    first = time_per_token_factor.__wrapped__(*args)      # computed and kept
    assert len(list(tmp_path.glob("kept-*"))) == 1
    again = time_per_token_factor.__wrapped__(*args)      # read back
    assert first == want and again == want and math.copysign(1, again) == math.copysign(1, want)
    assert expected_max_normal.__wrapped__(16) == _fresh(expected_max_normal)(16)
    assert expected_max_normal.__wrapped__(16) == _fresh(expected_max_normal)(16)   # (now from the file)
    assert abs(expected_max_normal.__wrapped__(16) - 1.7660) < 1e-4


def test_a_kept_result_of_the_tree_is_computed_again_when_the_tree_changes(tmp_path, monkeypatch):
    monkeypatch.setattr(kept, "_DIR", tmp_path)
    calls = []

    def compute():
        calls.append(1)
        return {"rows": [(1.5, None, True, "a")], "n": len(calls)}

    monkeypatch.setattr(kept, "_tree_digest", lambda: b"one")
    a = kept.kept_of_tree("t", compute, lambda v: v, lambda v: v)
    b = kept.kept_of_tree("t", compute, lambda v: v, lambda v: v)
    assert a == b == {"rows": [(1.5, None, True, "a")], "n": 1} and len(calls) == 1
    monkeypatch.setattr(kept, "_tree_digest", lambda: b"two")   # a file of the package or the bundled folders changed
    c = kept.kept_of_tree("t", compute, lambda v: v, lambda v: v)
    assert c["n"] == 2 and len(calls) == 2
    assert len(list(tmp_path.glob("tree-t-*"))) == 1   # the result of the tree before is not kept beside it


def test_the_tree_digest_sees_a_spec_file_of_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    kept._tree_digest.cache_clear()
    try:
        plain = kept._tree_digest()
        (tmp_path / "h200").write_text("[hardware]\n")   # `h200` now names this file, not the bundled spec
        kept._tree_digest.cache_clear()
        assert kept._tree_digest() != plain
    finally:
        kept._tree_digest.cache_clear()


def test_the_tree_digest_reads_the_bundled_files_but_not_raw_device_dumps(tmp_path, monkeypatch):
    from rubinperf import bundled

    (tmp_path / "calibration").mkdir()
    (tmp_path / "calibration" / "rows.csv").write_text("a,b\n1,2\n")
    (tmp_path / "calibration" / "stamps.csv.gz").write_bytes(b"raw")
    monkeypatch.setattr(bundled, "data_root", lambda: tmp_path)
    kept._tree_digest.cache_clear()
    try:
        plain = kept._tree_digest()
        (tmp_path / "calibration" / "stamps.csv.gz").write_bytes(b"other raw")   # no command reads it
        kept._tree_digest.cache_clear()
        assert kept._tree_digest() == plain
        (tmp_path / "calibration" / "rows.csv").write_text("a,b\n1,3\n")      # a bundled file a result may read
        kept._tree_digest.cache_clear()
        assert kept._tree_digest() != plain
    finally:
        kept._tree_digest.cache_clear()


def test_a_result_of_the_tree_is_computed_with_the_collector_paused_and_it_runs_again_after(tmp_path, monkeypatch):
    import gc

    monkeypatch.setattr(kept, "_DIR", tmp_path)
    monkeypatch.setattr(kept, "_tree_digest", lambda: b"gc")
    seen = []

    def compute():
        seen.append(gc.isenabled())
        return [1]

    def fails():
        raise ValueError("no result")

    assert gc.isenabled()
    assert kept.kept_of_tree("g", compute, lambda v: v, lambda v: v) == [1]
    assert seen == [False] and gc.isenabled()
    try:
        kept.kept_of_tree("h", fails, lambda v: v, lambda v: v)
    except ValueError:
        pass
    assert gc.isenabled()   # (also when the computation fails)


def test_the_tree_digest_is_kept_by_the_files_stamps_and_a_write_changes_them(tmp_path, monkeypatch):
    import os
    import time

    from rubinperf import bundled

    data, cache = tmp_path / "data", tmp_path / "cache"
    (data / "hardware").mkdir(parents=True)
    cache.mkdir()
    spec = data / "hardware" / "rack.toml"
    spec.write_text("a = 1\n")
    monkeypatch.setattr(bundled, "data_root", lambda: data)
    monkeypatch.setattr(kept, "_DIR", cache)

    def digest(racy_s):
        monkeypatch.setattr(kept, "RACY_S", racy_s)
        kept._tree_digest.cache_clear()
        return kept._tree_digest()

    try:
        fresh = digest(10 ** 9)          # every file "just changed": read whole, nothing kept by stamps
        assert list(cache.iterdir()) == []
        assert digest(0) == fresh        # kept by the stamps now
        (memo,) = cache.glob("tree-stamps-*")
        kept.write_kept(memo, b"k" * 20)
        assert digest(0) == b"k" * 20    # (read back from the stamps' file, the tree not read)
        before = spec.stat()
        time.sleep(0.05)                 # (past the file system's timestamp granularity: RACY_S is 0 here)
        spec.write_text("a = 2\n")       # same size; its modification time set back as it was
        os.utime(spec, ns=(before.st_atime_ns, before.st_mtime_ns))
        changed = digest(0)              # the change time moved: read whole
        assert changed not in (fresh, b"k" * 20) and changed == digest(10 ** 9)
        assert digest(0) == changed and len(list(cache.glob("tree-stamps-*"))) == 2
    finally:
        kept._tree_digest.cache_clear()
