"""The VTA runtime: a command queue that turns API calls into instruction and uop streams for a device.

This is the original C runtime's API (spec 4.2-4.4): buffers, 2-D loads and stores, uop kernels
with their cache, dependency push/pop, and synchronize. The per-instruction work (the instruction
queue and its tokens, uop kernels, the UOP SRAM residency, automatic flushes) is done by the
runtime's C++ core (``runtime.cc``), which compiled code calls directly; this class is its Python
face, and owns what stays in Python: the device, buffers, copies, and running finished streams.
"""

from __future__ import annotations

import inspect
import sys
import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, TextIO

import numpy as np

from vta_hw.spec import INSN_BYTES, MAX_XFER, UOP_ELEM_BYTES, MemType, disassemble

from . import native
from .device import Device, host_window
from .errors import RuntimeUsageError
from .insn_queue import InsnQueue

DEBUG_DUMP_INSN = 1 << 1
DEBUG_DUMP_UOP = 1 << 2
DEBUG_SKIP_READ_BARRIER = 1 << 3
DEBUG_SKIP_WRITE_BARRIER = 1 << 4
DEBUG_FORCE_SERIAL = 1 << 5

#: Device memory that the host may copy from/to (kind_mask bits of VTABufferCopy).
COPY_DEVICE_SRC = 1 << 1
COPY_DEVICE_DST = 1 << 0

MODE_GEMM = 0
MODE_ALU = 1
#: Instructions the closing sequence of a flush may add (drain NOPs excluded); runtime.cc's kSyncReserve.
_SYNC_RESERVE = 6
#: kinds of kernel keys in the core: a compiled call site's static handle, a Python key, an integer handle
_STATIC, _PYTHON, _INT = 0, 1, 2


@dataclass(eq=False)
class DataBuffer:
    """Device memory owned by the runtime. ``phys`` is the device physical address."""

    phys: int
    nbytes: int

    def __int__(self) -> int:
        return self.phys


