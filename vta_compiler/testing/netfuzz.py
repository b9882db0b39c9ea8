"""Whole networks, fuzzed: random ONNX networks through ``graph.from_onnx -> quantize -> graph_pack ->
build``, each VTA run equal bit for bit to the CPU run (``tvm.compile(qmod, "llvm")``) of its quantized
module.

``python -m vta_compiler.testing.netfuzz N [--seed S] [--device fsim|tsim]`` (``nox -s netfuzz``) builds
networks ``S .. S+N-1``. A network is a random list of operations on one running tensor: convolutions
(plain, grouped, depthwise; 1x1, 3x3, 5x5; stride 1 or 2), transposed convolutions, dense layers (after a
flatten or a global average pool), max and average pooling, residual adds and channel concats with an
earlier tensor of the same shape, nearest-neighbour upsampling, and the activations the quantizer knows
(ReLU, ReLU6, a clip, a maximum with a constant); channel counts and spatial sizes are mostly odd, the
batch is 1 or 2. Weights and inputs come from the seed; two input batches calibrate, a third is compared.

``--extensions alu_mul,acc_8bit`` runs the networks on the current configuration with those ISA extensions
on, and draws from more operations: hard-swish and hard-sigmoid (ONNX's operators or PyTorch's
``x * relu6(x + 3) / 6`` forms), the elementwise multiply of two tensors and squeeze-excite blocks (global
average pool, 1x1 convolution, hard-sigmoid, channel multiply); with both extensions ``graph_pack`` puts
every int8 activation on VTA's ALU (``activation="vta"``), so they are compared bit for bit too.

A network that fails (the VTA run differs from the CPU run, or a step raises anything but a refusal
that names its reason: ``QuantizationError``, ``GraphError``) is shrunk: operations are removed one at a
time while it still fails the same way, and the smallest one is saved as ``build/netfuzz/net-<seed>.onnx``
with its inputs (``.npz``), which ``--replay FILE.onnx`` runs again.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

OUT_DIR = Path(__file__).resolve().parents[2] / "build" / "netfuzz"
ACTIVATIONS = ("none", "relu", "relu", "relu6", "clip", "max")
ODD_CHANNELS = (3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 31, 33)
OPSET = 17


# ---------------------------------------------------------------------------- the random list
#: the operations ``extended`` networks draw from as well (int8 activations with ``alu_mul``), and the activations
#: after their layers
EXTENDED_KINDS = ("hswish", "hswish", "hsigmoid", "mul", "se", "se")
EXTENDED_ACTIVATIONS = ("hswish", "hswish", "hsigmoid")


def random_ops(rnd: random.Random, n: int, extended: bool = False) -> list[dict]:
    """``n`` random operations; each is applied if it fits the running tensor, else skipped (so any
    sub-list is a network too, which is what shrinking needs). ``extended``: with the activations of
    ``EXTENDED_KINDS`` too (the other networks' draws are as they were)."""
    kinds = ["conv", "conv", "conv", "grouped", "depthwise", "convT", "pool", "add", "add", "concat", "upsample",
             "act", "gemm"] + (list(EXTENDED_KINDS) if extended else [])
    ops = []
    for _ in range(n):
        kind = rnd.choice(kinds)
        op = {"kind": kind, "act": rnd.choice(ACTIVATIONS + (EXTENDED_ACTIVATIONS if extended else ())),
              "pick": rnd.randrange(1 << 16),
              "co": rnd.choice(ODD_CHANNELS) if rnd.random() < 0.8 else rnd.choice((8, 16, 24, 32)),
              "bias": rnd.random() < 0.8, "seed": rnd.randrange(1 << 30)}
        if kind in ("conv", "grouped", "depthwise"):
            op["k"] = rnd.choice((1, 3, 3, 5)) if kind != "depthwise" else rnd.choice((3, 3, 5))
            op["stride"] = rnd.choice((1, 1, 2))
            op["pad"] = op["k"] // 2 if rnd.random() < 0.8 else 0
            op["groups"] = rnd.choice((2, 3, 4, 5)) if kind == "grouped" else 1
            op["mult"] = rnd.choice((1, 1, 2)) if kind == "depthwise" else 1
        elif kind == "convT":
            op["k"] = rnd.choice((2, 3, 4))
            op["stride"] = rnd.choice((1, 2, 2))
            op["pad"] = rnd.randrange(0, op["k"] // 2 + 1)
            op["out_pad"] = rnd.randrange(0, op["stride"]) if op["stride"] > 1 else 0
        elif kind == "pool":
            op["max"] = rnd.random() < 0.6
            op["k"] = rnd.choice((2, 3))
            op["stride"] = rnd.choice((1, 2, 2))
            op["pad"] = rnd.randrange(0, op["k"] // 2 + 1)
        elif kind == "gemm":                            # ONNX Gemm: a dense layer
            op["gap"] = rnd.random() < 0.4
        ops.append(op)
    return ops


@dataclass
class Network:
    """A network drawn from ``seed`` (or a sub-list of its operations while shrinking)."""
    seed: int
    batch: int
    channels: int
    size: int
    ops: list[dict]
    applied: list[str] = field(default_factory=list)   # what each applied operation was, for messages

    @classmethod
    def draw(cls, seed: int, max_ops: int = 7, extended: bool = False) -> Network:
        rnd = random.Random(seed)
        return cls(seed, rnd.choice((1, 1, 2)), rnd.choice((1, 3, 3, 5, 7, 16)), rnd.choice((7, 9, 11, 13, 15)),
                   random_ops(rnd, rnd.randrange(2, max_ops + 1), extended))

    def input_shape(self) -> tuple[int, ...]:
        return (self.batch, self.channels, self.size, self.size)

    def inputs(self) -> tuple[list[np.ndarray], np.ndarray]:
        """Two calibration batches and the compared one."""
        rng = np.random.default_rng(self.seed)
        xs = [rng.normal(0, 1, self.input_shape()).astype(np.float32) for _ in range(3)]
        return xs[:2], xs[2]

    def onnx(self):
        """The ONNX model; ``applied`` lists the operations it took (the others did not fit)."""
        from onnx import TensorProto, helper, numpy_helper
        b = _Builder(helper, numpy_helper)
        cur, shape = "x", self.input_shape()
        seen: list[tuple[str, tuple[int, ...]]] = [(cur, shape)]
        self.applied = []
        for op in self.ops:
            got = b.apply(op, cur, shape, seen)
            if got is None:
                continue
            cur, shape, what = got
            seen.append((cur, shape))
            self.applied.append(what)
        if not self.applied:   # at least one layer: a 1x1 convolution
            cur, shape, what = b.apply({"kind": "conv", "co": 5, "k": 1, "stride": 1, "pad": 0, "groups": 1, "mult": 1,
                                        "bias": True, "act": "relu", "seed": self.seed, "pick": 0}, cur, shape, seen)
            self.applied.append(what)
        g = helper.make_graph(b.nodes, f"netfuzz_{self.seed}",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(self.input_shape()))],
                              [helper.make_tensor_value_info(cur, TensorProto.FLOAT, list(shape))], b.inits)
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = 8
        return model

    def describe(self) -> str:
        if not self.applied:
            self.onnx()
        return f"batch {self.batch}, input {self.channels}x{self.size}x{self.size}: " + ", ".join(self.applied)


class _Builder:
    def __init__(self, helper, numpy_helper):
        self.helper, self.numpy_helper = helper, numpy_helper
        self.nodes, self.inits = [], []
        self.k = 0

    def name(self, stem: str) -> str:
        self.k += 1
        return f"{stem}{self.k}"

    def const(self, arr: np.ndarray, stem: str) -> str:
        n = self.name(stem)
        self.inits.append(self.numpy_helper.from_array(np.asarray(arr, np.float32), n))
        return n

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        out = self.name(op.lower())
        self.nodes.append(self.helper.make_node(op, inputs, [out], **attrs))
        return out

    def act(self, x: str, kind: str) -> tuple[str, str]:
        if kind == "relu":
            return self.node("Relu", [x]), "+relu"
        if kind == "relu6":
            return self.node("Clip", [x, self.const(np.float32(0), "lo"), self.const(np.float32(6), "hi")]), "+relu6"
        if kind == "clip":
            return self.node("Clip", [x, self.const(np.float32(-1), "lo"), self.const(np.float32(2), "hi")]), "+clip"
        if kind == "max":
            return self.node("Max", [x, self.const(np.float32(0.25), "floor")]), "+max"
        if kind == "hswish":          # after a layer: ONNX's operator; the operation "hswish" draws both forms
            return self.node("HardSwish", [x]), "+hardswish"
        if kind == "hsigmoid":        # after a layer: PyTorch's relu6(x + 3) / 6, which folds into it
            return self.hard_sigmoid(x, True), "+hardsigmoid"
        return x, ""

    def weights(self, op: dict, shape: tuple[int, ...], fan_in: int) -> tuple[str, str | None]:
        rng = np.random.default_rng(op["seed"])
        w = self.const(rng.normal(0, np.sqrt(2 / max(fan_in, 1)), shape), "w")
        bias = self.const(rng.normal(0.1, 0.2, shape[0] if op["kind"] != "convT" else shape[1] * op.get("g", 1)),
                          "b") if op["bias"] else None
        return w, bias

    def hard_sigmoid(self, x: str, pytorch: bool) -> str:
        if pytorch:       # relu6(x + 3) / 6
            y = self.node("Add", [x, self.const(np.float32(3), "three")])
            y = self.node("Clip", [y, self.const(np.float32(0), "lo"), self.const(np.float32(6), "hi")])
            return self.node("Div", [y, self.const(np.float32(6), "six")])
        return self.node("HardSigmoid", [x], alpha=0.2, beta=0.5)

    def extended(self, op: dict, x: str, shape: tuple[int, ...], seen):
        """The ``EXTENDED_KINDS`` operations (4-D tensors only)."""
        kind, pytorch = op["kind"], op["pick"] % 2 == 1
        form = " (pytorch form)" if pytorch else ""
        if kind == "hswish":
            y = self.node("Mul", [x, self.hard_sigmoid(x, True)]) if pytorch else self.node("HardSwish", [x])
            return y, shape, "hardswish" + form
        if kind == "hsigmoid":
            return self.hard_sigmoid(x, pytorch), shape, "hardsigmoid" + form
        if kind == "mul":
            cands = [nm for nm, sh in seen[:-1] if sh == shape]
            if not cands:
                return None
            return self.node("Mul", [x, cands[op["pick"] % len(cands)]]), shape, "mul"
        # squeeze-excite: x * hard_sigmoid(conv1x1(relu(conv1x1(gap(x)))))
        n, c = shape[:2]
        mid = max(1, c // 4)
        g = self.node("GlobalAveragePool", [x])
        w1, b1 = self.weights({**op, "kind": "conv"}, (mid, c, 1, 1), c)
        h = self.node("Relu", [self.node("Conv", [g, w1] + ([b1] if b1 else []), kernel_shape=[1, 1])])
        w2, b2 = self.weights({**op, "kind": "conv", "seed": op["seed"] + 1}, (c, mid, 1, 1), mid)
        gate = self.hard_sigmoid(self.node("Conv", [h, w2] + ([b2] if b2 else []), kernel_shape=[1, 1]), pytorch)
        return self.node("Mul", [x, gate]), shape, f"se {c}->{mid}" + form

    def apply(self, op: dict, x: str, shape: tuple[int, ...], seen):
        kind = op["kind"]
        if len(shape) == 2 and kind != "gemm" and kind != "act":
            return None                                     # after a dense layer only dense layers follow
        if kind in EXTENDED_KINDS:
            return self.extended(op, x, shape, seen)
        if kind in ("conv", "grouped", "depthwise"):
            n, c, h, w = shape
            k, s, p = op["k"], op["stride"], op["pad"]
            if h + 2 * p < k or w + 2 * p < k:
                return None
            if kind == "depthwise":
                groups, co = c, c * op["mult"]
            elif kind == "grouped":   # a divisor of the channels (not 1, not all of them)
                divisors = [g for g in range(2, c) if c % g == 0]
                if not divisors:
                    return None
                groups = divisors[op["pick"] % len(divisors)]
                co = groups * max(1, op["co"] // groups)
            else:
                groups, co = 1, op["co"]
            wt, bias = self.weights(op, (co, c // groups, k, k), c // groups * k * k)
            y = self.node("Conv", [x, wt] + ([bias] if bias else []), kernel_shape=[k, k], strides=[s, s],
                          pads=[p] * 4, group=groups)
            ho, wo = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
            y, a = self.act(y, op["act"])
            what = {"conv": "conv", "grouped": f"conv/g{groups}", "depthwise": "depthwise"}[kind]
            return y, (n, co, ho, wo), f"{what} {c}->{co} k{k}s{s}p{p}{a}"
        if kind == "convT":
            n, c, h, w = shape
            k, s, p, op_ = op["k"], op["stride"], op["pad"], op["out_pad"]
            ho = (h - 1) * s - 2 * p + k + op_
            if ho < 1 or h * s > 64:
                return None
            co = op["co"]
            wt, bias = self.weights(op, (c, co, k, k), c * k * k // max(s * s, 1))
            y = self.node("ConvTranspose", [x, wt] + ([bias] if bias else []), kernel_shape=[k, k], strides=[s, s],
                          pads=[p] * 4, output_padding=[op_, op_])
            y, a = self.act(y, op["act"])
            return y, (n, co, ho, ho), f"convT {c}->{co} k{k}s{s}p{p}op{op_}{a}"
        if kind == "pool":
            n, c, h, w = shape
            k, s, p = op["k"], op["stride"], op["pad"]
            if h + 2 * p < k:
                return None
            y = self.node("MaxPool" if op["max"] else "AveragePool", [x], kernel_shape=[k, k], strides=[s, s],
                          pads=[p] * 4)
            ho = (h + 2 * p - k) // s + 1
            return y, (n, c, ho, ho), f"{'max' if op['max'] else 'avg'}pool k{k}s{s}p{p}"
        if kind in ("add", "concat"):
            cands = [(nm, sh) for nm, sh in seen[:-1] if len(sh) == 4 and sh[0] == shape[0] and sh[2:] == shape[2:]]
            if not cands:
                return None
            other, osh = cands[op["pick"] % len(cands)]
            if kind == "add":
                what = "add"
                if osh != shape:   # a projection shortcut: a 1x1 convolution to this tensor's channels
                    wt, bias = self.weights({**op, "kind": "conv"}, (shape[1], osh[1], 1, 1), osh[1])
                    other = self.node("Conv", [other, wt] + ([bias] if bias else []), kernel_shape=[1, 1])
                    what = f"add(1x1 {osh[1]}->{shape[1]})"
                y, a = self.act(self.node("Add", [x, other]), "relu" if op["act"] != "none" else "none")
                return y, shape, f"{what}{a}"
            y = self.node("Concat", [x, other], axis=1)
            return y, (shape[0], shape[1] + osh[1], *shape[2:]), f"concat +{osh[1]}"
        if kind == "upsample":
            n, c, h, w = shape
            if h * 2 > 48:
                return None
            y = self.node("Resize", [x, "", self.const(np.array([1, 1, 2, 2], np.float32), "scales")],
                          mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
            return y, (n, c, 2 * h, 2 * w), "upsample x2"
        if kind == "act":
            if op["act"] == "none":
                return None
            y, a = self.act(x, op["act"])
            return y, shape, a[1:]
        # dense
        if len(shape) == 4:
            if op["gap"]:
                x = self.node("GlobalAveragePool", [x])
                shape = (shape[0], shape[1], 1, 1)
            x = self.node("Flatten", [x], axis=1)
            shape = (shape[0], int(np.prod(shape[1:])))
        n, f = shape
        if f > 4096:
            return None
        co = op["co"]
        wt, bias = self.weights(op, (co, f), f)
        y = self.node("Gemm", [x, wt] + ([bias] if bias else []), transB=1)
        y, a = self.act(y, op["act"])
        return y, (n, co), f"{'gap+' if op['gap'] else ''}dense {f}->{co}{a}"


# ---------------------------------------------------------------------------- one network
@dataclass
class Outcome:
    kind: str                      # "ok", "refused" (a QuantizationError/GraphError naming why), "mismatch", "error"
    detail: str = ""
    vta_share: float = 0.0
    informative: bool = False      # the compared output has more than a few distinct values
    vta_activations: tuple[str, ...] = ()    # the int8 activations (top.activation's modes) that ran on VTA

    @property
    def failed(self) -> bool:
        return self.kind in ("mismatch", "error")

    def same_failure(self, other: Outcome) -> bool:
        return other.kind == self.kind and (self.kind == "mismatch" or other.detail.split(":")[0] ==
                                            self.detail.split(":")[0])


def open_device(name):
    """A fresh device for the runtime: fsim or tsim of the current configuration (or ``name()``, a factory)."""
    import vta_compiler as vta
    if callable(name):
        return name()
    cfg = vta.get_env().config
    if name == "tsim":
        from sim.tsim import TsimDevice
        return TsimDevice(cfg, progress=lambda msg: None)
    from sim.fsim import FsimDevice
    return FsimDevice(cfg)


def check_model(model, calibration: list[np.ndarray], x: np.ndarray, device="fsim",
                pack_options: dict | None = None) -> Outcome:
    """``model`` through the graph pipeline on ``device``, compared with the CPU run of its quantized module
    (``pack_options``: ``graph_pack``'s keywords)."""
    import tvm
    from tvm import relax

    import vta_runtime
    from vta_compiler import graph
    from vta_compiler.top.activation import MODES as ACTIVATION_MODES

    def outputs(res):
        items = [res] if hasattr(res, "numpy") else list(res)
        return [r.numpy() for r in items]
    try:
        mod, params = graph.from_onnx(model)
        qmod = graph.quantize(mod, params, calibration=calibration)
        pmod = graph.graph_pack(qmod, **(pack_options or {}))
        placed = graph.placement(pmod)
        share = placed.vta_share
        acts = tuple(m for m in (r["op"].split()[0] for r in placed.vta_rows) if m in ACTIVATION_MODES)
        ex = graph.build(pmod)
        want = outputs(relax.VirtualMachine(tvm.compile(qmod, "llvm"), tvm.cpu())["main"](tvm.runtime.tensor(x)))
        dev = open_device(device)
        vta_runtime.set_command_queue(vta_runtime.CommandQueue(dev))
        try:
            vm = relax.VirtualMachine(ex, [tvm.cpu(), tvm.ext_dev(0)])
            got = outputs(vm["main"](tvm.runtime.tensor(x)))
        finally:
            vta_runtime.set_command_queue(None)
            close = getattr(dev, "close", None)
            if close:
                close()
    except (graph.QuantizationError, graph.GraphError) as exc:
        return Outcome("refused", f"{type(exc).__name__}: {exc}")
    except Exception as exc:   # a crash anywhere in the pipeline is a finding
        return Outcome("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=6)}")
    informative = len(np.unique(want[0])) > 3
    for k, (a, b) in enumerate(zip(got, want)):
        if a.shape != b.shape or a.dtype != b.dtype or not np.array_equal(a, b):
            diff = int(np.count_nonzero(a != b)) if a.shape == b.shape else -1
            return Outcome("mismatch", f"output {k}: {diff} of {b.size} values differ (VTA {a.dtype}{a.shape}, "
                           f"CPU {b.dtype}{b.shape})", share, informative, acts)
    return Outcome("ok", "", share, informative, acts)


def extended_pack_options() -> dict:
    """``graph_pack``'s options for extended networks: every int8 activation on VTA where the configuration
    has the extensions it needs (else the default placement)."""
    import vta_compiler as vta

    from ..top.activation import activation_refusal
    return {} if activation_refusal(vta.get_env()) else {"activation": "vta"}


def check(net: Network, device="fsim", pack_options: dict | None = None) -> Outcome:
    calibration, x = net.inputs()
    if pack_options is None and any(op["kind"] in EXTENDED_KINDS for op in net.ops):
        pack_options = extended_pack_options()
    return check_model(net.onnx(), calibration, x, device, pack_options)


def shrink(net: Network, failure: Outcome, device="fsim", budget: int = 40) -> tuple[Network, Outcome]:
    """Remove operations one at a time while the network still fails the same way (at most ``budget`` tries)."""
    best, tries, changed = net, 0, True
    while changed and tries < budget:
        changed = False
        for i in range(len(best.ops)):
            if tries >= budget:
                break
            cand = Network(best.seed, best.batch, best.channels, best.size, best.ops[:i] + best.ops[i + 1:])
            tries += 1
            got = check(cand, device)
            if got.same_failure(failure):
                best, failure, changed = cand, got, True
                break
    return best, failure


def save(net: Network, outcome: Outcome, device) -> Path:
    import onnx
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    path = OUT_DIR / f"net-{device if isinstance(device, str) else 'custom'}-{net.seed}.onnx"
    onnx.save(net.onnx(), str(path))
    calibration, x = net.inputs()
    np.savez(path.with_suffix(".npz"), cal0=calibration[0], cal1=calibration[1], x=x,
             about=np.array([net.describe(), outcome.kind, outcome.detail]))
    return path


def replay(path: str | Path, device="fsim", extensions: tuple[str, ...] = ()) -> Outcome:
    """A saved reproducer again (``extensions``: the ones its run had on, as ``fuzz``'s)."""
    import onnx
    path = Path(path)
    z = np.load(path.with_suffix(".npz"))
    with with_extensions(extensions):
        return check_model(onnx.load(str(path)), [z["cal0"], z["cal1"]], z["x"], device,
                           extended_pack_options() if extensions else None)


# ---------------------------------------------------------------------------- many networks
def fuzz(n: int, seed: int = 0, device="fsim", quiet: bool = False, save_failures: bool = True,
         max_ops: int = 7, extensions: tuple[str, ...] = ()):
    """Networks ``seed .. seed+n-1`` (of 2..``max_ops`` operations) on ``device``; returns (counts by outcome,
    failures as (network, outcome, reproducer path or None)), each failure shrunk first. ``extensions``: ISA
    extensions turned on in the current configuration for the run, with extended networks (see the module doc)."""
    with with_extensions(extensions):
        return _fuzz(n, seed, device, quiet, save_failures, max_ops, bool(extensions))


@contextlib.contextmanager
def with_extensions(extensions: tuple[str, ...]):
    """The current configuration with ``extensions`` on as well, for the block (nothing changes without any)."""
    if not extensions:
        yield
        return
    import vta_compiler as vta
    cfg = vta.get_env().config
    with vta.Environment(cfg.replace(ISA_EXTENSIONS=tuple(dict.fromkeys((*cfg.ISA_EXTENSIONS, *extensions))))):
        yield


def _fuzz(n, seed, device, quiet, save_failures, max_ops, extended):
    counts = {"ok": 0, "refused": 0, "mismatch": 0, "error": 0, "informative": 0, "vta_activations": 0}
    failures = []
    t0 = time.perf_counter()
    for k in range(n):
        net = Network.draw(seed + k, max_ops, extended)
        got = check(net, device)
        counts[got.kind] += 1
        counts["informative"] += got.informative
        counts["vta_activations"] += len(got.vta_activations)
        if got.failed:
            small, small_got = shrink(net, got, device)
            path = save(small, small_got, device) if save_failures else None
            failures.append((small, small_got, path))
            print(f"FAILED seed {net.seed} ({net.describe()}): {got.kind}: {got.detail.splitlines()[0]}\n"
                  f"  shrunk to {small.describe()}" + (f"\n  reproducer {path}" if path else ""), flush=True)
        elif got.kind == "refused" and not quiet:
            print(f"refused seed {net.seed}: {got.detail.splitlines()[0]}", flush=True)
        if not quiet and (k + 1) % 10 == 0:
            dt = time.perf_counter() - t0
            print(f"  {k + 1}/{n} networks on {device}: {counts} ({dt:.0f} s)", flush=True)
    return counts, failures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m vta_compiler.testing.netfuzz", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("n", nargs="?", type=int, default=100, help="number of networks (default 100)")
    p.add_argument("--seed", type=int, default=int(time.time()) % 100000, help="first seed (default: the clock)")
    p.add_argument("--device", choices=("fsim", "tsim"), default="fsim")
    p.add_argument("--replay", help="run a saved reproducer (.onnx, with its .npz beside it) again")
    p.add_argument("--extensions", default="", help="ISA extensions to turn on, comma-separated (alu_mul,acc_8bit): "
                   "extended networks with int8 activations, run on VTA")
    args = p.parse_args(argv)
    extensions = tuple(e for e in args.extensions.split(",") if e)
    if args.replay:
        got = replay(args.replay, args.device, extensions)
        print(f"{got.kind}: {got.detail}" if got.detail else got.kind)
        return 1 if got.failed else 0
    print(f"netfuzz: {args.n} networks (seeds {args.seed}..{args.seed + args.n - 1}) on {args.device}"
          + (f" with {', '.join(extensions)}" if extensions else ""), flush=True)
    t0 = time.perf_counter()
    counts, failures = fuzz(args.n, args.seed, args.device, extensions=extensions)
    dt = time.perf_counter() - t0
    print(f"{args.n} networks on {args.device}, seeds {args.seed}..{args.seed + args.n - 1}: {counts['ok']} equal, "
          f"{counts['refused']} refused with a reason, {counts['mismatch']} mismatches, {counts['error']} errors "
          f"({counts['informative']} with informative outputs; {counts['vta_activations']} int8 activations on VTA); "
          f"{dt:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
