"""``bitpack``: narrow values packed into int8/16/32 words along the lowest dimension, LSB first (spec 5.6).

For weights narrower than 8 bits: ``bits`` (1, 2, 4; any divisor of the word width) per value,
``width // bits`` values per word, value ``k`` of a word in bits ``[k*bits, (k+1)*bits)``. Only the
low ``bits`` of each value are kept, so signed values are stored in two's complement and
``bitunpack(..., signed=True)`` sign-extends them back. TE computes (an injective CPU stage, as in
the original) and numpy versions of both directions.
"""

from __future__ import annotations

import numpy as np
from tvm import te, tirx

PACK_TYPES = {"int8": 8, "int16": 16, "int32": 32}


def _lanes(bits: int, pack_type: str) -> int:
    if pack_type not in PACK_TYPES:
        raise ValueError(f"pack_type must be one of {', '.join(PACK_TYPES)}, not {pack_type!r}")
    width = PACK_TYPES[pack_type]
    if bits < 1 or width % bits:
        raise ValueError(f"bits={bits} must divide the {width}-bit word of {pack_type}")
    return width // bits


def bitpack(data: te.Tensor, bits: int, pack_type: str = "int8", name: str = "bitpack") -> te.Tensor:
    """Pack the lowest dimension of ``data``: shape ``(..., n)`` -> ``(..., n * bits / width)`` of ``pack_type``."""
    lanes = _lanes(bits, pack_type)
    shape = [int(d) for d in data.shape]
    if shape[-1] % lanes:
        raise ValueError(f"the lowest dimension ({shape[-1]}) must be a multiple of {lanes} values per {pack_type} "
                         "word")
    mask = tirx.const((1 << bits) - 1, pack_type)

    def word(*idx):
        out = None
        for k in range(lanes):
            v = data(*idx[:-1], idx[-1] * lanes + k).astype(pack_type) & mask
            if k:
                v = v << tirx.const(k * bits, pack_type)
            out = v if out is None else out | v
        return out
    return te.compute(shape[:-1] + [shape[-1] // lanes], word, name=name, tag="bitpack")


def bitunpack(packed: te.Tensor, bits: int, signed: bool = True, out_dtype: str = "int8",
              name: str = "bitunpack") -> te.Tensor:
    """The inverse of ``bitpack``: ``(..., m)`` words -> ``(..., m * width / bits)`` values of ``out_dtype``
    (sign-extended from ``bits`` when ``signed``)."""
    lanes = _lanes(bits, str(packed.dtype))
    shape = [int(d) for d in packed.shape]
    sign = 1 << (bits - 1)

    def value(*idx):
        w = packed(*idx[:-1], idx[-1] // lanes).astype("int32")
        v = (w >> ((idx[-1] % lanes) * bits)) & ((1 << bits) - 1)
        if signed:
            v = (v ^ sign) - sign
        return v.astype(out_dtype)
    return te.compute(shape[:-1] + [shape[-1] * lanes], value, name=name, tag="bitunpack")


def bitpack_np(data: np.ndarray, bits: int, pack_type: str = "int8") -> np.ndarray:
    """numpy ``bitpack``."""
    lanes = _lanes(bits, pack_type)
    if data.shape[-1] % lanes:
        raise ValueError(f"the lowest dimension ({data.shape[-1]}) must be a multiple of {lanes} values per "
                         f"{pack_type} word")
    v = (data.astype(np.int64) & ((1 << bits) - 1)).reshape(*data.shape[:-1], -1, lanes)
    words = np.zeros(v.shape[:-1], np.int64)
    for k in range(lanes):
        words |= v[..., k] << (k * bits)
    width = PACK_TYPES[pack_type]
    words = np.where(words >= 1 << (width - 1), words - (1 << width), words)    # two's complement word
    return words.astype(pack_type)


def bitunpack_np(packed: np.ndarray, bits: int, signed: bool = True, out_dtype: str = "int8") -> np.ndarray:
    """numpy ``bitunpack``."""
    lanes = _lanes(bits, str(packed.dtype))
    width = PACK_TYPES[str(packed.dtype)]
    words = packed.astype(np.int64) & ((1 << width) - 1)
    v = np.stack([(words >> (k * bits)) & ((1 << bits) - 1) for k in range(lanes)], axis=-1)
    if signed:
        v = np.where(v >= 1 << (bits - 1), v - (1 << bits), v)
    return v.reshape(*packed.shape[:-1], -1).astype(out_dtype)