class CommandQueue:
    """Builds instruction and uop streams over one ``Device`` and runs them on ``synchronize``."""

    def __init__(self, device: Device, *, max_insns: int = MAX_XFER // INSN_BYTES,
                 uop_staging_bytes: int = 1 << 22, debug_flags: int = 0, debug_stream: TextIO | None = None,
                 stream_cache: bool = True, stream_cache_bytes: int = 256 << 20):
        self.device = device
        #: optional Device method run_stream(stream, count, insn_phys, uops, uop_phys, timeout): the same as
        #: write(uop_phys, uops) if uops, write(insn_phys, stream), run(insn_phys, count, timeout). Only the
        #: device's own: a proxy that wraps run and forwards the rest (__getattr__) must see every run.
        self._run_stream_at = device.run_stream if \
            inspect.getattr_static(device, "run_stream", None) is not None else None
        self.config = cfg = device.config
        self.isa = cfg.isa
        if max_insns < 4 * _SYNC_RESERVE:
            raise RuntimeUsageError(f"max_insns={max_insns} is too small to hold a synchronize sequence")
        self.max_insns = max_insns
        self.uop_capacity = uop_staging_bytes // UOP_ELEM_BYTES
        self.debug_stream = debug_stream
        self._uop_buf: DataBuffer | None = None
        self._insn_buf: DataBuffer | None = None
        self._pending_error: BaseException | None = None
        self._key_ids: dict[tuple[Hashable, Any], int] = {}
        self._key_of: dict[int, tuple[Hashable, Any]] = {}
        self.runs = 0
        f = self._f = _Functions.get()
        elem = [0] * 6   # DRAM bytes of an element, by memory type (an ACC_8BIT element is an OUT one)
        for mt, eb in ((MemType.UOP, cfg.UOP_ELEM_BYTES), (MemType.WGT, cfg.WGT_ELEM_BYTES),
                       (MemType.INP, cfg.INP_ELEM_BYTES), (MemType.ACC, cfg.ACC_ELEM_BYTES),
                       (MemType.OUT, cfg.OUT_ELEM_BYTES), (MemType.ACC_8BIT, cfg.OUT_ELEM_BYTES)):
            elem[mt] = eb
        me = weakref.ref(self)   # the core's callbacks must not keep the queue alive

        def run(stream, uops, count, timeout, flags):
            return me()._run_stream(bytes(stream), bytes(uops), int(count), float(timeout), int(flags))

        def alloc_uops(nbytes):
            return me()._alloc_uop_buffer(int(nbytes))

        def window():
            q = me()
            base, size = host_window(q.device)
            return [int(base), int(size), type(q.device).__name__]

        def write(text):
            print(str(text), end="", file=me().debug_stream or sys.stdout)

        self._h = f.new(*native.spec_tables(self.isa), [max_insns, self.uop_capacity, cfg.UOP_BUFF_DEPTH, *elem],
                        run, alloc_uops, window, write)
        self._finalizer = weakref.finalize(self, f.free, self._h)
        self.insn_queue = InsnQueue(self.isa, _handle=f.insns_of(self._h), _owner=self)
        self.debug_flags = debug_flags
        self._buffer_sizes: dict[int, int] = {}
        self._stream_cache_bytes = int(stream_cache_bytes)
        self.stream_cache = stream_cache

    # ------------------------------------------------------------------ the command-stream cache
    @property
    def stream_cache(self) -> bool:
        """Whether compiled kernels' streams are built once and replayed while their buffers do not change.

        A kernel compiled by the "vta" pipeline starts with ``StreamBegin`` (the compiler's InjectStreamCache):
        its call site, every buffer's address and size, its scalars and the debug flags are the key; if the
        queue is empty and the key was seen, the streams that call built then are handed to the device again
        (the same words, so the same results and device counters) and the host code's runtime calls are
        skipped. Freeing device memory through the runtime drops the streams that use it; turning the cache
        off empties it.
        """
        return self._stream_cache

    @stream_cache.setter
    def stream_cache(self, on: bool) -> None:
        self._stream_cache = bool(on)
        self._f.set_stream_cache(self._h, self._stream_cache, self._stream_cache_bytes)

    @property
    def stream_stats(self) -> dict[str, int]:
        """The command-stream cache's counts: ``replays`` (kernel calls served from the cache), ``builds``
        (calls whose streams were recorded), ``uncached`` (calls that found the queue busy, the cache off or
        DEBUG_DUMP_UOP set), ``dropped`` (entries forgotten because their memory was freed or the cache was
        cleared), ``evicted`` (least recently used entries over the size budget), ``entries``, ``bytes``."""
        names = ("replays", "builds", "uncached", "dropped", "evicted", "entries", "bytes")
        return dict(zip(names, (int(v) for v in self._f.stream_stats(self._h))))

    def _freed(self, phys: int, nbytes: int) -> None:
        """Device memory [phys, phys+nbytes) was freed: drop the cached streams that use it."""
        self._f.stream_invalidate(self._h, int(phys), int(nbytes))

    @property
    def debug_flags(self) -> int:
        return self._debug_flags

    @debug_flags.setter
    def debug_flags(self, flags: int) -> None:
        self._debug_flags = int(flags)
        self._f.set_debug(self._h, self._debug_flags)

    @property
    def handle(self) -> int:
        """The core's queue (what ``vta.runtime.native.SetCurrent`` takes)."""
        return self._h

    def _call(self, fn, *args):
        """Call the core; an exception raised by a device while the core ran a stream comes out as itself."""
        self._pending_error = None
        try:
            return fn(*args)
        except Exception:
            exc, self._pending_error = self._pending_error, None
            if exc is not None:
                raise exc.with_traceback(exc.__traceback__) from None
            raise

    # ------------------------------------------------------------------ buffers
    def buffer_alloc(self, nbytes: int) -> DataBuffer:
        buf = DataBuffer(self.device.alloc(nbytes), int(nbytes))
        self._buffer_sizes[buf.phys] = buf.nbytes
        return buf

    def buffer_free(self, buf: DataBuffer | int) -> None:
        phys = int(buf)
        nbytes = self._buffer_sizes.pop(phys, buf.nbytes if isinstance(buf, DataBuffer) else 1)
        self.device.free(phys)
        self._freed(phys, nbytes)

    def buffer_write(self, buf: DataBuffer | int, data: bytes | np.ndarray, offset: int = 0) -> None:
        self.device.write(int(buf) + offset, data)

    def buffer_read(self, buf: DataBuffer | int, nbytes: int, offset: int = 0) -> bytes:
        return self.device.read(int(buf) + offset, nbytes)

    def buffer_copy(self, src: Any, src_offset: int, dst: Any, dst_offset: int, nbytes: int,
                    kind_mask: int | None = None) -> None:
        """Copy between host (numpy arrays, bytes) and device buffers; ``kind_mask`` as in VTABufferCopy.

        Without ``kind_mask`` the sides are told apart by type: DataBuffer or int is device memory.
        A host numpy array's offsets count bytes of its elements in C (row-major) order, whatever its
        strides; other host buffers must be contiguous and, as destinations, writable.
        """
        def is_dev(x):
            return isinstance(x, (DataBuffer, int, np.integer))
        if kind_mask is None:
            kind_mask = (COPY_DEVICE_SRC if is_dev(src) else 0) | (COPY_DEVICE_DST if is_dev(dst) else 0)
        src_dev, dst_dev = bool(kind_mask & COPY_DEVICE_SRC), bool(kind_mask & COPY_DEVICE_DST)
        if src_dev:
            data = self.device.read(int(src) + src_offset, nbytes)
        else:
            data = _copy_from_host(src, src_offset, nbytes)
        if dst_dev:
            self.device.write(int(dst) + dst_offset, data)
        else:
            _copy_to_host(dst, dst_offset, data)

    def write_barrier(self, *_: Any) -> None:
        """Make CPU writes visible to the device: a no-op, device memory is coherent (VTA_COHERENT_ACCESSES)."""

    def read_barrier(self, *_: Any) -> None:
        """Make device writes visible to the CPU: a no-op, device memory is coherent."""

    # ------------------------------------------------------------------ DMA
    def load_buffer_2d(self, src: DataBuffer | int, src_elem_offset: int, x_size: int, y_size: int, x_stride: int,
                       x_pad_before: int, y_pad_before: int, x_pad_after: int, y_pad_after: int,
                       dst_sram_index: int, dst_memory_type: int) -> None:
        """Append a 2-D LOAD of ``y_size`` rows of ``x_size`` elements into an on-chip buffer, zero-padded."""
        self._call(self._f.load, self._h, int(src), int(src_elem_offset), int(x_size), int(y_size), int(x_stride),
                   int(x_pad_before), int(y_pad_before), int(x_pad_after), int(y_pad_after), int(dst_sram_index),
                   int(dst_memory_type))

    def store_buffer_2d(self, src_sram_index: int, src_memory_type: int, dst: DataBuffer | int,
                        dst_elem_offset: int, x_size: int, y_size: int, x_stride: int) -> None:
        """Append a 2-D STORE from the OUT buffer to device memory."""
        self._call(self._f.store, self._h, int(src_sram_index), int(src_memory_type), int(dst), int(dst_elem_offset),
                   int(x_size), int(y_size), int(x_stride))

    # ------------------------------------------------------------------ uop kernels
    def _kernel_key(self, key: Hashable, signature: Any) -> tuple[int, int, int]:
        kkey = (key, signature)
        kid = self._key_ids.get(kkey)
        if kid is None:
            kid = self._key_ids[kkey] = len(self._key_ids) + 1
            self._key_of[kid] = kkey
            self._f.name_key(self._h, _PYTHON, kid, 0, repr(key), repr(signature))
        return _PYTHON, kid, 0

    def uop_kernel_begin(self, key: Hashable, signature: Any = None) -> bool:
        """Start recording the kernel for (key, signature); False if it is cached (nothing to record)."""
        return bool(self._call(self._f.kernel_begin, self._h, *self._kernel_key(key, signature)))

    def uop_loop_begin(self, extent: int, dst_factor: int, src_factor: int, wgt_factor: int) -> None:
        self._call(self._f.loop_begin, self._h, int(extent), int(dst_factor), int(src_factor), int(wgt_factor))

    def uop_loop_end(self) -> None:
        self._call(self._f.loop_end, self._h)

    def uop_push(self, mode: int, reset_out: int, dst_index: int, src_index: int, wgt_index: int,
                 opcode: int = 0, use_imm: int = 0, imm: int = 0) -> None:
        self._call(self._f.uop_push, self._h, int(mode), int(reset_out), int(dst_index), int(src_index),
                   int(wgt_index), int(opcode), int(use_imm), int(imm))

    def _push(self, key: Hashable, finit: Callable[[Any], Any] | None, signature: Any, mode: int) -> None:
        k = self._kernel_key(key, signature)
        f = self._f
        if finit is not None and not f.is_recording(self._h, *k) and not f.is_cached(self._h, *k):
            self._call(f.kernel_begin, self._h, *k)
            try:
                finit(signature)
            except BaseException:
                f.abort_recording(self._h)
                raise
        self._call(f.push_kernel, self._h, *k, mode)

    def push_gemm_op(self, key: Hashable, finit: Callable[[Any], Any] | None = None, signature: Any = None) -> None:
        """Append a GEMM running the uop kernel cached under (key, signature), recording it with finit if new."""
        self._push(key, finit, signature, MODE_GEMM)

    def push_alu_op(self, key: Hashable, finit: Callable[[Any], Any] | None = None, signature: Any = None) -> None:
        """Append an ALU op running the uop kernel cached under (key, signature), recording it with finit if new."""
        self._push(key, finit, signature, MODE_ALU)

    @property
    def kernels(self) -> list[tuple[Hashable, Any]]:
        """The cached kernels' keys (key, signature), in the order they were recorded; compiled call sites
        appear as (("static", id), signature)."""
        flat = [int(v) for v in self._f.kernel_keys(self._h)]
        out = []
        for kind, kid, sig in zip(flat[0::3], flat[1::3], flat[2::3]):
            out.append(self._key_of[kid] if kind == _PYTHON else (("static", kid), sig) if kind == _STATIC
                       else (kid, sig))
        return out

    def _alloc_uop_buffer(self, nbytes: int) -> int:
        if self._uop_buf is None:
            self._uop_buf = self.buffer_alloc(nbytes)
        return self._uop_buf.phys

    # ------------------------------------------------------------------ dependencies
    def dep_push(self, from_qid: int, to_qid: int) -> None:
        """Push a token from stage ``from_qid`` to stage ``to_qid`` (1 load, 2 compute, 3 store)."""
        self._call(self._f.dep_push, self._h, int(from_qid), int(to_qid))

    def dep_pop(self, from_qid: int, to_qid: int) -> None:
        """Make the next instruction of stage ``to_qid`` wait for a token from ``from_qid``."""
        self._call(self._f.dep_pop, self._h, int(from_qid), int(to_qid))

    # ------------------------------------------------------------------ streams
    def set_debug_mode(self, flags: int) -> None:
        self.debug_flags = flags

    def synchronize(self, timeout: float | None = None) -> None:
        """Close the stream (FINISH), copy streams to device memory, run, and reset the queues."""
        self._call(self._f.synchronize, self._h, -1.0 if timeout is None else float(timeout))

    def _run_stream(self, stream: bytes, uops: bytes, count: int, timeout: float, flags: int) -> None:
        """Called by the core with a finished stream (and the uop kernels it loads): run it on the device."""
        try:
            if flags & DEBUG_DUMP_INSN:
                out = self.debug_stream or sys.stdout
                print(f"VTA instruction stream: {count} instructions", file=out)
                for line in disassemble(stream, self.isa):
                    print(line, file=out)
            if len(stream) > MAX_XFER:
                raise RuntimeUsageError(f"instruction stream of {len(stream)} bytes exceeds the {MAX_XFER}-byte "
                                        "limit")
            if self._insn_buf is None or self._insn_buf.nbytes < len(stream):
                if self._insn_buf is not None:
                    self.buffer_free(self._insn_buf)
                self._insn_buf = self.buffer_alloc(max(len(stream), 1 << 16))
            uop_phys = self._uop_buf.phys if uops else 0
            try:
                if self._run_stream_at is not None:   # a device that takes write + write + run in one call
                    self._run_stream_at(stream, count, self._insn_buf.phys, uops, uop_phys,
                                        None if timeout < 0 else timeout)
                else:
                    if uops:
                        self.device.write(uop_phys, np.frombuffer(uops, np.uint32))
                    self.device.write(self._insn_buf.phys, stream)
                    self.device.run(self._insn_buf.phys, count, None if timeout < 0 else timeout)
            finally:
                self.runs += 1
        except BaseException as exc:   # handed back to the caller by _call (or by tvm_ffi, as its class)
            self._pending_error = exc
            raise

    def close(self) -> None:
        """Free the runtime's device buffers (the cached streams load uops from one of them: they go too)."""
        self._f.stream_clear(self._h)
        for buf in (self._uop_buf, self._insn_buf):
            if buf is not None:
                self.buffer_free(buf)
        self._uop_buf = self._insn_buf = None


