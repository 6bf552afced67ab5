"""aiconfigurator's measured rows: the outlier rules, and each row family's Cost derived by hand."""

from pathlib import Path

import pytest

from rubinperf.calibrate.outliers import cross_backend_rejects, cross_system_rejects, envelope_rejects, reject
from rubinperf.calibrate.plan import read_csv, row_cost
from rubinperf.calibrate.rows import row_kernels
from rubinperf.specs.precision import PRECISIONS

HERE = Path(__file__).resolve().parent.parent.parent / "calibration" / "aiconfigurator"


def gemm(system, backend, m, t_us, n=5120, k=5120, dtype="fp8", impl="x"):
    return {"system": system, "backend": backend, "family": "gemm", "impl": impl, "dtype": dtype, "m": m, "n": n,
            "k": k, "measured_s": t_us * 1e-6, "source": f"{system}/gemm/{backend}"}


def ar(system, ranks, nbytes, t_us, impl="SGLang_CustomAllReduce_graph"):
    return {"system": system, "collective": "all_reduce", "ranks": ranks, "nbytes": nbytes, "dtype": "bf16",
            "impl": impl, "measured_s": t_us * 1e-6, "source": f"{system}/comm/sglang/0.5.14"}


def test_envelope_rejects_a_small_m_slower_than_a_larger_m_and_keeps_a_rising_series():
    # vLLM 0.24's DeepGEMM FP8 block row at m = 1 on GB300 (596 us) against its m = 128 (267 us): > 2x
    rows = [gemm("gb300", "vllm", 1, 596), gemm("gb300", "vllm", 128, 267), gemm("gb300", "vllm", 4096, 400)]
    assert set(envelope_rejects(rows)) == {0}
    rising = [gemm("gb300", "sglang", m, t) for m, t in ((1, 10.0), (16, 10.5), (128, 12.0), (129, 16.0), (4096, 60.0))]
    assert envelope_rejects(rising) == {}
    # slower than a larger m by less than 2x: kept (tile padding, kernel choice)
    assert envelope_rejects([gemm("gb300", "sglang", 1, 19.0), gemm("gb300", "sglang", 64, 10.0)]) == {}


def test_cross_system_rejects_the_gb300_tp8_all_reduce_and_keeps_an_ordinary_one():
    rows = [ar("gb300", 8, 8192, 28.0), ar("b200_sxm", 8, 8192, 5.05),  # GB300 SGLang TP8 vs B200, same NVLink 5
            ar("gb300", 4, 8192, 5.3), ar("gb200", 4, 8192, 4.9), ar("b200_sxm", 4, 8192, 5.9)]
    assert set(cross_system_rejects(rows)) == {0}
    assert "cross-system" in cross_system_rejects(rows)[0]
    # a Hopper row is no sibling: never compared
    assert cross_system_rejects([ar("h200_sxm", 8, 8192, 28.0), ar("b200_sxm", 8, 8192, 5.0)]) == {}


def test_cross_backend_rejects_a_framework_4x_slower_on_the_same_shape():
    rows = [gemm("gb300", "vllm", 1, 571, impl="DeepGemm"), gemm("gb300", "sglang", 1, 10.8, impl="deepgemm"),
            gemm("gb300", "trtllm", 1, 11.9, impl="deepgemm")]
    assert set(cross_backend_rejects(rows)) == {0}
    assert cross_backend_rejects(rows[1:]) == {}
    kept, rejected = reject(rows)
    assert len(kept) == 2 and rejected[0]["rule"] == "cross-backend"


def test_committed_tables_reject_the_known_artefacts():
    _, kept = read_csv(HERE / "gb300-collectives.csv")
    assert not [r for r in kept if r["impl"].startswith("SGLang") and r["ranks"] == 8 and r["nbytes"] <= 2 ** 16]
    assert [r for r in kept if r["impl"].startswith("SGLang") and r["ranks"] == 4]
    _, vllm = read_csv(HERE / "gb300-vllm.csv")
    assert all(r["measured_s"] < 100e-6 for r in vllm if r["m"] == 1) or not [r for r in vllm if r["m"] == 1]
    _, sg = read_csv(HERE / "gb300-sglang.csv")
    assert len(sg) > 1000 and {r["family"] for r in sg} == {"gemm", "moe", "mhc", "attention_decode"}


