"""Runtime API rules: pending pops, NOPs, kernel cache, debug dumps, refusals, the Device protocol."""

import io

import numpy as np
import pytest
from vta_test_helpers import C, L, S

import vta_runtime
from sim.fsim import FsimDevice
from vta_hw.spec import DEVICE_COUNTERS, AluOp, Isa, MemType, Opcode, disassemble
from vta_hw.spec.regmap import COUNTERS, FSIM_COUNTERS
from vta_runtime import (
    DEBUG_DUMP_INSN,
    DEBUG_DUMP_UOP,
    DEVICE_METHODS,
    CommandQueue,
    Device,
    DeviceMemoryError,
    RuntimeUsageError,
)
from vta_runtime.insn_queue import InsnQueue


def decode_all(cq_or_bytes, isa):
    words = Isa.words_from_bytes(cq_or_bytes)
    return [isa.decode(int(a) | int(b) << 64) for a, b in words]


def test_fsim_implements_device_protocol():
    dev = FsimDevice()
    assert isinstance(dev, Device)
    for m in DEVICE_METHODS:
        assert callable(getattr(dev, m))
    a = dev.alloc(10)
    b = dev.alloc(5000)
    assert a % 4096 == 0 and b % 4096 == 0 and a != 0 and b - a == 4096
    dev.write(a, np.arange(10, dtype=np.uint8))
    assert dev.read(a, 10) == bytes(range(10))
    dev.free(a)
    assert dev.alloc(4096) == a                       # first fit reuses the freed page
    with pytest.raises(DeviceMemoryError, match="not the start of a device allocation"):
        dev.free(a + 16)
    with pytest.raises(DeviceMemoryError, match="out of simulated device memory"):
        dev.alloc(1 << 40)
    with pytest.raises(vta_runtime.DramAccessError, match="host read accesses device memory"):
        dev.read(b + 4000, 2000)
    assert tuple(dev.stats()) == DEVICE_COUNTERS == FSIM_COUNTERS == COUNTERS[:len(DEVICE_COUNTERS)]


def test_pending_pops_move_onto_next_instruction_and_pushes_merge():
    cfg = FsimDevice().config
    q = InsnQueue(cfg.isa)
    q.dep_pop(L, C)                                    # pending on compute
    q.mem(Opcode.LOAD, MemType.INP, x_size=1, y_size=1, x_stride=1)   # load stage: not affected
    q.dep_push(L, C)                                   # merges into the load
    q.create(C.__class__.COMPUTE, {"opcode": Opcode.GEMM})            # takes the pending pop
    assert q.insns[0]["push_next_dep"] == 1 and q.insns[0]["pop_prev_dep"] == 0
    assert q.insns[1]["pop_prev_dep"] == 1
    q.dep_push(C, S)                                   # merges into the GEMM
    q.dep_push(C, S)                                   # flag already set: a compute NOP carries it
    assert q.insns[1]["push_next_dep"] == 1
    assert q.insns[2]["opcode"] == Opcode.LOAD and q.insns[2]["memory_type"] == MemType.UOP
    assert q.insns[2]["x_size"] == 0 and q.insns[2]["push_next_dep"] == 1
    q.dep_pop(S, C)
    q.dep_pop(S, C)                                    # second pending pop of the same kind commits a NOP
    assert q.insns[3]["pop_next_dep"] == 1 and q.pending_pop_next[C] == 1
    assert dict(q.token_balance()) == {"l2g": 0, "g2l": 0, "g2s": 2, "s2g": -1}
    with pytest.raises(ValueError, match="no dependency queue from stage 1 to stage 3"):
        q.dep_push(L, S)


def test_dump_insn_and_uop(capsys):
    out = io.StringIO()
    cq = CommandQueue(FsimDevice(), debug_flags=DEBUG_DUMP_INSN | DEBUG_DUMP_UOP, debug_stream=out)
    buf = cq.buffer_alloc(64 * 4)
    cq.load_buffer_2d(buf, 0, 4, 1, 4, 0, 0, 0, 0, 0, MemType.ACC)

    def record(_sig):
        cq.uop_loop_begin(4, 1, 1, 0)
        cq.uop_push(1, 0, 0, 0, 0, AluOp.MAX, 1, 0)
        cq.uop_loop_end()
    cq.push_alu_op("relu", record)
    cq.synchronize()
    text = out.getvalue()
    assert "uop kernel 'relu': ALU op=1 use_imm=1 imm=0 reset=0 loops=[(4, 1, 1, 0)] (1 uops)" in text
    assert "VTA instruction stream: 7 instructions" in text
    lines = text.splitlines()
    assert "compute LOAD   ACC " in lines[-7] and "ALU    MAX  imm=0" in lines[-5]
    assert "pop[l2g,s2g] push[-]" in lines[-2]
    assert lines[-1].split()[1:3] == ["compute", "FINISH"]
    assert lines[-1].endswith("| l2g=0 g2l=0 g2s=0 s2g=0")


