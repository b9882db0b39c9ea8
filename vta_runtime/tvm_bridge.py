"""The runtime API as TVM global functions, so compiled code reaches it through ``call_packed``.

Every function acts on the process-wide command queue (``vta_runtime.command_handle()``).
Device buffers are passed as physical addresses (int or opaque handle); host pointers as opaque
handles. Kernel handles are per-call-site static handles (``tvm_static_handle``).
"""

from __future__ import annotations

import ctypes
from typing import Any

from . import command_handle, shutdown

PREFIX = "vta.runtime."
_registered = False


def _addr(x: Any) -> int:
    """An address from an int, a ctypes pointer or an object with ``phys``."""
    if isinstance(x, ctypes.c_void_p):
        return x.value or 0
    return int(x)


def _key(handle: Any) -> Any:
    return ("static", _addr(handle)) if isinstance(handle, ctypes.c_void_p) else handle


def _buffer_copy(src, src_offset, dst, dst_offset, nbytes, kind_mask):
    cq = command_handle()
    src_dev, dst_dev = bool(kind_mask & 2), bool(kind_mask & 1)
    if src_dev:
        data = cq.device.read(_addr(src) + src_offset, nbytes)
    else:
        data = ctypes.string_at(_addr(src) + src_offset, nbytes)
    if dst_dev:
        cq.device.write(_addr(dst) + dst_offset, data)
    else:
        ctypes.memmove(_addr(dst) + dst_offset, data, nbytes)


def _functions() -> dict[str, Any]:
    def cq():
        return command_handle()

    return {
        "BufferAlloc": lambda nbytes: cq().device.alloc(int(nbytes)),
        "BufferFree": lambda phys: cq().device.free(_addr(phys)),
        "BufferCopy": _buffer_copy,
        "LoadBuffer2D": lambda src, off, xs, ys, st, xp0, yp0, xp1, yp1, sram, mt: cq().load_buffer_2d(
            _addr(src), off, xs, ys, st, xp0, yp0, xp1, yp1, sram, mt),
        "StoreBuffer2D": lambda sram, mt, dst, off, xs, ys, st: cq().store_buffer_2d(
            sram, mt, _addr(dst), off, xs, ys, st),
        "UopKernelBegin": lambda handle, sig: int(cq().uop_kernel_begin(_key(handle), int(sig))),
        "UopLoopBegin": lambda extent, d, s, w: cq().uop_loop_begin(extent, d, s, w),
        "UopLoopEnd": lambda: cq().uop_loop_end(),
        "UopPush": lambda mode, reset, d, s, w, op, use_imm, imm: cq().uop_push(mode, reset, d, s, w, op, use_imm,
                                                                                imm),
        "PushGEMMOp": lambda handle, sig: cq().push_gemm_op(_key(handle), None, int(sig)),
        "PushALUOp": lambda handle, sig: cq().push_alu_op(_key(handle), None, int(sig)),
        "DepPush": lambda a, b: cq().dep_push(a, b),
        "DepPop": lambda a, b: cq().dep_pop(a, b),
        "Synchronize": lambda timeout: cq().synchronize(float(timeout) if timeout > 0 else None),
        "SetDebugMode": lambda flags: cq().set_debug_mode(flags),
        "RuntimeShutdown": shutdown,
    }


def register(override: bool = True) -> list[str]:
    """Register every entry point as ``vta.runtime.<Name>``; returns the names. Safe to call twice."""
    global _registered
    import tvm

    names = []
    for name, fn in _functions().items():
        if not _registered or override:
            tvm.register_global_func(PREFIX + name, fn, override=True)
        names.append(PREFIX + name)
    _registered = True
    return names
