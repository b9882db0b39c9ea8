"""Random whole networks (vta_compiler.testing.netfuzz): 20 of them through from_onnx -> quantize ->
graph_pack -> build on fsim, each equal bit for bit to the CPU run of its quantized module; a failing
network is shrunk and saved as a small ONNX reproducer (``nox -s netfuzz`` runs 1,000 on fsim and 100
on tsim)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")
onnx = pytest.importorskip("onnx")

from sim.fsim import FsimDevice  # noqa: E402
from vta_compiler.testing import netfuzz  # noqa: E402
from vta_hw.spec import Opcode  # noqa: E402

SEEDS = range(20017, 20037)   # 20 networks with every kind of operation among them
MAX_OPS = 4   # small networks here (about 3 s each); nox -s netfuzz draws up to 7 operations


def test_twenty_random_networks_equal_the_cpu_run():
    counts, failures = netfuzz.fuzz(len(SEEDS), SEEDS[0], quiet=True, save_failures=False, max_ops=MAX_OPS)
    assert not failures, "\n".join(f"seed {n.seed}: {o.kind}: {o.detail}\n  {n.describe()}" for n, o, _ in failures)
    assert counts["ok"] >= 18 and counts["informative"] >= 15, counts
    described = " ".join(netfuzz.Network.draw(s, MAX_OPS).describe() for s in SEEDS)
    for what in ("conv ", "conv/g", "depthwise", "convT", "maxpool", "avgpool", "add", "concat", "upsample", "dense",
                 "batch 2", "relu6", "clip", "max"):
        assert what in described, what


def test_a_concat_of_a_layer_and_the_network_input_builds():
    """netfuzz's seed 11 (conv -> relu6, concatenated with the network's input, ...): TVM fused host operators with
    no target of their own and ones built for the host into one function, which graph.build refused as built
    for different targets; no target means the host's."""
    net = netfuzz.Network.draw(11, 7)
    assert "concat" in net.describe()
    got = netfuzz.check(net, "fsim")
    assert got.kind == "ok" and got.informative, got.detail


class StoreCorruptingFsim(FsimDevice):
    """fsim with a fault: after each run, the first row every STORE wrote has the low bit of each byte flipped."""

    def run(self, insn_phys, insn_count, timeout=None):
        super().run(insn_phys, insn_count, timeout)
        words = self.dram.data[insn_phys:insn_phys + 16 * insn_count].view("<u8").reshape(-1, 2)
        for w in words:
            f = self.isa.mem.decode(int(w[0]) | int(w[1]) << 64)
            if f["opcode"] == Opcode.STORE and f["x_size"] and f["y_size"]:
                start = f["dram_base"] * self.config.OUT_ELEM_BYTES
                self.dram.data[start:start + f["x_size"] * self.config.OUT_ELEM_BYTES] ^= 1


def test_a_failing_network_is_shrunk_and_saved_as_a_reproducer(tmp_path, monkeypatch):
    monkeypatch.setattr(netfuzz, "OUT_DIR", tmp_path)
    def applied(n):
        n.onnx()
        return len(n.applied)
    net = next(n for n in (netfuzz.Network.draw(s, 3) for s in range(100, 200)) if applied(n) == 3)
    got = netfuzz.check(net, StoreCorruptingFsim)
    assert got.kind == "mismatch", got
    small, small_got = netfuzz.shrink(net, got, StoreCorruptingFsim)
    assert small_got.kind == "mismatch" and len(small.ops) < len(net.ops)
    path = netfuzz.save(small, small_got, StoreCorruptingFsim)
    assert path.suffix == ".onnx" and path.with_suffix(".npz").exists()
    model = onnx.load(str(path))
    assert applied(small) < 3 and len(model.graph.node) < len(net.onnx().graph.node)
    assert netfuzz.replay(path, StoreCorruptingFsim).kind == "mismatch"
    assert netfuzz.replay(path, "fsim").kind == "ok"          # the device was wrong, not the network
    z = np.load(path.with_suffix(".npz"))
    assert z["x"].shape == small.input_shape()


EXTENDED_SEEDS = (30077, 30088, 30101, 30171)   # among them every int8 activation mode


def test_random_networks_with_int8_activations_on_vta_equal_the_cpu_run():
    """Extended networks (hard-swish, hard-sigmoid, squeeze-excite; ONNX's operators and PyTorch's forms) with the ISA
    extensions alu_mul and acc_8bit: every int8 activation on VTA's ALU, each network equal to the CPU run."""
    from vta_compiler.top.activation import MODES
    modes = set()
    with netfuzz.with_extensions(("alu_mul", "acc_8bit")):
        for seed in EXTENDED_SEEDS:
            net = netfuzz.Network.draw(seed, MAX_OPS, extended=True)
            got = netfuzz.check(net, "fsim")
            assert got.kind == "ok" and got.informative and got.vta_activations, (seed, got, net.describe())
            modes |= set(got.vta_activations)
    assert modes == set(MODES), modes


def test_extended_draws_leave_the_other_networks_as_they_were():
    """Without extensions a seed draws the network it always drew (saved reproducers and seeded tests stay valid)."""
    assert netfuzz.Network.draw(30077, MAX_OPS).describe() == \
        "batch 2, input 1x9x9: conv 1->32 k5s1p2+relu6, add(1x1 1->32)"
    assert netfuzz.Network.draw(30077, MAX_OPS, extended=True).describe() == \
        "batch 2, input 1x9x9: conv 1->32 k5s1p2+hardswish, hardsigmoid"
