"""Parameter counts implied by the model specs' shapes, against the published totals."""

from __future__ import annotations

import pytest

from conftest import MODEL_NAMES
from rubinperf.step.architecture import parameter_counts
from rubinperf.specs.model import load_model


@pytest.fixture(scope="module")
def counts():
    return {name: parameter_counts(load_model(name)) for name in MODEL_NAMES}


@pytest.mark.parametrize("name, total, active", [
    ("deepseek-v4-flash", 284e9, 13e9),   # published: 284B total / 13B active (MTP excluded)
    ("deepseek-v3", 671e9, 37e9),         # published: 671B total / 37B active (MTP excluded)
])
def test_published_parameter_counts(counts, name, total, active):
    c = counts[name]
    assert c["total_params"] == pytest.approx(total, rel=0.03)
    assert c["active_params"] == pytest.approx(active, rel=0.10)


def test_published_totals_exclude_the_mtp_layer():
    for name in ("deepseek-v4-flash", "deepseek-v3"):
        m = load_model(name)
        assert m.draft_counts_in_total is False
        c = parameter_counts(m)
        assert c["draft_params"] > 0
        # adding the MTP layer would move the total by its own size, not already included
        assert c["total_params"] + c["draft_params"] > c["total_params"]


def test_deepseek_v3_routed_experts_by_hand(counts):
    """V3: 58 MoE layers x 256 experts x 3 x 7168 x 2048 = 653.9e9 routed parameters, most of the 671B."""
    routed = 58 * 256 * 3 * 7168 * 2048
    assert routed == 653_908_770_816   # 14,848 experts x 44,040,192
    assert routed < counts["deepseek-v3"]["total_params"] < routed + 25e9


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_counts_are_consistent(counts, name):
    c = counts[name]
    assert c["total_params"] > c["active_params"] > 0
    assert c["draft_params"] >= 0
    assert c["engram_table_bytes"] >= 0


def test_v41_flash_engram_tables():
    m = load_model("deepseek-v4.1-flash")
    # two hashed n-gram tables of 94.4 GiB each (docs/sources/models.md)
    assert parameter_counts(m)["engram_table_bytes"] == pytest.approx(2 * 94.4 * 2**30, rel=0.01)


def test_list_models_json_prints_counts(cli, counts):
    r = cli("list", "models", "--json")
    assert r.code == 0, r
    recs = {x["name"]: x for x in r.json()}
    assert set(recs) == set(MODEL_NAMES)
    for name, rec in recs.items():
        assert rec["total_params"] == counts[name]["total_params"]
        assert rec["active_params"] == counts[name]["active_params"]