def test_nvfp4_gemm_row_cost_by_hand():
    row = {"family": "gemm", "dtype": "nvfp4", "m": 16, "n": 5120, "k": 5120}
    c = row_cost(row)
    assert PRECISIONS["nvfp4"].bytes_per_element == 0.5625  # 4 bits + one 1-byte scale per 16
    assert float(c.fp4_flops) == 2 * 16 * 5120 * 5120 == 838_860_800
    # weights 5120 x 5120 x 0.5625, NVFP4 activations 16 x 5120 x 0.5625, BF16 output 16 x 5120 x 2
    assert float(c.hbm_bytes) == 14_745_600 + 46_080 + 163_840


def test_moe_row_is_two_grouped_gemms_by_hand():
    # 8 tokens x top-6 on EP 8 of 256 experts: 48 rows on 32 local experts; hidden 4096, intermediate 2048, MXFP4
    row = {"family": "moe", "dtype": "fp4", "m": 8, "n": 4096, "k": 2048, "groups": 32, "rows": 48, "touched": 32,
           "launches": 2}
    c = row_cost(row)
    assert float(c.fp8_fp4_flops) == 2 * 48 * 4096 * 4096 + 2 * 48 * 2048 * 4096
    fp8 = PRECISIONS["fp8"].bytes_per_element
    weights = 32 * (4096 * 4096 + 4096 * 2048) * 0.53125
    acts = 48 * 4096 * fp8 + 48 * 4096 * 2 + 48 * 2048 * fp8 + 48 * 4096 * 2
    assert float(c.hbm_bytes) == pytest.approx(weights + acts, rel=1e-12)
    assert len(row_kernels(row)) == 2


def test_mhc_row_cost_by_hand():
    row = {"family": "mhc", "dtype": "fp32", "m": 16, "n": 4096, "groups": 4}
    c = row_cost(row)
    # 4 BF16 routes of 4096 read and written per token, a [24, 4 x 4096] FP32 mixing weight
    assert float(c.hbm_bytes) == 2 * 16 * 4 * 4096 * 2 + 24 * 4 * 4096 * 4
    assert float(c.fp32_flops) == 2 * 16 * 24 * 4 * 4096 + 4 * 16 * 4096


def test_tilelang_mhc_rows_are_their_kernels_at_two_sites():
    from rubinperf.calibrate.rows import row_kernels

    base = {"family": "mhc", "dtype": "fp32", "m": 16, "n": 4096, "groups": 4, "mode": "graph"}
    pre = row_kernels({**base, "impl": "sglang_tilelang_mhc_pre"})
    post = row_kernels({**base, "impl": "sglang_tilelang_mhc_post"})
    # pre: the pre GEMM + sum of squares and the big-fuse at each of the two boundaries; post: the post kernel twice
    assert len(pre) == 4 and len(post) == 2
    # post at one boundary: reads 4 BF16 routes and the 4096-wide BF16 sublayer output, writes the 4 routes
    assert float(post[0][0].cost.hbm_bytes) == 16 * (4 * 4096 * 2 + 4096 * 2) + 16 * 4 * 4096 * 2
    # the pre GEMM (DeepGEMM's tf32_hc_prenorm_gemm) reads the 4 routes and the [24, 4 x 4096] FP32 mixing weight;
    # each of its 16 K splits writes 24 FP32 partials and one FP32 sum of squares per token
    gemm_, fuse = pre[0][0], pre[1][0]
    assert float(gemm_.cost.hbm_bytes) == 16 * 4 * 4096 * 2 + 24 * 4 * 4096 * 4 + 16 * 16 * (24 + 1) * 4
    # its MMAs run on one 64-token block and the 24 mixing rows aligned to 16 (32) at the TF32 rate; the squares on
    # CUDA cores; 16 splits x 1 block = 16 CTAs
    assert float(gemm_.cost.tf32_flops) == 2 * 64 * 32 * 4 * 4096 and float(gemm_.cost.fp32_flops) == 2 * 16 * 4 * 4096
    assert gemm_.ctas == 16
    # the big-fuse reads the routes and the splits' partials, writes the 4096-wide BF16 layer input
    assert float(fuse.cost.hbm_bytes) == 16 * 4 * 4096 * 2 + 16 * 16 * (24 + 1) * 4 + 16 * 4096 * 2
    # TRT-LLM's mHC kernels are not TileLang's: one kernel as before
    assert len(row_kernels({**base, "impl": "trtllm_mhc_post_mapping"})) == 1