def test_disassembler_running_counts():
    isa = FsimDevice().config.isa
    words = [isa.load(MemType.INP, 0, 1, 1, 1, 1, push_next_dep=1),
             isa.load(MemType.WGT, 0, 1, 1, 1, 1, push_next_dep=1),
             isa.gemm.encode(opcode=Opcode.GEMM, pop_prev_dep=1, push_prev_dep=1, uop_end=1, iter_out=1, iter_in=1),
             isa.load(MemType.INP, 0, 0, 0, 0, 0, pop_next_dep=1), isa.finish_insn()]
    lines = disassemble(Isa.to_bytes(words), isa)
    assert [ln.split("|")[1].strip() for ln in lines] == [
        "l2g=1 g2l=0 g2s=0 s2g=0", "l2g=2 g2l=0 g2s=0 s2g=0", "l2g=1 g2l=1 g2s=0 s2g=0",
        "l2g=1 g2l=0 g2s=0 s2g=0", "l2g=1 g2l=0 g2s=0 s2g=0"]
    assert "pop[l2g] push[g2l]" in lines[2] and "LOAD   INP  NOP" in lines[3]


def test_synchronize_refuses_unbalanced_pops_without_running():
    dev = FsimDevice()
    cq = CommandQueue(dev)
    cq.dep_pop(L, C)
    cq.dep_pop(L, C)
    with pytest.raises(RuntimeUsageError, match="pops more tokens than it pushes.*l2g short by 2"):
        cq.synchronize()
    assert cq.runs == 0


def test_leftover_pushes_are_drained_at_synchronize():
    dev = FsimDevice()
    cq = CommandQueue(dev)
    cq.dep_push(C, L)
    cq.dep_push(S, C)
    cq.synchronize()
    assert cq.runs == 1


@pytest.mark.parametrize("call, message", [
    (lambda cq, b: cq.load_buffer_2d(b, 0, 1, 1, 1, 0, 0, 0, 0, 0, MemType.OUT), "memory type 4 cannot be loaded"),
    (lambda cq, b: cq.load_buffer_2d(b, 0, 1, 1, 1, 0, 0, 0, 0, 0, MemType.ACC_8BIT), "ACC_8BIT is not supported"),
    (lambda cq, b: cq.store_buffer_2d(0, MemType.ACC, b, 0, 1, 1, 1), "only the OUT buffer (4) can be stored"),
    (lambda cq, b: cq.load_buffer_2d(b + 8, 0, 1, 1, 1, 0, 0, 0, 0, 0, MemType.INP),
     "is not aligned to the 16-byte element"),
    (lambda cq, b: cq.dep_push(1, 3), "dep_push(1, 3): there is no dependency queue"),
    (lambda cq, b: cq.dep_pop(2, 2), "dep_pop(2, 2): there is no dependency queue"),
    (lambda cq, b: cq.uop_push(0, 0, 0, 0, 0), "uop_push/uop_loop_. outside a uop kernel"),
    (lambda cq, b: cq.push_gemm_op("never-recorded"), "is not cached and no kernel function was given"),
    (lambda cq, b: cq.push_alu_op("mul", lambda s: cq.uop_push(1, 0, 0, 0, 0, AluOp.MUL, 1, 2)),
     "ALU opcode MUL is not supported"),
    (lambda cq, b: cq.push_gemm_op("late-loop", lambda s: (cq.uop_push(0, 0, 0, 0, 0), cq.uop_loop_begin(2, 1, 1, 1))),
     "uop_loop_begin must come before the first uop_push"),
    (lambda cq, b: cq.push_gemm_op("3loops", lambda s: [cq.uop_loop_begin(2, 1, 1, 1) for _ in range(3)]),
     "at most 2 loops"),
    (lambda cq, b: cq.push_gemm_op("open", lambda s: (cq.uop_loop_begin(2, 1, 1, 1), cq.uop_push(0, 0, 0, 0, 0))),
     "ends with 1 uop loop.s. still open"),
    (lambda cq, b: cq.push_gemm_op("mixed", lambda s: (cq.uop_push(0, 0, 0, 0, 0), cq.uop_push(0, 1, 0, 0, 0))),
     "uop 1 has mode=0 reset=1 but the kernel has mode=0 reset=0"),
    (lambda cq, b: cq.push_alu_op("is-gemm", lambda s: cq.uop_push(0, 0, 0, 0, 0)),
     "was recorded in mode 0 but pushed as ALU"),
    (lambda cq, b: cq.push_gemm_op("big", lambda s: cq.uop_push(0, 0, 1 << 11, 0, 0)),
     "uop 0: uop field dst_idx=2048 does not fit its 11 bits"),
    (lambda cq, b: cq.push_gemm_op("empty", lambda s: None), "must push at least one uop"),
])
def test_runtime_refusals(call, message):
    cq = CommandQueue(FsimDevice())
    buf = cq.buffer_alloc(4096)
    with pytest.raises((RuntimeUsageError, ValueError), match=message.replace("(", r"\(").replace(")", r"\)")
                       if "." not in message else message):
        call(cq, buf.phys)


