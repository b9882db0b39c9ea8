"""Bad instruction streams give a clear error naming the instruction, never a hang."""

import numpy as np
import pytest

from vta_hw.spec import AluOp, Isa, MemType, Opcode
from vta_runtime import (
    CommandQueue,
    DeadlockError,
    DramAccessError,
    IllegalInstructionError,
    MissingFinishError,
    SramIndexError,
    UnbalancedTokensError,
)


@pytest.fixture(autouse=True, params=["write-and-run", "run_stream"])
def handover(request):
    """Every test twice: the stream handed over as write + run, and as a device's one-call run_stream
    (fsim's, which the runtime prefers; skipped for devices without one), which must say the same."""
    global _handover
    _handover = request.param
    yield
    _handover = "write-and-run"


_handover = "write-and-run"


def run(dev, words):
    data = Isa.to_bytes(words)
    phys = dev.alloc(len(data))
    if _handover == "run_stream":
        if not hasattr(dev, "run_stream"):
            pytest.skip(f"{type(dev).__name__} has no run_stream")
        dev.run_stream(data, len(words), phys, b"", 0, timeout=60)
        return
    dev.write(phys, data)
    dev.run(phys, len(words), timeout=60)


def finish(isa):
    return isa.finish_insn()


def test_unbalanced_tokens_deadlock_names_module_queue_and_instruction(make_device):
    dev = make_device()
    isa = dev.config.isa
    buf = dev.alloc(4096)
    words = [
        isa.load(MemType.INP, 0, buf // 16, 1, 1, 1),                         # 0 load, pushes nothing
        isa.gemm.encode(opcode=Opcode.GEMM, pop_prev_dep=1, uop_end=1, iter_out=1, iter_in=1),  # 1 waits on l2g
        finish(isa),
    ]
    with pytest.raises(DeadlockError) as e:
        run(dev, words)
    msg = str(e.value)
    assert "deadlock: no module can make progress" in msg
    assert "compute: at instruction 1 (GEMM" in msg and "waiting for a token on l2g (load->compute)" in msg
    assert "load   : no instructions left" in msg and "tokens : l2g=0 g2l=0 g2s=0 s2g=0" in msg
    assert e.value.index == 1


def test_store_waiting_forever(make_device):
    """FINISH can run while the store module still waits: reported, with what it waits for."""
    dev = make_device()
    isa = dev.config.isa
    words = [isa.store(0, 0, 0, 0, 0, memory_type=MemType.UOP, pop_prev_dep=1), finish(isa)]
    with pytest.raises(UnbalancedTokensError) as e:
        run(dev, words)
    assert "store has 1 instruction(s) left from #0" in str(e.value)
    assert "store  : at instruction 0 (STORE  UOP  NOP), waiting for a token on g2s" in str(e.value)


def test_leftover_tokens_after_finish(make_device):
    dev = make_device()
    isa = dev.config.isa
    words = [isa.load(MemType.INP, 0, 0, 0, 0, 0, push_next_dep=1), finish(isa)]
    with pytest.raises(UnbalancedTokensError, match=r"1 token\(s\) remain in l2g \(load->compute\)"):
        run(dev, words)


@pytest.mark.parametrize("word, message", [
    (lambda isa: 5, "instruction 1: illegal opcode 5 (valid: 0-4)"),
    (lambda isa: 7 | 1 << 20, "instruction 1: illegal opcode 7"),
    (lambda isa: isa.load(MemType.OUT, 0, 0, 1, 1, 1), "LOAD with memory type 4: a LOAD may target UOP"),
    (lambda isa: isa.load(MemType.ACC_8BIT, 0, 0, 1, 1, 1), "ACC_8BIT loads are not supported"),
    (lambda isa: isa.load(6, 0, 0, 1, 1, 1), "LOAD with memory type 6"),
    (lambda isa: isa.store(0, 0, 1, 1, 1, memory_type=MemType.ACC), "STORE with memory type 3: a STORE reads"),
    (lambda isa: isa.alu.encode(opcode=Opcode.ALU, alu_opcode=AluOp.MUL, uop_end=1, iter_out=1, iter_in=1),
     "illegal ALU opcode 4 (MUL is not supported"),
    (lambda isa: isa.alu.encode(opcode=Opcode.ALU, alu_opcode=6), "illegal ALU opcode 6"),
    (lambda isa: isa.load(MemType.INP, 0, 0, 0, 0, 0, pop_prev_dep=1), "pop_prev_dep set on a load instruction"),
    (lambda isa: isa.store(0, 0, 0, 0, 0, push_next_dep=1), "push_next_dep set on a store instruction"),
])
def test_illegal_instructions(make_device, word, message):
    dev = make_device()
    isa = dev.config.isa
    with pytest.raises(IllegalInstructionError) as e:
        run(dev, [isa.load(MemType.INP, 0, 0, 0, 0, 0), word(isa), finish(isa)])
    assert message in str(e.value)
    assert e.value.index == 1


def test_store_with_padding_is_illegal(make_device):
    dev = make_device()
    isa = dev.config.isa
    buf = dev.alloc(4096)
    w = isa.mem.encode(opcode=Opcode.STORE, memory_type=MemType.OUT, dram_base=buf // 16, y_size=1, x_size=1,
                       x_stride=1, x_pad_0=1)
    with pytest.raises(IllegalInstructionError, match="instruction 0: a STORE must have zero padding"):
        run(dev, [w, finish(isa)])


def test_sram_index_past_depth(make_device):
    dev = make_device()
    cfg = dev.config
    isa = cfg.isa
    buf = dev.alloc(1 << 20)
    with pytest.raises(SramIndexError) as e:
        run(dev, [isa.load(MemType.INP, cfg.INP_BUFF_DEPTH - 2, buf // 16, 1, 2, 2, x_pad_1=1), finish(isa)])
    assert (f"instruction 0: LOAD into INP covers SRAM indices {cfg.INP_BUFF_DEPTH - 2}..{cfg.INP_BUFF_DEPTH}, "
            f"past the INP buffer depth {cfg.INP_BUFF_DEPTH}") in str(e.value)
    with pytest.raises(SramIndexError, match=f"uop_end={cfg.UOP_BUFF_DEPTH + 1} is past the UOP buffer depth"):
        run(dev, [isa.gemm.encode(opcode=Opcode.GEMM, uop_end=cfg.UOP_BUFF_DEPTH + 1, iter_out=1, iter_in=1),
                  finish(isa)])
    with pytest.raises(SramIndexError, match="STORE from OUT covers SRAM indices"):
        run(dev, [isa.store(cfg.ACC_BUFF_DEPTH - 1, buf // 16, 1, 2, 2), finish(isa)])


def test_gemm_index_past_depth_found_at_run_time(make_device):
    """A loop whose index passes a buffer runs up to its first bad uop, as the core does: the
    error names that uop's index (not the loop's largest), the uops before it are counted, and
    their results are in the SRAMs (which a later run stores)."""
    dev = make_device()
    cfg = dev.config
    isa = cfg.isa
    depth = cfg.ACC_BUFF_DEPTH
    rng = np.random.default_rng(3)
    lanes = cfg.BATCH * cfg.BLOCK_OUT
    acc = rng.integers(-2000, 2000, (16, lanes), dtype=np.int32)
    acc_top = rng.integers(-2000, 2000, (3, lanes), dtype=np.int32)    # rows depth-3 .. depth-1
    inp = rng.integers(-20, 20, (cfg.BATCH, cfg.BLOCK_IN), dtype=np.int8)
    wgt = rng.integers(-20, 20, (cfg.BLOCK_OUT, cfg.BLOCK_IN), dtype=np.int8)
    bufs = {}
    uop = np.array([isa.uop.encode(dst_idx=5, src_idx=0, wgt_idx=0)], np.uint32)
    for name, data in (("uop", uop), ("acc", acc), ("acc_top", acc_top), ("inp", inp), ("wgt", wgt),
                       ("out", np.zeros(4096, np.int8))):
        bufs[name] = dev.alloc(4096)
        dev.write(bufs[name], data)
    eb = cfg.ACC_ELEM_BYTES
    loads = [isa.load(MemType.UOP, 0, bufs["uop"] // 4, 1, 1, 1),
             isa.load(MemType.ACC, 0, bufs["acc"] // eb, 1, 16, 16),
             isa.load(MemType.ACC, depth - 3, bufs["acc_top"] // eb, 1, 3, 3),
             isa.load(MemType.INP, 0, bufs["inp"] // cfg.INP_ELEM_BYTES, 1, 1, 1),
             isa.load(MemType.WGT, 0, bufs["wgt"] // cfg.WGT_ELEM_BYTES, 1, 1, 1, push_next_dep=1)]

    def stored_rows(first, count):
        run(dev, [isa.store(first, bufs["out"] // cfg.OUT_ELEM_BYTES, 1, count, count), finish(isa)])
        return np.frombuffer(dev.read(bufs["out"], count * cfg.OUT_ELEM_BYTES), np.int8).reshape(count, lanes)

    # rows 5..12, then depth-3..depth+4: the first bad row is depth (the 12th uop), the largest depth+4
    gemm = isa.gemm.encode(opcode=Opcode.GEMM, pop_prev_dep=1, uop_end=1, iter_out=2, iter_in=8, dst_factor_in=1,
                           dst_factor_out=depth - 8)
    with pytest.raises(SramIndexError) as e:
        run(dev, [*loads, gemm, finish(isa)])
    assert f"instruction 5: GEMM ACC (dst) index {depth} is past the buffer depth {depth}" in str(e.value)
    assert e.value.index == 5 and dev.stats()["gemm_counter"] == 11
    dot = (inp.astype(np.int32) @ wgt.astype(np.int32).T).reshape(lanes)
    assert np.array_equal(stored_rows(5, 8), (acc[5:13] + dot).astype(np.int8))
    assert np.array_equal(stored_rows(depth - 3, 3), (acc_top + dot).astype(np.int8))

    # ALU sources 0..3, then depth-2..depth+1 into rows 5..12: the 7th uop fails on source depth
    dev.clear_stats()
    alu = isa.alu.encode(opcode=Opcode.ALU, uop_end=1, iter_out=2, iter_in=4, dst_factor_in=1, dst_factor_out=4,
                         src_factor_in=1, src_factor_out=depth - 2, alu_opcode=AluOp.ADD)
    with pytest.raises(SramIndexError) as e:
        run(dev, [*loads[:3], alu, finish(isa)])
    assert f"instruction 3: ALU ACC (src) index {depth} is past the buffer depth {depth}" in str(e.value)
    assert dev.stats()["alu_counter"] == 6
    want = np.concatenate([acc[5:9] + acc[0:4], acc[9:11] + acc_top[1:3]])
    assert np.array_equal(stored_rows(5, 6), want.astype(np.int8))


@pytest.mark.parametrize("op", ["gemm", "alu"])
def test_runtime_uop_loop_out_of_range_reports_the_first_bad_index(make_device, op):
    """Through the runtime: a uop loop whose rows run past ACC (0, 2, 4, ...) stops at the first
    row past it (depth), not the loop's last (2*depth - 2), with the uops before it counted."""
    dev = make_device()
    cfg = dev.config
    depth = cfg.ACC_BUFF_DEPTH
    cq = CommandQueue(dev)

    def kernel(_sig):
        cq.uop_loop_begin(depth, 2, 0, 0)
        if op == "gemm":
            cq.uop_push(0, 0, 0, 0, 0)
        else:
            cq.uop_push(1, 0, 0, 0, 0, AluOp.ADD, 1, 3)
        cq.uop_loop_end()
    (cq.push_gemm_op if op == "gemm" else cq.push_alu_op)("past-acc", kernel)
    with pytest.raises(SramIndexError) as e:
        cq.synchronize()
    what = "GEMM ACC (dst)" if op == "gemm" else "ALU ACC (dst)"
    assert f"{what} index {depth} is past the buffer depth {depth}" in str(e.value)
    assert dev.stats()[f"{op}_counter"] == depth // 2


def test_dram_access_outside_allocation(make_device):
    dev = make_device()
    isa = dev.config.isa
    buf = dev.alloc(100)          # 100 bytes: 6 INP elements fit, 7 do not
    with pytest.raises(DramAccessError) as e:
        run(dev, [isa.load(MemType.INP, 0, buf // 16, 1, 7, 7), finish(isa)])
    assert f"instruction 0: LOAD INP accesses device memory [{buf:#x}, {buf + 112:#x}) outside any allocation" \
        in str(e.value) and "has only 100 bytes" in str(e.value)
    with pytest.raises(DramAccessError, match="no allocation contains its start"):
        run(dev, [isa.store(0, 0x7FFF0000 // 16, 1, 1, 1), finish(isa)])
    with pytest.raises(DramAccessError, match=r"LOAD INP accesses device memory .* has only 100 bytes"):
        run(dev, [isa.load(MemType.INP, 0, buf // 16, 2, 1, 6), finish(isa)])   # 2 rows, stride 6: 7 elements


def test_missing_finish(make_device):
    dev = make_device()
    isa = dev.config.isa
    with pytest.raises(MissingFinishError, match="the stream of 2 instructions has no FINISH"):
        run(dev, [isa.load(MemType.INP, 0, 0, 0, 0, 0), isa.load(MemType.WGT, 0, 0, 0, 0, 0)])


def test_load_and_store_go_on_after_finish(make_device):
    """FINISH stops compute only: a load that waits for a token compute pushed, and a store that
    waits for nothing, still run to the end (as the core does), and the counters count them."""
    dev = make_device()
    isa = dev.config.isa
    cfg = dev.config
    lanes = cfg.BATCH * cfg.BLOCK_OUT
    acc = (np.arange(lanes, dtype=np.int32) * 37 - 300).astype(np.int32)
    abuf, ibuf, ubuf, obuf = dev.alloc(4096), dev.alloc(4096), dev.alloc(4096), dev.alloc(1 << 16)
    dev.write(abuf, acc)
    dev.write(ibuf, np.zeros(4 * cfg.INP_ELEM_BYTES, np.uint8))
    dev.write(ubuf, np.zeros(1, np.uint32))     # dst 0, src 0
    words = [isa.load(MemType.UOP, 0, ubuf // 4, 1, 1, 1),
             isa.load(MemType.ACC, 0, abuf // cfg.ACC_ELEM_BYTES, 1, 1, 1),
             isa.alu.encode(opcode=Opcode.ALU, push_prev_dep=1, uop_end=1, iter_out=1, iter_in=1,
                            alu_opcode=AluOp.ADD, use_imm=1, imm=5),
             isa.load(MemType.INP, 0, ibuf // cfg.INP_ELEM_BYTES, 1, 4, 4, pop_next_dep=1),
             finish(isa)]
    run(dev, words)
    s = dev.stats()
    assert (s["inp_load_nbytes"], s["alu_counter"], s["uop_load_nbytes"]) == (4 * cfg.INP_ELEM_BYTES, 1, 4)
    # a lone STORE of 1000 rows before FINISH: every row is written; row 0 is what the ALU left in OUT
    dev.clear_stats()
    run(dev, [isa.store(0, obuf // cfg.OUT_ELEM_BYTES, 1, 1000, 1000), finish(isa)])
    assert dev.stats()["out_store_nbytes"] == 1000 * cfg.OUT_ELEM_BYTES
    row0 = np.frombuffer(dev.read(obuf, cfg.OUT_ELEM_BYTES), np.int8)
    assert np.array_equal(row0, (acc + 5).astype(np.int8))


def test_illegal_instruction_after_finish_is_left_over(make_device):
    """Nothing after the first FINISH is dispatched, so nothing there is checked: an illegal opcode
    after it is a leftover instruction, as the core reports it."""
    dev = make_device()
    isa = dev.config.isa
    with pytest.raises(UnbalancedTokensError, match=r"1 instruction\(s\) for no module left from #1") as e:
        run(dev, [finish(isa), 5])
    assert e.value.index == 1


def test_instructions_after_finish_are_reported(make_device):
    dev = make_device()
    isa = dev.config.isa
    with pytest.raises(UnbalancedTokensError, match=r"compute has 1 instruction\(s\) left from #1"):
        run(dev, [finish(isa), isa.load(MemType.UOP, 0, 0, 0, 0, 0)])