def test_collective_csv_reads_all_gather_rows():
    kind, rows = read_csv(HERE / "gb300-collectives.csv")
    assert kind == "collectives" and {"all_reduce", "all_gather"} <= {r["collective"] for r in rows}


def test_quantising_gemm_calls_time_a_quantisation_kernel_before_the_gemm():
    # The collector times SGLang's FP8 and NVFP4 GEMMs with their activation quantisation; F.linear alone.
    fp8 = {"family": "gemm", "impl": "sglang_deepgemm_gemm_nt_f8f8bf16", "dtype": "fp8", "m": 16, "n": 5120, "k": 4096}
    quant, gemm_ = (k for k, _ in row_kernels(fp8))
    assert quant.family == "stream" and gemm_.family == "gemm"
    # 16 x 4096 BF16 values read (131,072 B), written as FP8 with one FP32 scale per 128 x 128 (1.000244 B each)
    assert float(quant.cost.hbm_bytes) == pytest.approx(16 * 4096 * 2 + 16 * 4096 * (1 + 4 / 16384))
    nvfp4 = {**fp8, "impl": "sglang_flashinfer_cutedsl_nvfp4", "dtype": "nvfp4"}
    assert float(row_kernels(nvfp4)[0][0].cost.hbm_bytes) == 16 * 4096 * 2 + 16 * 4096 * 0.5625
    bf16 = {**fp8, "impl": "sglang_torch_linear", "dtype": "bf16"}
    assert [k.family for k, _ in row_kernels(bf16)] == ["gemm"]


def test_a_dense_gemm_runs_at_its_precisions_rate():
    import dataclasses

    from rubinperf.kernels import gemm, grouped_gemm
    from rubinperf.roofline import kernel_time
    from rubinperf.specs.stack import load_platform

    hw = load_platform("gb300-nvl72", "sglang-blackwell")
    hw = dataclasses.replace(hw, mma_compute_efficiency=0.5, mma_bf16_compute_efficiency=0.8,
                             mma_fp4_compute_efficiency=0.25)
    m, n, k = 5120, 8192, 8192   # 160 x 64 tiles of 32 x 128: 64 whole waves on 160 SMs, no padding
    flops = 2 * m * n * k
    assert float(kernel_time(gemm(m, n, k, weight="bf16"), hw).compute_s) == pytest.approx(flops / (2.5e15 * 0.8))
    assert float(kernel_time(gemm(m, n, k, weight="fp8"), hw).compute_s) == pytest.approx(flops / (5e15 * 0.5))
    assert float(kernel_time(gemm(m, n, k, weight="nvfp4"), hw).compute_s) == pytest.approx(flops / (15e15 * 0.25))
    # a grouped FP4 kernel keeps the grouped rate
    g = kernel_time(grouped_gemm(m, 8, n, k, weight="fp4", act="fp8"), hw)
    assert float(g.compute_s) == float(kernel_time(grouped_gemm(m, 8, n, k, weight="fp4", act="fp8"),
                                                   dataclasses.replace(hw, mma_fp4_compute_efficiency=0.9)).compute_s)