def test_field_overflow_is_reported_at_synchronize_with_instruction_index():
    cq = CommandQueue(FsimDevice())
    buf = cq.buffer_alloc(4096)
    cq.load_buffer_2d(buf, 0, 1 << 16, 1, 1, 0, 0, 0, 0, 0, MemType.INP)
    with pytest.raises(RuntimeUsageError, match="instruction 0: memory field x_size=65536 does not fit its 16 bits"):
        cq.synchronize()


def test_kernel_recording_failure_leaves_queue_usable():
    cq = CommandQueue(FsimDevice())
    with pytest.raises(ZeroDivisionError):
        cq.push_gemm_op("boom", lambda s: 1 / 0)
    cq.push_gemm_op("ok", lambda s: cq.uop_push(0, 1, 0, 0, 0))
    cq.synchronize()


def test_signature_selects_kernel_variant():
    cq = CommandQueue(FsimDevice())
    calls = []

    def record(sig):
        calls.append(sig)
        cq.uop_push(0, 1, sig, 0, 0)
    for sig in (0, 1, 0, 1, 2):
        cq.push_gemm_op("k", record, sig)
    assert calls == [0, 1, 2]
    stream = cq.insn_queue.encode()
    gemms = [f for f in decode_all(stream, cq.isa) if f["opcode"] == Opcode.GEMM]
    assert [(g["uop_bgn"], g["uop_end"]) for g in gemms] == [(0, 1), (1, 2), (0, 1), (1, 2), (2, 3)]
    cq.synchronize()


def test_command_handle_singleton_and_shutdown():
    vta_runtime.shutdown()
    a = vta_runtime.command_handle()
    assert vta_runtime.command_handle() is a and isinstance(a.device, FsimDevice)
    vta_runtime.shutdown()
    assert vta_runtime.command_handle() is not a
    vta_runtime.shutdown()


def test_buffer_copy_follows_the_strides_of_non_contiguous_arrays():
    """Host arrays are read and written in C order whatever their strides (a slice, a transpose)."""
    cq = CommandQueue(FsimDevice())
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (8, 8), dtype=np.int8)
    buf = cq.buffer_alloc(64)
    cq.buffer_copy(x[:, ::-1], 0, buf, 0, 64)                     # a reversed (negative-stride) source
    assert cq.buffer_read(buf, 64) == np.ascontiguousarray(x[:, ::-1]).tobytes()
    cq.buffer_copy(x, 0, buf, 0, 64)
    base = np.zeros((8, 8), np.int8)
    dst = base[:, ::2]                                            # 32 bytes, every other column
    cq.buffer_copy(buf, 0, dst, 0, 32)
    np.testing.assert_array_equal(dst, x.reshape(-1)[:32].reshape(8, 4))
    np.testing.assert_array_equal(base[:, 1::2], 0)               # the columns in between are untouched
    t = np.full((3, 4), -1, np.int16).T                           # Fortran-ordered, 2-byte elements, offset
    cq.buffer_copy(buf, 10, t, 4, 8)
    expect = np.full((4, 3), -1, np.int16)
    expect.reshape(-1).view(np.uint8)[4:12] = x.reshape(-1).view(np.uint8)[10:18]
    np.testing.assert_array_equal(t, expect)


