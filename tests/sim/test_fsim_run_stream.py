"""fsim's one-call hand-over (``FsimDevice.run_stream``: uop write, stream write, checks and run in one
engine call), which the runtime's command queue prefers, does what write + write + run do."""

import numpy as np
import pytest

import vta_runtime
from sim.fsim import FsimDevice
from vta_hw.spec import Isa, MemType, Opcode
from vta_runtime import DramAccessError


def gemm_program(dev, rng):
    """Random INP/WGT/ACC in DRAM, a stream that loads them, one GEMM over 8 uops, a store of OUT; the uop
    kernel is handed over with the stream. (stream bytes, count, uop bytes, addresses, OUT buffer)."""
    cfg, isa = dev.config, dev.config.isa
    inp = rng.integers(-128, 128, (16, cfg.INP_ELEM_BYTES), dtype=np.int8)
    wgt = rng.integers(-128, 128, (4, cfg.WGT_ELEM_BYTES), dtype=np.int8)
    bufs = {}
    for name, data in (("inp", inp), ("wgt", wgt)):
        bufs[name] = dev.alloc(data.nbytes)
        dev.write(bufs[name], data)
    bufs["out"] = dev.alloc(16 * cfg.OUT_ELEM_BYTES)
    bufs["uop"] = dev.alloc(4096)
    bufs["insn"] = dev.alloc(4096)
    uops = np.array([isa.uop.encode(dst_idx=k, src_idx=2 * k, wgt_idx=k % 4) for k in range(8)], np.uint32)
    words = [
        isa.load(MemType.UOP, 0, bufs["uop"] // cfg.UOP_ELEM_BYTES, 1, 8, 8),
        isa.load(MemType.INP, 0, bufs["inp"] // cfg.INP_ELEM_BYTES, 1, 16, 16),
        isa.load(MemType.WGT, 0, bufs["wgt"] // cfg.WGT_ELEM_BYTES, 1, 4, 4, push_next_dep=1),
        isa.gemm.encode(opcode=Opcode.GEMM, reset_reg=1, uop_end=8, iter_out=1, iter_in=1, pop_prev_dep=1),
        isa.gemm.encode(opcode=Opcode.GEMM, uop_end=8, iter_out=1, iter_in=1, push_next_dep=1),
        isa.store(0, bufs["out"] // cfg.OUT_ELEM_BYTES, 1, 8, 8, pop_prev_dep=1, push_prev_dep=1),
        isa.gemm.encode(opcode=Opcode.GEMM, uop_end=0, iter_out=0, iter_in=0, pop_next_dep=1),
        isa.finish_insn(),
    ]
    want = np.stack([inp[2 * k].astype(np.int32) @ wgt[k % 4].reshape(cfg.BLOCK_OUT, cfg.BLOCK_IN).T.astype(np.int32)
                     for k in range(8)]).astype(np.int8)
    return Isa.to_bytes(words), len(words), uops.tobytes(), bufs, want


def test_run_stream_equals_write_and_run_and_numpy():
    one, two = FsimDevice(), FsimDevice()
    outs = []
    for dev, how in ((one, "one call"), (two, "two steps")):
        stream, count, uops, bufs, want = gemm_program(dev, np.random.default_rng(7))
        if how == "one call":
            dev.run_stream(stream, count, bufs["insn"], uops, bufs["uop"], timeout=60)
        else:
            dev.write(bufs["uop"], uops)
            dev.write(bufs["insn"], stream)
            dev.run(bufs["insn"], count, 60)
        outs.append(np.frombuffer(dev.read(bufs["out"], want.nbytes), np.int8).reshape(want.shape))
        assert np.array_equal(outs[-1], want), how
        assert np.frombuffer(dev.read(bufs["uop"], len(uops)), np.uint8).tobytes() == uops, how
        assert dev.read(bufs["insn"], len(stream)) == stream, how
    assert one.stats() == two.stats() and one.stats()["gemm_counter"] > 0
    assert np.array_equal(one.acc, two.acc) and np.array_equal(one.dram.data, two.dram.data)
    assert len(set(outs[0].reshape(-1).tolist())) > 50     # informative: not clipped, not zero


def test_run_stream_refuses_a_uop_kernel_outside_its_buffer_like_write():
    dev = FsimDevice()
    stream, count, uops, bufs, _ = gemm_program(dev, np.random.default_rng(1))
    small = dev.alloc(16)                                    # 16 bytes for 32 bytes of uops
    with pytest.raises(DramAccessError, match="host write"):
        dev.run_stream(stream, count, bufs["insn"], uops, small, timeout=60)
    assert dev.stats()["gemm_counter"] == 0                  # nothing ran


class TwoStepFsim(FsimDevice):
    """A subclass that changes ``run``: run_stream must go through it."""

    calls = 0

    def run(self, insn_phys, insn_count, timeout=None):
        type(self).calls += 1
        super().run(insn_phys, insn_count, timeout)


@pytest.mark.parametrize("kind", [FsimDevice, TwoStepFsim])
def test_the_command_queue_hands_streams_over_in_one_call_unless_a_subclass_changes_a_step(kind, monkeypatch):
    dev = kind()
    calls = {"engine": 0}
    stream_fn = dev.engine.stream

    def counted(*a, **k):
        calls["engine"] += 1
        return stream_fn(*a, **k)
    monkeypatch.setattr(dev.engine, "stream", counted)
    TwoStepFsim.calls = 0
    q = vta_runtime.CommandQueue(dev)
    try:
        q.synchronize(60)
    finally:
        q.close()
    if kind is FsimDevice:
        assert calls["engine"] == 1 and TwoStepFsim.calls == 0
    else:
        assert calls["engine"] == 0 and TwoStepFsim.calls == 1


class RunCountingProxy:
    """A device proxy as the bench and the profiler write them: wraps run, forwards the rest."""

    def __init__(self, dev):
        self._dev, self.config, self.runs = dev, dev.config, 0

    def run(self, insn_phys, insn_count, timeout=None):
        self.runs += 1
        return self._dev.run(insn_phys, insn_count, timeout)

    def __getattr__(self, name):
        return getattr(self._dev, name)


def test_a_proxy_that_forwards_run_stream_by_getattr_still_sees_every_run():
    proxy = RunCountingProxy(FsimDevice())
    q = vta_runtime.CommandQueue(proxy)
    try:
        q.synchronize(60)
        q.synchronize(60)
    finally:
        q.close()
    assert proxy.runs == 2