class _Functions:
    """The core's CommandQueue functions, looked up once."""

    _instance: _Functions | None = None

    def __init__(self):
        f = native.func
        self.new, self.free, self.insns_of = f("NewQueue"), f("FreeQueue"), f("InsnsOf")
        self.load, self.store = f("Load"), f("Store")
        self.kernel_begin, self.is_cached, self.is_recording = f("KernelBegin"), f("IsCached"), f("IsRecording")
        self.abort_recording, self.name_key, self.kernel_keys = f("AbortRecording"), f("NameKey"), f("KernelKeys")
        self.loop_begin, self.loop_end, self.uop_push = f("LoopBegin"), f("LoopEnd"), f("UopPush")
        self.push_kernel, self.dep_push, self.dep_pop = f("PushKernel"), f("DepPush"), f("DepPop")
        self.synchronize, self.set_debug = f("Synchronize"), f("SetDebug")
        self.stream_stats, self.stream_invalidate = f("StreamStats"), f("StreamInvalidate")
        self.stream_clear, self.set_stream_cache = f("StreamClear"), f("SetStreamCache")

    @classmethod
    def get(cls) -> _Functions:
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance


def _copy_from_host(src: Any, offset: int, nbytes: int) -> bytes:
    """``nbytes`` from byte ``offset`` of a host buffer (a numpy array in C order, whatever its strides)."""
    try:
        view = memoryview(np.ascontiguousarray(src) if isinstance(src, np.ndarray) else src)
    except TypeError:
        raise RuntimeUsageError(f"buffer_copy: a host source of type {type(src).__name__} is not a buffer") from None
    if not view.c_contiguous:
        raise RuntimeUsageError(f"buffer_copy: the host source ({type(src).__name__}, strides {view.strides}) is not "
                                "contiguous; pass a numpy array, whose strides the copy follows")
    data = bytes(view.cast("B")[offset:offset + nbytes])
    if len(data) != nbytes:
        raise RuntimeUsageError(f"buffer_copy: host source holds only {len(data)} of {nbytes} bytes")
    return data


