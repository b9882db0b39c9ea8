"""Build (once, cached) and load fsim's C++ engine (``fsim_engine.cc``), and call it through ctypes.

The library is built by ``vta_runtime.cxx`` (system C++ compiler, ``-O3 -march=native``, cached
under ``build/vta_fsim/<hash>/``). Everything the engine needs from the ISA (field positions,
buffer geometry, the token-queue table) is passed from ``vta_hw.spec`` when an ``Engine`` is
created, so one library serves every config; the enum values are -D defines.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from pathlib import Path

import numpy as np

from vta_hw.spec import TOKEN_QUEUES, Config, MemType, Stage, token_pops, token_pushes
from vta_runtime import cxx
from vta_runtime.errors import DeviceError

SOURCE = Path(__file__).with_name("fsim_engine.cc")

# Status codes and report slots of fsim_engine.cc (the last three from fsim_stream only).
OK, DEADLOCK, TIMEOUT, SRAM_INDEX, INTERNAL, WRITE_REFUSED, CHECK_REFUSED, UNBALANCED = range(8)
REPORT_LEN = 10
#: what overflowed, for SRAM_INDEX (report[1]): (name in the message, config depth attribute)
SRAM_WHAT = (("GEMM ACC (dst)", "ACC_BUFF_DEPTH"), ("GEMM INP (src)", "INP_BUFF_DEPTH"),
             ("GEMM WGT", "WGT_BUFF_DEPTH"), ("ALU ACC (dst)", "ACC_BUFF_DEPTH"), ("ALU ACC (src)", "ACC_BUFF_DEPTH"))

#: (format, field) in the order of fsim_engine.cc's FieldId.
FIELDS = (
    ("mem", "opcode"), ("mem", "pop_prev_dep"), ("mem", "pop_next_dep"), ("mem", "push_prev_dep"),
    ("mem", "push_next_dep"),
    ("mem", "memory_type"), ("mem", "sram_base"), ("mem", "dram_base"), ("mem", "y_size"), ("mem", "x_size"),
    ("mem", "x_stride"), ("mem", "y_pad_0"), ("mem", "y_pad_1"), ("mem", "x_pad_0"), ("mem", "x_pad_1"),
    ("gemm", "reset_reg"), ("gemm", "uop_bgn"), ("gemm", "uop_end"), ("gemm", "iter_out"), ("gemm", "iter_in"),
    ("gemm", "dst_factor_out"), ("gemm", "dst_factor_in"), ("gemm", "src_factor_out"), ("gemm", "src_factor_in"),
    ("gemm", "wgt_factor_out"), ("gemm", "wgt_factor_in"),
    ("alu", "uop_bgn"), ("alu", "uop_end"), ("alu", "iter_out"), ("alu", "iter_in"), ("alu", "dst_factor_out"),
    ("alu", "dst_factor_in"), ("alu", "src_factor_out"), ("alu", "src_factor_in"),
    ("alu", "alu_opcode"), ("alu", "use_imm"), ("alu", "imm"),
    ("uop", "dst_idx"), ("uop", "src_idx"), ("uop", "wgt_idx"),
)
#: counter names in the order of fsim_engine.cc's CounterId
ENGINE_COUNTERS = ("inp_load_nbytes", "wgt_load_nbytes", "acc_load_nbytes", "uop_load_nbytes", "out_store_nbytes",
                   "gemm_counter", "alu_counter")
_FLAGS = ("pop_prev_dep", "pop_next_dep", "push_prev_dep", "push_next_dep")


def library_path() -> Path:
    """The engine's path, compiling it first if the cache has no build for this source and compiler."""
    return cxx.build("vta_fsim", SOURCE, ["-O3", *cxx.native_arch(), *cxx.enum_defines()], "fsim's engine")


_lib: ctypes.CDLL | None = None
_lock = threading.Lock()


