"""The runtime API as TVM global functions, so compiled code reaches it through ``call_packed``.

Every function acts on the process-wide command queue (``vta_runtime.command_handle()``).
DRAM buffers are passed either as physical addresses (ints) or as host data pointers (opaque
handles, such as the data pointer of an ``ext_dev`` tensor), which are translated to physical
addresses through the device's host window (``vta_runtime.device.host_window``).
Kernel handles are per-call-site static handles (``tvm_static_handle``): the runtime writes a
kernel id into the slot on first use, as the original libvta did, so a slot of a freed module
that is reused by a new module starts empty and never finds a stale kernel.
"""

from __future__ import annotations

import ctypes
import itertools
import weakref
from typing import Any

from . import command_handle, shutdown
from .device import host_window
from .errors import RuntimeUsageError

PREFIX = "vta.runtime."
_registered = False
_kernel_ids = itertools.count(1)
#: host address -> (device, physical address) of memory handed out by HostAlloc
_host_allocs: dict[int, tuple[Any, int]] = {}


def _addr(x: Any) -> int:
    """An address from an int, a ctypes pointer or an object with ``phys``."""
    if isinstance(x, ctypes.c_void_p):
        return x.value or 0
    return int(x)


def _window(cq) -> tuple[int, int]:
    w = getattr(cq, "_host_window", None)
    if w is None:
        w = cq._host_window = host_window(cq.device)
    return w


def host_to_phys(cq, addr: int) -> int:
    """The device physical address of host address ``addr`` (inside the device's host window)."""
    base, size = _window(cq)
    phys = addr - base
    if not 0 < phys < size:
        raise RuntimeUsageError(
            f"host address {addr:#x} is not device memory of the current VTA device {type(cq.device).__name__} "
            f"(window {base:#x}+{size:#x}); was the tensor allocated on another device or on the CPU?")
    return phys


def _dram(cq, x: Any) -> int:
    """A DRAM operand: a handle is a host data pointer, an int is already physical."""
    if isinstance(x, ctypes.c_void_p):
        return host_to_phys(cq, x.value or 0)
    return int(x)


def _key(handle: Any) -> Any:
    if not isinstance(handle, ctypes.c_void_p):
        return handle
    if not handle.value:
        raise RuntimeUsageError("uop kernel handle is NULL")
    slot = ctypes.c_void_p.from_address(handle.value)
    if not slot.value:
        slot.value = next(_kernel_ids)
    return ("static", slot.value)


def host_alloc(nbytes: int) -> int:
    """Device memory for an ext_dev tensor: returns its host address (the tensor's data pointer)."""
    cq = command_handle()
    phys = cq.device.alloc(max(int(nbytes), 1))
    base, _ = _window(cq)
    addr = base + phys
    _host_allocs[addr] = (cq.device, phys)
    return addr


def host_free(addr: int) -> None:
    entry = _host_allocs.pop(int(addr), None)
    if entry is None:
        raise RuntimeUsageError(f"free of host address {int(addr):#x}, which HostAlloc did not hand out")
    device, phys = entry
    device.free(phys)


class _DeviceConstants:
    """Device copies of constant host tensors (a compiled network's weights), made once per device.

    A Relax VM keeps its constants on its first device (the CPU); VTA's DMA needs them in device
    memory. An entry pins its source tensor, so the source's address cannot be reused by another
    tensor while the entry lives; the cache empties when the process's command queue changes, and
    the least recently used entries go when it holds more than ``budget`` bytes.
    """

    def __init__(self, budget: int = 512 << 20):
        self.budget = budget
        self.entries: dict = {}
        self.owner = None
        self.nbytes = 0

    def clear(self) -> None:
        self.entries.clear()
        self.nbytes = 0
        self.owner = None

    def get(self, src):
        import tvm
        cq = command_handle()
        if self.owner is None or self.owner() is not cq:
            self.clear()
            self.owner = weakref.ref(cq)
        key = (src.data_ptr(), tuple(src.shape), str(src.dtype))
        hit = self.entries.pop(key, None)
        if hit is None:
            dst = tvm.runtime.empty(src.shape, src.dtype, device=tvm.ext_dev(0))
            dst.copyfrom(src)
            size = src.numel() * tvm.runtime.DataType(str(src.dtype)).itemsize
            hit = (src, dst, size)
            self.nbytes += size
        self.entries[key] = hit
        while self.nbytes > self.budget and len(self.entries) > 1:
            old = next(iter(self.entries))
            self.nbytes -= self.entries.pop(old)[2]
        return hit[1]


device_constants = _DeviceConstants()


def release_device_buffers() -> None:
    """Free the device memory TVM holds for reuse: the VM's pooled ext_dev buffers (TVM's memory
    manager keeps freed buffers; after a device change they would point into the old device) and
    the device copies of constants."""
    import tvm
    device_constants.clear()
    clear = tvm.get_global_func("vm.builtin.memory_manager.clear", allow_missing=True)
    if clear is not None:
        clear()


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

    def load(src, off, xs, ys, st, xp0, yp0, xp1, yp1, sram, mt):
        q = cq()
        q.load_buffer_2d(_dram(q, src), off, xs, ys, st, xp0, yp0, xp1, yp1, sram, mt)

    def store(sram, mt, dst, off, xs, ys, st):
        q = cq()
        q.store_buffer_2d(sram, mt, _dram(q, dst), off, xs, ys, st)

    return {
        "BufferAlloc": lambda nbytes: cq().device.alloc(int(nbytes)),
        "BufferFree": lambda phys: cq().device.free(_addr(phys)),
        "BufferCopy": _buffer_copy,
        "LoadBuffer2D": load,
        "StoreBuffer2D": store,
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
        "HostAlloc": host_alloc,
        "HostFree": host_free,
        "DeviceConstant": device_constants.get,
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
