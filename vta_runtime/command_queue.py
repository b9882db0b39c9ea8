"""The VTA runtime: a command queue that turns API calls into instruction and uop streams for a device.

This is the Python form of the original C runtime (spec 4.2-4.4): buffers, 2-D loads and stores,
uop kernels with their cache, dependency push/pop, and synchronize.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, TextIO

import numpy as np

from vta_hw.spec import INSN_BYTES, MAX_XFER, UOP_ELEM_BYTES, MemType, Opcode, Stage, disassemble
from vta_hw.spec.isa import QUEUE_ENDS

from .device import Device
from .errors import RuntimeUsageError
from .insn_queue import InsnQueue
from .uop import MODE_ALU, MODE_GEMM, UopKernel, UopResidency

DEBUG_DUMP_INSN = 1 << 1
DEBUG_DUMP_UOP = 1 << 2
DEBUG_SKIP_READ_BARRIER = 1 << 3
DEBUG_SKIP_WRITE_BARRIER = 1 << 4
DEBUG_FORCE_SERIAL = 1 << 5

#: Device memory that the host may copy from/to (kind_mask bits of VTABufferCopy).
COPY_DEVICE_SRC = 1 << 1
COPY_DEVICE_DST = 1 << 0

_LOADABLE = {MemType.INP: "INP", MemType.WGT: "WGT", MemType.ACC: "ACC", MemType.UOP: "UOP"}
#: Instructions the closing sequence of a flush may add (drain NOPs excluded).
_SYNC_RESERVE = 6


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
                 uop_staging_bytes: int = 1 << 22, debug_flags: int = 0, debug_stream: TextIO | None = None):
        self.device = device
        self.config = cfg = device.config
        self.isa = cfg.isa
        if max_insns < 4 * _SYNC_RESERVE:
            raise RuntimeUsageError(f"max_insns={max_insns} is too small to hold a synchronize sequence")
        self.max_insns = max_insns
        self.uop_capacity = uop_staging_bytes // UOP_ELEM_BYTES
        self.debug_flags = debug_flags
        self.debug_stream = debug_stream
        self.insn_queue = InsnQueue(self.isa)
        self.residency = UopResidency(cfg.UOP_BUFF_DEPTH)
        self.kernels: dict[tuple[Hashable, Any], UopKernel] = {}
        self._recording: tuple[tuple[Hashable, Any], UopKernel] | None = None
        self._staging: list[np.ndarray] = []
        self._staged_uops = 0
        self._uop_buf: DataBuffer | None = None
        self._insn_buf: DataBuffer | None = None
        self._elem_bytes = {MemType.INP: cfg.INP_ELEM_BYTES, MemType.WGT: cfg.WGT_ELEM_BYTES,
                            MemType.ACC: cfg.ACC_ELEM_BYTES, MemType.OUT: cfg.OUT_ELEM_BYTES,
                            MemType.UOP: cfg.UOP_ELEM_BYTES}
        self._carry: Counter = Counter()   # tokens re-pushed after an automatic flush
        self.runs = 0

    # ------------------------------------------------------------------ buffers
    def buffer_alloc(self, nbytes: int) -> DataBuffer:
        return DataBuffer(self.device.alloc(nbytes), int(nbytes))

    def buffer_free(self, buf: DataBuffer | int) -> None:
        self.device.free(int(buf))

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
    def _dram_base(self, buf: DataBuffer | int, elem_offset: int, memory_type: int, what: str) -> int:
        phys = int(buf)
        eb = self._elem_bytes[memory_type]
        if phys % eb:
            raise RuntimeUsageError(f"{what}: buffer address {phys:#x} is not aligned to the {eb}-byte element")
        return phys // eb + int(elem_offset)

    def load_buffer_2d(self, src: DataBuffer | int, src_elem_offset: int, x_size: int, y_size: int, x_stride: int,
                       x_pad_before: int, y_pad_before: int, x_pad_after: int, y_pad_after: int,
                       dst_sram_index: int, dst_memory_type: int) -> None:
        """Append a 2-D LOAD of ``y_size`` rows of ``x_size`` elements into an on-chip buffer, zero-padded."""
        if dst_memory_type not in _LOADABLE:
            raise RuntimeUsageError(
                f"load_buffer_2d: memory type {dst_memory_type} cannot be loaded; use INP(2), WGT(1), ACC(3) "
                "or UOP(0) (ACC_8BIT is not supported, see README)")
        self._reserve(1)
        self.insn_queue.mem(
            Opcode.LOAD, int(dst_memory_type), sram_base=int(dst_sram_index),
            dram_base=self._dram_base(src, src_elem_offset, dst_memory_type, "load_buffer_2d"),
            y_size=int(y_size), x_size=int(x_size), x_stride=int(x_stride),
            y_pad_0=int(y_pad_before), y_pad_1=int(y_pad_after), x_pad_0=int(x_pad_before),
            x_pad_1=int(x_pad_after))

    def store_buffer_2d(self, src_sram_index: int, src_memory_type: int, dst: DataBuffer | int,
                        dst_elem_offset: int, x_size: int, y_size: int, x_stride: int) -> None:
        """Append a 2-D STORE from the OUT buffer to device memory."""
        if src_memory_type != MemType.OUT:
            raise RuntimeUsageError(f"store_buffer_2d: only the OUT buffer (4) can be stored, got {src_memory_type}")
        self._reserve(1)
        self.insn_queue.mem(
            Opcode.STORE, MemType.OUT, sram_base=int(src_sram_index),
            dram_base=self._dram_base(dst, dst_elem_offset, MemType.OUT, "store_buffer_2d"),
            y_size=int(y_size), x_size=int(x_size), x_stride=int(x_stride))

    # ------------------------------------------------------------------ uop kernels
    def uop_kernel_begin(self, key: Hashable, signature: Any = None) -> bool:
        """Start recording the kernel for (key, signature); False if it is cached (nothing to record)."""
        if self._recording is not None:
            raise RuntimeUsageError("uop_kernel_begin while another uop kernel is being recorded")
        kkey = (key, signature)
        if kkey in self.kernels:
            return False
        self._recording = (kkey, UopKernel())
        return True

    def _kernel_recording(self) -> UopKernel:
        if self._recording is None:
            raise RuntimeUsageError("uop_push/uop_loop_* outside a uop kernel (call push_gemm_op/push_alu_op with "
                                    "a kernel function, or uop_kernel_begin first)")
        return self._recording[1]

    def uop_loop_begin(self, extent: int, dst_factor: int, src_factor: int, wgt_factor: int) -> None:
        self._kernel_recording().loop_begin(extent, dst_factor, src_factor, wgt_factor)

    def uop_loop_end(self) -> None:
        self._kernel_recording().loop_end()

    def uop_push(self, mode: int, reset_out: int, dst_index: int, src_index: int, wgt_index: int,
                 opcode: int = 0, use_imm: int = 0, imm: int = 0) -> None:
        self._kernel_recording().push(mode, reset_out, dst_index, src_index, wgt_index, opcode, use_imm, imm)

    def _get_kernel(self, key: Hashable, finit: Callable[[Any], Any] | None, signature: Any, mode: int) -> UopKernel:
        kkey = (key, signature)
        if self._recording is not None and self._recording[0] == kkey:
            kernel = self._recording[1]
            self._recording = None
            kernel.finish(self.isa)
            self.kernels[kkey] = kernel
        elif kkey in self.kernels:
            kernel = self.kernels[kkey]
        elif finit is not None:
            self.uop_kernel_begin(key, signature)
            try:
                finit(signature)
            except BaseException:
                self._recording = None
                raise
            return self._get_kernel(key, None, signature, mode)
        else:
            raise RuntimeUsageError(f"uop kernel {key!r} (signature {signature!r}) is not cached and no kernel "
                                    "function was given to record it")
        if kernel.mode != mode:
            want = "GEMM" if mode == MODE_GEMM else "ALU"
            raise RuntimeUsageError(f"uop kernel {key!r} was recorded in mode {kernel.mode} but pushed as {want}")
        if self.debug_flags & DEBUG_DUMP_UOP:
            self._dump_kernel(key, kernel)
        return kernel

    def push_gemm_op(self, key: Hashable, finit: Callable[[Any], Any] | None = None, signature: Any = None) -> None:
        """Append a GEMM running the uop kernel cached under (key, signature), recording it with finit if new."""
        self._push_kernel(self._get_kernel(key, finit, signature, MODE_GEMM), Opcode.GEMM)

    def push_alu_op(self, key: Hashable, finit: Callable[[Any], Any] | None = None, signature: Any = None) -> None:
        """Append an ALU op running the uop kernel cached under (key, signature), recording it with finit if new."""
        self._push_kernel(self._get_kernel(key, finit, signature, MODE_ALU), Opcode.ALU)

    def _push_kernel(self, kernel: UopKernel, opcode: int) -> None:
        if self._staged_uops + len(kernel) > self.uop_capacity:
            self._auto_flush()
        self._reserve(2)
        if self.residency.place(kernel):
            buf = self._uop_staging()
            self.insn_queue.mem(Opcode.LOAD, MemType.UOP, sram_base=kernel.sram_begin,
                                dram_base=buf.phys // UOP_ELEM_BYTES + self._staged_uops,
                                y_size=1, x_size=len(kernel), x_stride=len(kernel))
            self._staging.append(kernel.words)
            self._staged_uops += len(kernel)
        fields = {"opcode": opcode, "reset_reg": kernel.reset, "uop_bgn": kernel.sram_begin,
                  "uop_end": kernel.sram_end, **kernel.loop_fields()}
        if opcode == Opcode.ALU:
            fields.update(alu_opcode=kernel.opcode, use_imm=kernel.use_imm, imm=kernel.imm)
        self.insn_queue.create(Stage.COMPUTE, fields)

    def _uop_staging(self) -> DataBuffer:
        if self._uop_buf is None:
            self._uop_buf = self.buffer_alloc(self.uop_capacity * UOP_ELEM_BYTES)
        return self._uop_buf

    # ------------------------------------------------------------------ dependencies
    def dep_push(self, from_qid: int, to_qid: int) -> None:
        """Push a token from stage ``from_qid`` to stage ``to_qid`` (1 load, 2 compute, 3 store)."""
        self._reserve(1)
        self._check_qids("dep_push", from_qid, to_qid)
        self.insn_queue.dep_push(from_qid, to_qid)

    def dep_pop(self, from_qid: int, to_qid: int) -> None:
        """Make the next instruction of stage ``to_qid`` wait for a token from ``from_qid``."""
        self._reserve(1)
        self._check_qids("dep_pop", from_qid, to_qid)
        self.insn_queue.dep_pop(from_qid, to_qid)

    @staticmethod
    def _check_qids(what: str, a: int, b: int) -> None:
        if (int(a), int(b)) not in QUEUE_ENDS.values():
            raise RuntimeUsageError(f"{what}({a}, {b}): there is no dependency queue between these stages "
                                    "(1 load, 2 compute, 3 store; load and store are not connected)")

    # ------------------------------------------------------------------ streams
    def set_debug_mode(self, flags: int) -> None:
        self.debug_flags = int(flags)

    def _reserve(self, n: int) -> None:
        in_flight = sum(v for v in self.insn_queue.token_balance().values() if v > 0)
        if len(self.insn_queue) + n + _SYNC_RESERVE + in_flight > self.max_insns:
            self._auto_flush()

    def _auto_flush(self) -> None:
        """Run what is queued so far; tokens still in flight are drained now and re-pushed afterwards."""
        carry = self._settle_tokens("automatic flush impossible")
        self.synchronize(_settled=True)
        for qname, n in carry.items():
            producer, consumer = QUEUE_ENDS[qname]
            for _ in range(n):
                self.insn_queue.dep_push(producer, consumer)

    def _settle_tokens(self, what: str) -> Counter:
        """Commit pending pops, refuse a stream that pops more than it pushes, and pop (drain) every
        token still in flight so that the run ends balanced; returns what was drained."""
        q = self.insn_queue
        for st in (Stage.LOAD, Stage.COMPUTE, Stage.STORE):
            q.commit_pending_pop(st)
        balance = q.token_balance()
        short = {k: -v for k, v in balance.items() if v < 0}
        if short:
            raise RuntimeUsageError(
                f"{what}: the stream pops more tokens than it pushes, it would deadlock "
                f"({', '.join(f'{k} short by {v}' for k, v in short.items())})")
        for qname, n in balance.items():
            producer, consumer = QUEUE_ENDS[qname]
            for _ in range(n):
                q.dep_pop(producer, consumer)
                q.commit_pending_pop(consumer)
        return balance

    def synchronize(self, timeout: float | None = None, *, _settled: bool = False) -> None:
        """Close the stream (FINISH), copy streams to device memory, run, and reset the queues."""
        q = self.insn_queue
        if self._recording is not None:
            raise RuntimeUsageError("synchronize while a uop kernel is being recorded")
        if self.debug_flags & DEBUG_FORCE_SERIAL:
            q.rewrite_force_serial()
        else:
            if not _settled:
                self._settle_tokens("synchronize")
            q.dep_push(Stage.STORE, Stage.COMPUTE)
            q.dep_push(Stage.LOAD, Stage.COMPUTE)
            q.dep_pop(Stage.STORE, Stage.COMPUTE)
            q.dep_pop(Stage.LOAD, Stage.COMPUTE)
            q.commit_pending_pop(Stage.COMPUTE)
        q.create(Stage.COMPUTE, {"opcode": Opcode.FINISH})
        stream = q.encode()
        if self.debug_flags & DEBUG_DUMP_INSN:
            out = self.debug_stream or sys.stdout
            print(f"VTA instruction stream: {len(q)} instructions", file=out)
            for line in disassemble(stream, self.isa):
                print(line, file=out)
        if len(stream) > MAX_XFER:
            raise RuntimeUsageError(f"instruction stream of {len(stream)} bytes exceeds the {MAX_XFER}-byte limit")
        if self._staging:
            self.device.write(self._uop_staging().phys, np.concatenate(self._staging))
        if self._insn_buf is None or self._insn_buf.nbytes < len(stream):
            if self._insn_buf is not None:
                self.buffer_free(self._insn_buf)
            self._insn_buf = self.buffer_alloc(max(len(stream), 1 << 16))
        self.device.write(self._insn_buf.phys, stream)
        try:
            self.device.run(self._insn_buf.phys, len(q), timeout)
        finally:
            self.runs += 1
            q.reset()
            self.residency.reset()
            self._staging.clear()
            self._staged_uops = 0

    def _dump_kernel(self, key: Hashable, k: UopKernel) -> None:
        out = self.debug_stream or sys.stdout
        kind = "GEMM" if k.mode == MODE_GEMM else f"ALU op={k.opcode} use_imm={k.use_imm} imm={k.imm}"
        print(f"uop kernel {key!r}: {kind} reset={k.reset} loops={k.loops} ({len(k)} uops)", file=out)
        for n, (d, s, w) in enumerate(k.uops):
            print(f"  uop {n:4d}: dst={d} src={s} wgt={w}", file=out)

    def close(self) -> None:
        """Free the runtime's device buffers."""
        for buf in (self._uop_buf, self._insn_buf):
            if buf is not None:
                self.buffer_free(buf)
        self._uop_buf = self._insn_buf = None


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