def library() -> ctypes.CDLL:
    """The loaded engine (built on first use)."""
    global _lib
    with _lock:
        if _lib is None:
            lib = ctypes.CDLL(str(library_path()))
            vp, i64, i32, dbl = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_double
            sigs = {
                "fsim_create": ([vp, i64], vp),
                "fsim_destroy": ([vp], None),
                "fsim_bind": ([vp, vp, vp, vp, vp, vp, vp, ctypes.c_uint64, vp], None),
                "fsim_use_generic_gemm": ([vp, i32], None),
                "fsim_fuse_alu": ([vp, i32], None),
                "fsim_fused_groups": ([vp], i64),
                "fsim_has_fast_gemm": ([vp], i32),
                "fsim_check": ([vp, vp, i64, vp, vp, i64], i64),
                "fsim_run": ([vp, vp, i64, dbl, vp], i32),
                "fsim_exec_one": ([vp, vp, dbl, vp], i32),
                "fsim_stream": ([vp, vp, i64, i64, vp, i64, i64, vp, vp, i64, dbl, vp], i32),
            }
            for name, (args, res) in sigs.items():
                fn = getattr(lib, name)
                fn.argtypes = args
                fn.restype = res
            _lib = lib
    return _lib


def _params(cfg: Config, counters: tuple[str, ...]) -> np.ndarray:
    isa = cfg.isa
    fmts = {"mem": isa.mem, "gemm": isa.gemm, "alu": isa.alu, "uop": isa.uop}
    vals: list[int] = []
    for fmt, name in FIELDS:
        f = fmts[fmt][name]
        vals += [f.lsb // 64, f.lsb % 64, f.width, int(f.signed)]
    vals += [cfg.BATCH, cfg.BLOCK_IN, cfg.BLOCK_OUT,
             cfg.INP_BUFF_DEPTH, cfg.WGT_BUFF_DEPTH, cfg.ACC_BUFF_DEPTH, cfg.UOP_BUFF_DEPTH]
    elem = dict.fromkeys(range(5), 0)
    elem.update({MemType.UOP: cfg.UOP_ELEM_BYTES, MemType.WGT: cfg.WGT_ELEM_BYTES, MemType.INP: cfg.INP_ELEM_BYTES,
                 MemType.ACC: cfg.ACC_ELEM_BYTES, MemType.OUT: cfg.OUT_ELEM_BYTES})
    vals += [elem[k] for k in range(5)]
    vals.append(cfg.LOG_ACC_WIDTH + 1)
    vals += [counters.index(c) for c in ENGINE_COUNTERS]
    for stage in (Stage.LOAD, Stage.COMPUTE, Stage.STORE):
        for flag in _FLAGS:
            q = token_pops(stage, {flag: 1}) + token_pushes(stage, {flag: 1})
            vals.append(TOKEN_QUEUES.index(q[0]) if q else -1)
    vals += [int(cfg.isa.has("alu_mul")), int(cfg.isa.has("acc_8bit")), cfg.OUT_ELEM_BYTES]   # ISA extensions
    return np.array(vals, dtype=np.int64)


def _address(a: np.ndarray) -> int:
    """The address of a writable C-contiguous array's data (a few times cheaper than a.ctypes.data)."""
    return ctypes.addressof(ctypes.c_char.from_buffer(a))


class Engine:
    """One engine instance over one device's SRAMs, DRAM and counters (all numpy arrays it keeps alive)."""

    def __init__(self, cfg: Config, counters: tuple[str, ...]):
        self._lib = lib = library()
        params = _params(cfg, counters)
        handle = lib.fsim_create(params.ctypes.data, params.size)
        if not handle:
            raise DeviceError("fsim's engine refused its parameters (sim/fsim_native.py and fsim_engine.cc differ)")
        self._handle = handle
        self._finalizer = weakref.finalize(self, lib.fsim_destroy, handle)
        self._report = np.zeros(REPORT_LEN, np.int64)
        self._report_address = _address(self._report)
        self._arrays: tuple = ()
        self._table: np.ndarray | None = None   # the allocation table stream() last saw, and its addresses
        self._table_starts = self._table_sizes = 0

    def bind(self, inp: np.ndarray, wgt: np.ndarray, acc: np.ndarray, out: np.ndarray, uop: np.ndarray,
             dram: np.ndarray, counters: np.ndarray) -> None:
        for a in (inp, wgt, acc, out, uop, dram, counters):
            assert a.flags.c_contiguous, "fsim's engine needs C-contiguous arrays"
        assert (inp.dtype, wgt.dtype, acc.dtype, out.dtype, uop.dtype, dram.dtype, counters.dtype) == \
            (np.int8, np.int8, np.int32, np.int8, np.uint32, np.uint8, np.int64)
        self._arrays = (inp, wgt, acc, out, uop, dram, counters)
        self._lib.fsim_bind(self._handle, *(a.ctypes.data for a in self._arrays[:6]), dram.nbytes,
                            counters.ctypes.data)

    def use_generic_gemm(self, on: bool) -> None:
        """Use the plain GEMM loop even where the AVX2 kernel applies (to test one against the other)."""
        self._lib.fsim_use_generic_gemm(self._handle, int(on))

    def fuse_alu(self, on: bool) -> None:
        """Fuse runs of epilogue ALU instructions over the same rows (the default), or run each alone."""
        self._lib.fsim_fuse_alu(self._handle, int(on))

    @property
    def fused_groups(self) -> int:
        """How many groups of ALU instructions this engine has run fused."""
        return int(self._lib.fsim_fused_groups(self._handle))

    @property
    def has_fast_gemm(self) -> bool:
        return bool(self._lib.fsim_has_fast_gemm(self._handle))

    def check(self, words: np.ndarray, allocations: list[tuple[int, int]] | np.ndarray) -> int:
        """Index of the first instruction the static checks refuse, n for a missing FINISH, -1 if fine.
        ``allocations``: (start, bytes) pairs, or ``PageAllocator.allocation_table()`` (starts, then sizes)."""
        if isinstance(allocations, np.ndarray):
            alloc = allocations
        else:
            alloc = np.array(allocations, dtype=np.int64).reshape(-1, 2).T.copy()   # starts, then sizes
        n = alloc.shape[1]
        starts = alloc.ctypes.data if n else 0
        return self._lib.fsim_check(self._handle, _address(words), words.shape[0], starts, starts + 8 * n, n)

    def run(self, words: np.ndarray, timeout: float | None) -> tuple[int, list[int]]:
        """Run a checked stream; (status, report)."""
        status = self._lib.fsim_run(self._handle, _address(words), words.shape[0],
                                    -1.0 if timeout is None else float(timeout), self._report_address)
        return status, self._report.tolist()

    def stream(self, stream: bytes, count: int, insn_phys: int, uops: bytes, uop_phys: int, table: np.ndarray,
               timeout: float | None) -> tuple[int, list[int] | None]:
        """Write ``uops`` (if any) and ``stream`` into DRAM, check and run it: fsim_stream's (status, report);
        report is None when the status is OK. ``table``: ``PageAllocator.allocation_table()``."""
        if table is not self._table:
            n = table.shape[1]
            self._table, self._table_starts = table, table.ctypes.data if n else 0
            self._table_sizes = self._table_starts + 8 * n if n else 0
        status = self._lib.fsim_stream(self._handle, stream, count, insn_phys, uops, len(uops), uop_phys,
                                       self._table_starts, self._table_sizes, table.shape[1],
                                       -1.0 if timeout is None else float(timeout), self._report_address)
        return status, None if status == OK else self._report.tolist()

    def exec_one(self, word: np.ndarray, timeout: float | None) -> tuple[int, list[int]]:
        """Execute one checked instruction (a (2,) uint64 array); (status, report)."""
        status = self._lib.fsim_exec_one(self._handle, word.ctypes.data, -1.0 if timeout is None else float(timeout),
                                         self._report_address)
        return status, self._report.tolist()