def _copy_to_host(dst: Any, offset: int, data: bytes) -> None:
    """Write ``data`` at byte ``offset`` of a host buffer, or refuse it saying why."""
    nbytes = len(data)
    if isinstance(dst, np.ndarray):
        if not dst.flags.writeable:
            raise RuntimeUsageError(f"buffer_copy: the host destination array ({dst.dtype}, shape {dst.shape}) "
                                    "is read-only")
        # a non-contiguous array (a slice, a transpose) is written through a C-ordered copy
        flat = dst if dst.flags.c_contiguous else np.ascontiguousarray(dst)
        view = flat.reshape(-1).view(np.uint8)
        if view.size < offset + nbytes:
            raise RuntimeUsageError(f"buffer_copy: host destination holds only {view.size} bytes, "
                                    f"{offset + nbytes} needed")
        view[offset:offset + nbytes] = np.frombuffer(data, np.uint8)
        if flat is not dst:
            dst[...] = flat
        return
    try:
        view = memoryview(dst)
    except TypeError:
        raise RuntimeUsageError(f"buffer_copy: a host destination of type {type(dst).__name__} is not a buffer "
                                "(use a numpy array or a bytearray)") from None
    if view.readonly:
        raise RuntimeUsageError(f"buffer_copy: the host destination ({type(dst).__name__}) is read-only")
    if not view.c_contiguous:
        raise RuntimeUsageError(f"buffer_copy: the host destination ({type(dst).__name__}, strides {view.strides}) "
                                "is not contiguous; pass a numpy array, whose strides the copy follows")
    view = view.cast("B")
    if len(view) < offset + nbytes:
        raise RuntimeUsageError(f"buffer_copy: host destination holds only {len(view)} bytes, "
                                f"{offset + nbytes} needed")
    view[offset:offset + nbytes] = data
