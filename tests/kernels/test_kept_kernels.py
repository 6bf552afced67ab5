"""kernels.cost.kept_kernels over array arguments: a call takes the kernel an earlier call made only from the same
arguments, bit for bit, and the kernel it takes is the one the constructor makes."""

import numpy as np

from rubinperf import mathops
from rubinperf.kernels import all_reduce_by_size, gemm, grouped_gemm
from rubinperf.kernels.cost import forget_array_kernels


def _fields(k):
    return {f: np.asarray(v).tobytes() if type(v).__module__ == "numpy" else v for f, v in k.cost.__dict__.items()}


def test_equal_arrays_take_one_kernel():
    forget_array_kernels()
    rows = np.arange(1.0, 65.0).reshape(-1, 1)
    first = gemm(rows, 1024, 7168, "fp8")
    again = gemm(rows.copy(), 1024, 7168, "fp8")   # another array of the same bytes
    assert again is first
    assert gemm(rows, 1024, 7168, "bf16") is not first   # another plain argument
    assert all_reduce_by_size(rows * 14336, 8, ("one-shot", "two-shot"), (1 << 20,)) is \
        all_reduce_by_size(rows * 14336, 8, ("one-shot", "two-shot"), (1 << 20,))


def test_other_bytes_make_their_own_kernel():
    forget_array_kernels()
    rows = np.arange(1.0, 65.0).reshape(-1, 1)
    first = gemm(rows, 1024, 7168, "fp8")
    changed = rows.copy()
    changed[10] = 0.5                            # the same shape, first and last element: another middle
    k = gemm(changed, 1024, 7168, "fp8")
    assert k is not first
    assert float(np.ravel(k.cost.fp8_flops)[10]) == 2 * 0.5 * 1024 * 7168
    rows[10] = 0.5                               # the first call's own array changed after the call
    assert gemm(rows, 1024, 7168, "fp8") is k    # the kept kernel of these bytes, not of the bytes before
    signed = np.zeros((4, 1))
    assert gemm(-signed, 8, 8) is not gemm(signed, 8, 8)   # -0.0 is not 0.0


def test_a_kept_kernel_is_the_constructors():
    forget_array_kernels()
    tokens = np.array([[1.0], [3.0], [96.0], [1000.0]])
    kept = grouped_gemm(tokens, 8, 4096, 7168, "fp4")
    forget_array_kernels()
    made = grouped_gemm(tokens.copy(), 8, 4096, 7168, "fp4")
    assert made is not kept and _fields(made) == _fields(kept)
    with mathops.held_roundings(tokens.shape[0]):   # an array's roundings differ inside: its own kernels
        assert grouped_gemm(tokens, 8, 4096, 7168, "fp4") is not kept
