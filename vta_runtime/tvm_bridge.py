"""The runtime API as TVM global functions, so compiled code reaches it through ``call_packed``.

Every function acts on the process-wide command queue (``vta_runtime.command_handle()``). The
ones compiled code calls once per instruction (loads, stores, uop kernels, dependency tokens,
synchronize, debug mode) are registered by the runtime's C++ core (``runtime.cc``) and run there
without entering Python, and so are those a compiled network calls per inference (``StreamBegin`` /
``StreamEnd`` of the command-stream cache, ``TensorCopy``, ``DeviceConstant``); the rest (buffers,
copies, ``HostAlloc``/``HostFree``, shutdown) are the Python functions below. Until the core is loaded
(with the first command queue), Python stand-ins hold its names (``DeviceConstant``: the same cache in
Python). A Relax VM looks its functions up when it is created, so one created before the first command
queue keeps the stand-ins (correct, slower). DRAM buffers are passed either as physical addresses (ints) or as host
data pointers (opaque handles, such as the data pointer of an ``ext_dev`` tensor), which are
translated to physical addresses through the device's host window
(``vta_runtime.device.host_window``). Kernel handles are per-call-site static handles
(``tvm_static_handle``): the runtime writes a kernel id into the slot on first use, as the
original libvta did, so a slot of a freed module that is reused by a new module starts empty
and never finds a stale kernel.
"""

from __future__ import annotations

import ctypes
import weakref
from typing import Any

from . import command_handle, native, shutdown
from .device import host_window
from .errors import RuntimeUsageError

PREFIX = "vta.runtime."
#: registered by runtime.cc when the core is loaded
NATIVE = ("LoadBuffer2D", "StoreBuffer2D", "UopKernelBegin", "UopLoopBegin", "UopLoopEnd", "UopPush", "PushGEMMOp",
          "PushALUOp", "DepPush", "DepPop", "Synchronize", "SetDebugMode")
#: more of the core's entry points, which only compiled networks call: the command-stream cache's (emitted by the
#: compiler's InjectStreamCache) and the copy between the CPU and device memory (graph.emit)
NATIVE_EXTRA = ("StreamBegin", "StreamEnd", "TensorCopy")
_registered = False
#: host address -> (device, physical address) of memory handed out by HostAlloc
_host_allocs: dict[int, tuple[Any, int, int]] = {}
#: physical address -> bytes of memory handed out by BufferAlloc
_buffer_allocs: dict[int, int] = {}


def _addr(x: Any) -> int:
    """An address from an int, a ctypes pointer or an object with ``phys``."""
    if isinstance(x, ctypes.c_void_p):
        return x.value or 0
    return int(x)


def host_alloc(nbytes: int) -> int:
    """Device memory for an ext_dev tensor: returns its host address (the tensor's data pointer)."""
    cq = command_handle()
    phys = cq.device.alloc(max(int(nbytes), 1))
    base, _ = host_window(cq.device)
    addr = base + phys
    _host_allocs[addr] = (cq.device, phys, max(int(nbytes), 1))
    return addr


def host_free(addr: int) -> None:
    entry = _host_allocs.pop(int(addr), None)
    if entry is None:
        raise RuntimeUsageError(f"free of host address {int(addr):#x}, which HostAlloc did not hand out")
    device, phys, nbytes = entry
    device.free(phys)
    _freed(device, phys, nbytes)


def _freed(device, phys: int, nbytes: int) -> None:
    """Tell the command queue of ``device`` (if it is the current one) that its memory was freed."""
    from . import _command_queue as cq
    if cq is not None and cq.device is device:
        cq._freed(phys, nbytes)


def _buffer_alloc(nbytes):
    cq = command_handle()
    phys = cq.device.alloc(int(nbytes))
    _buffer_allocs[phys] = int(nbytes)
    return phys


def _buffer_free(phys):
    cq = command_handle()
    phys = _addr(phys)
    cq.device.free(phys)
    _freed(cq.device, phys, _buffer_allocs.pop(phys, 1))


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


def _make_device_constant(src):
    """A device copy of ``src`` (for the core's DeviceConstant cache, which keeps it)."""
    import tvm
    dst = tvm.runtime.empty(src.shape, src.dtype, device=tvm.ext_dev(0))
    dst.copyfrom(src)
    return dst


def release_device_buffers() -> None:
    """Free the device memory TVM holds for reuse: the VM's pooled ext_dev buffers (TVM's memory
    manager keeps freed buffers; after a device change they would point into the old device), the
    device copies of constants and the ext_dev plugin's spare workspaces."""
    import tvm
    device_constants.clear()
    if native.loaded():
        native.func("ClearDeviceConstants")()
    release = tvm.get_global_func("vta.ext_dev.ReleaseWorkspaces", allow_missing=True)
    if release is not None:     # the ext_dev plugin's spare workspaces (the plugin is loaded on first use)
        release()
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


def _python_functions() -> dict[str, Any]:
    funcs = {
        "BufferAlloc": _buffer_alloc,
        "BufferFree": _buffer_free,
        "BufferCopy": _buffer_copy,
        "RuntimeShutdown": shutdown,
        "HostAlloc": host_alloc,
        "HostFree": host_free,
    }
    if not native.loaded():     # the core's DeviceConstant (the same cache, in C++) replaces this one
        funcs["DeviceConstant"] = device_constants.get
    return funcs


def _stand_in(name: str):
    """Until the C++ core is loaded: open the command queue (which loads the core; its function then
    replaces this one) and call the core's function."""
    def call(*args):
        import tvm_ffi
        command_handle()
        return tvm_ffi.get_global_func(PREFIX + name)(*args)
    return call


def register(override: bool = True) -> list[str]:
    """Register every entry point as ``vta.runtime.<Name>``; returns the names. Safe to call twice.
    Builds nothing: the C++ core is loaded with the first command queue and replaces the stand-ins
    registered here for its functions."""
    global _registered
    import tvm_ffi

    if not _registered or override:
        for name, fn in _python_functions().items():
            tvm_ffi.register_global_func(PREFIX + name, fn, override=True)
        if not native.loaded():
            for name in NATIVE + NATIVE_EXTRA:
                tvm_ffi.register_global_func(PREFIX + name, _stand_in(name), override=True)
        # the core calls these: when compiled code runs before any queue was opened; for a constant's device copy
        tvm_ffi.register_global_func(native.PREFIX + "OpenCommandHandle", _open_command_handle, override=True)
        tvm_ffi.register_global_func(native.PREFIX + "MakeDeviceConstant", _make_device_constant, override=True)
    _registered = True
    order = ["BufferAlloc", "BufferFree", "BufferCopy", *NATIVE, "RuntimeShutdown", "HostAlloc", "HostFree",
             "DeviceConstant"]
    return [PREFIX + n for n in order]


def _open_command_handle() -> None:
    command_handle()
