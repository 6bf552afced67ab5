"""One catalog of generic kernels: the `kernel` command, `explain` and the calibration build them alike."""

from __future__ import annotations

import pytest

from conftest import FP4_B, FP8_B
from rubinperf.calibrate.rows import row_kernel
from rubinperf.errors import SpecError
from rubinperf.kernels.catalog import CATALOG, activation_dtype, build, output_dtype


def test_dtype_policy():
    assert activation_dtype("fp4") == "fp8" and activation_dtype("bf16") == "bf16"
    assert output_dtype("fp32") == "fp32" and output_dtype("fp8") == "bf16"
    # FP4 experts run FP8 x FP4: 2 x 32 x 64 x 128 FLOPs on the mixed peak; weights 64 x 128 x 0.53125 B
    k = build("grouped-gemm", {"tokens": 32, "groups": 1, "n": 64, "k": 128})
    assert k.cost.fp8_fp4_flops == 2 * 32 * 64 * 128 and k.cost.weight_bytes == pytest.approx(64 * 128 * FP4_B)
    assert k.cost.activation_bytes == pytest.approx(32 * 128 * FP8_B + 32 * 64 * 2)
    assert (k.groups, k.rows, k.n, k.k) == (1, 32, 64, 128)


def test_the_calibration_and_the_cli_build_the_same_kernels():
    row = {"family": "gemm", "dtype": "fp8", "m": 16, "n": 7168, "k": 2048}
    assert row_kernel(row) == build("gemm", {"m": 16, "n": 7168, "k": 2048}, dtype="fp8")
    row = {"family": "grouped_gemm", "dtype": "fp8", "rows": 192, "groups": 12, "n": 4608, "k": 5120, "touched": 12}
    assert row_kernel(row) == build("grouped-gemm", {"tokens": 192, "groups": 12, "n": 4608, "k": 5120, "touched": 12},
                                    dtype="fp8")


def test_explain_offers_every_catalog_kernel(cli):
    from rubinperf.cli.explain import generic_kinds

    assert set(generic_kinds()) == set(CATALOG)
    for kind in ("gemm", "grouped-gemm", "attention", "copy"):
        assert cli("kernel", kind, "--help").code == 0


def test_unknown_kind():
    with pytest.raises(SpecError, match="unknown kernel 'conv'.*gemm"):
        build("conv", {})
