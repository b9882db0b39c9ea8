"""Build (once, cached), load and describe the runtime's C++ core (``runtime.cc``).

The core is compiled against the headers of the installed apache-tvm-ffi wheel (``vta_runtime.cxx``,
cached under ``build/vta_runtime/<hash>/``) and registers its functions with tvm_ffi when loaded:
``vta.runtime.native.*`` for ``CommandQueue`` and ``InsnQueue``, and the ``vta.runtime.*`` entry
points that compiled code calls once per instruction. ``spec_tables(isa)`` describes the ISA to
it (formats, token queues, ALU opcodes), from ``vta_hw.spec`` only.
"""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path

from vta_hw.spec import (
    TOKEN_QUEUES,
    AluOp,
    Isa,
    MemType,
    Stage,
    token_pops,
    token_pushes,
)
from vta_hw.spec.isa import QUEUE_ENDS

from . import cxx, errors

SOURCE = Path(__file__).with_name("runtime.cc")
PREFIX = "vta.runtime.native."
_FLAGS = ("pop_prev_dep", "pop_next_dep", "push_prev_dep", "push_next_dep")

_lib: ctypes.CDLL | None = None
_lock = threading.Lock()


def _command_flags() -> list[str]:
    import tvm_ffi
    ffi_dir = Path(tvm_ffi.__file__).parent
    return ["-O2", *cxx.enum_defines(), f"-I{ffi_dir / 'include'}", f"-L{ffi_dir / 'lib'}", "-ltvm_ffi",
            f"-Wl,-rpath,{ffi_dir / 'lib'}"]


def library_path() -> Path:
    """The core's shared library, compiling it first (about a minute, once) if the cache has no build for this
    source, compiler and tvm_ffi version."""
    import tvm_ffi
    return cxx.build("vta_runtime", SOURCE, [*_command_flags(), f"-DVTA_TVM_FFI_VERSION={tvm_ffi.__version__}"],
                     "the VTA runtime's core")


def load() -> None:
    """Load the core once per process; its functions are then registered with tvm_ffi."""
    global _lib
    with _lock:
        if _lib is not None:
            return
        import tvm_ffi
        # errors keep their class when they cross C++ (messages only: attributes such as .index do not)
        for name in dir(errors):
            cls = getattr(errors, name)
            if isinstance(cls, type) and issubclass(cls, errors.VTAError):
                tvm_ffi.register_error(name, cls)
        _lib = ctypes.CDLL(str(library_path()))


def loaded() -> bool:
    """Whether this process has loaded the core."""
    return _lib is not None


def func(name: str):
    """A function of the core (``vta.runtime.native.<name>``)."""
    import tvm_ffi
    load()
    return tvm_ffi.get_global_func(PREFIX + name)


def spec_tables(isa: Isa) -> tuple[list[int], str, str]:
    """(tables, formats, names) describing the ISA to the core (see make_spec in runtime.cc)."""
    tables: list[int] = []
    for stage in (0, Stage.LOAD, Stage.COMPUTE, Stage.STORE):   # row 0 unused: stages are 1-3
        for flag in _FLAGS:
            q = (token_pops(stage, {flag: 1}) + token_pushes(stage, {flag: 1})) if stage else []
            tables.append(TOKEN_QUEUES.index(q[0]) if q else -1)
    tables += [int(QUEUE_ENDS[q][0]) for q in TOKEN_QUEUES]
    tables += [int(QUEUE_ENDS[q][1]) for q in TOKEN_QUEUES]
    tables += [len(isa.alu_ops), *sorted(int(a) for a in isa.alu_ops)]
    tables += sorted(int(t) for t in isa.load_types)
    formats = "|".join(
        f"{fmt.name}:" + ";".join(f"{f.name},{f.lsb},{f.width},{int(f.signed)}" for f in fmt)
        for fmt in (isa.mem, isa.gemm, isa.alu, isa.uop))
    alu_names = [""] * (max(AluOp) + 1)
    for a in AluOp:
        alu_names[a] = a.name
    # why an opcode / memory type an ISA extension defines is refused (by value; "" where none is)
    alu_why = [f"{a.name} is not supported by this configuration: {isa.refusal(alu_op=a)}"
               if isa.refusal(alu_op=a) else "" for a in AluOp]
    load_why = [f"{t.name} is not supported by this configuration: {isa.refusal(mem_type=t)}"
                if isa.refusal(mem_type=t) else "" for t in MemType]
    names = "|".join([",".join(TOKEN_QUEUES), ",".join(alu_names), "\x1f".join(alu_why), "\x1f".join(load_why)])
    return tables, formats, names


def field_names() -> list[str]:
    return [str(n) for n in func("FieldNames")()]
