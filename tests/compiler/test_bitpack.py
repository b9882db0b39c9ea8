"""vta.top.bitpack / bitunpack (TE, built for the host CPU) and their numpy versions."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import te

from vta_compiler.top import bitpack, bitpack_np, bitunpack, bitunpack_np


def _run_te(x: np.ndarray, bits: int, pack_type: str, signed: bool):
    a = te.placeholder(x.shape, str(x.dtype), name="a")
    packed = bitpack(a, bits, pack_type)
    back = bitunpack(packed, bits, signed, str(x.dtype))
    f = tvm.tirx.build(te.create_prim_func([a, packed, back]), target="llvm")
    p = tvm.runtime.empty([int(d) for d in packed.shape], pack_type)
    u = tvm.runtime.empty(x.shape, str(x.dtype))
    f(tvm.runtime.tensor(x), p, u)
    return p.numpy(), u.numpy()


@pytest.mark.parametrize("bits", [1, 2, 4])
@pytest.mark.parametrize("pack_type", ["int8", "int16", "int32"])
@pytest.mark.parametrize("signed", [True, False])
def test_round_trip(bits, pack_type, signed):
    width = int(pack_type[3:])
    lanes = width // bits
    rng = np.random.default_rng(bits * 100 + width)
    lo, hi = (-(1 << (bits - 1)), 1 << (bits - 1)) if signed else (0, 1 << bits)
    x = rng.integers(lo, hi, (3, 4, 2 * lanes)).astype(np.int8)
    p_te, back_te = _run_te(x, bits, pack_type, signed)
    p_np = bitpack_np(x, bits, pack_type)
    assert p_te.shape == (3, 4, 2) and p_te.dtype == np.dtype(pack_type)
    assert np.array_equal(p_te, p_np)
    assert np.array_equal(back_te, x)
    assert np.array_equal(bitunpack_np(p_np, bits, signed), x)
    # every value really is in its field: rebuild the words from the definition
    words = np.zeros((3, 4, 2), np.int64)
    for k in range(lanes):
        words |= (x[..., k::lanes].astype(np.int64) & ((1 << bits) - 1)) << (k * bits)
    assert np.array_equal(p_np.astype(np.int64) & ((1 << width) - 1), words)


def test_known_words():
    """LSB first: value k of a word sits in bits [k*bits, (k+1)*bits)."""
    assert bitpack_np(np.array([1, -1, 0, 1], np.int8), 2).tolist() == [0b01001101]
    assert bitpack_np(np.array([1, 0, 0, 0, 0, 0, 0, 1], np.int8), 1).tolist() == [-128 + 1]
    assert bitpack_np(np.array([-8, 7], np.int8), 4).tolist() == [0x78]
    assert bitunpack_np(np.array([0x78], np.int8), 4).tolist() == [-8, 7]
    assert bitunpack_np(np.array([0x78], np.int8), 4, signed=False).tolist() == [8, 7]
    p, _ = _run_te(np.array([[1, -1, 0, 1]], np.int8), 2, "int8", True)
    assert p.tolist() == [[0b01001101]]


def test_bad_arguments():
    a = te.placeholder((2, 6), "int8", name="a")
    with pytest.raises(ValueError, match=r"multiple of 4 values per int8 word"):
        bitpack(a, 2)
    with pytest.raises(ValueError, match=r"bits=3 must divide the 8-bit word"):
        bitpack(a, 3)
    with pytest.raises(ValueError, match=r"pack_type must be one of"):
        bitpack_np(np.zeros((4,), np.int8), 2, "uint8")