def _read_only_array():
    a = np.zeros(64, np.uint8)
    a.setflags(write=False)
    return a


@pytest.mark.parametrize("make_dst, message", [
    (_read_only_array, r"host destination array \(uint8, shape \(64,\)\) is read-only"),
    (lambda: bytes(64), r"host destination \(bytes\) is read-only"),
    (lambda: memoryview(bytearray(128))[::2], r"host destination \(memoryview, strides \(2,\)\) is not contiguous"),
    (lambda: [0] * 64, "a host destination of type list is not a buffer"),
    (lambda: bytearray(16), "host destination holds only 16 bytes, 64 needed"),
], ids=["read-only-array", "bytes", "strided-memoryview", "list", "too-small"])
def test_buffer_copy_refuses_host_destinations_it_cannot_write(make_dst, message):
    cq = CommandQueue(FsimDevice())
    buf = cq.buffer_alloc(64)
    cq.buffer_write(buf, bytes(range(64)))
    dst = make_dst()
    with pytest.raises(RuntimeUsageError, match=message):
        cq.buffer_copy(buf, 0, dst, 0, 64)
    with pytest.raises(RuntimeUsageError, match="host source .*strides .2,.. is not contiguous"):
        cq.buffer_copy(memoryview(bytearray(128))[::2], 0, buf, 0, 64)


def test_the_runtime_imports_no_device():
    """Layering: vta_runtime reaches devices only through its registry, never by importing them."""
    import ast
    from pathlib import Path
    for path in Path(vta_runtime.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in {"sim", "boards", "vta_compiler", "bench", "demo"}, \
                    f"{path.name} imports {name}"


def test_open_device_finds_each_target_through_the_registry():
    from boards.driver import BoardDevice
    from sim.tsim import TsimDevice
    assert [vta_runtime.device_factory(t) for t in ("sim", "tsim", "pynq", "ultra96")] == [
        FsimDevice, TsimDevice, BoardDevice, BoardDevice]
    assert {"sim", "tsim", "pynq", "ultra96"} <= set(vta_runtime.device_targets())
    cfg = FsimDevice().config
    made = []

    def fsim_for_a_board(config, **kwargs):
        made.append(config.TARGET)
        return FsimDevice(config, **kwargs)
    vta_runtime.register_device("pynq", fsim_for_a_board)      # a registration beats the entry points
    try:
        dev = vta_runtime.open_device(cfg.replace(TARGET="pynq"), dram_bytes=1 << 22)
        assert isinstance(dev, FsimDevice) and made == ["pynq"] and dev.config.TARGET == "pynq"
        assert dev.dram.nbytes == 1 << 22                       # keyword arguments reach the factory
    finally:
        vta_runtime.unregister_device("pynq")
    assert vta_runtime.device_factory("pynq") is BoardDevice
    with pytest.raises(RuntimeUsageError, match=r"no device is registered for TARGET 'nowhere' \(devices are "
                       r"registered for: .*sim.*\)\. A device joins through the entry-point group 'vta.devices'"):
        vta_runtime.device_factory("nowhere")


def test_an_installed_package_can_offer_a_device(tmp_path, monkeypatch):
    """A package joins through the 'vta.devices' entry points; two devices for one TARGET are refused by name."""
    dist = tmp_path / "other_vta_device-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: other-vta-device\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[vta.devices]\nsim = sim.fsim:FsimDevice\npynq = sim.fsim:FsimDevice\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert vta_runtime.device_factory("sim") is FsimDevice      # the same device twice is one device
    with pytest.raises(RuntimeUsageError, match=r"more than one device is installed for TARGET 'pynq': "
                       r"(?=.*boards\.driver:BoardDevice \(from vta-py\))(?=.*sim\.fsim:FsimDevice \(from "
                       r"other-vta-device\))"):
        vta_runtime.open_device(FsimDevice().config.replace(TARGET="pynq"))
