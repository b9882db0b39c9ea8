"""``Operator``: everything VTA knows about one kind of layer, in one object.

An operator owns its workload type (a frozen dataclass, the same everywhere: in records, tasks, kernels and
placement reports), whether VTA supports a workload and why not, the compute (a TE/TIR layer), its
schedule, its tuning space (knobs and the validity rule), what a tiling needs of the on-chip buffers,
the cost model, the weight packing, the issued MACs, the data of a tuning measurement and, for whole
networks, how a Relax layer maps onto it. ``vta_compiler.top`` defines one subclass per kind, each in
its own file, and registers one object of it (``registry.register``); the graph flow, the kernel
emission, task extraction, records and dispatch find it by workload type or kind.

The tiling is a frozen dataclass whose fields are the knobs, so records store it as a dict.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from typing import Any

import numpy as np

from ..environment import Environment, get_env
from ..transform.common import VTACompileError
from . import dispatch, registry
from .space import BufferNeeds, Knob, LayerData

#: PrimFunc attribute of a layer made by ``Operator.compute``: its operator kind and workload (JSON)
WORKLOAD_ATTR = "vta.workload"


def with_workload(func, op: Operator, wkl):
    """``func`` recording that it computes workload ``wkl`` of operator ``op`` (schedules read it back)."""
    return func.with_attr(WORKLOAD_ATTR, json.dumps({"kind": op.kind, "workload": op.workload_to_json(wkl)}))


def recorded_workload(func):
    """(operator, workload) that a layer made by ``Operator.compute`` records, or None."""
    attrs = getattr(func, "attrs", None)
    if attrs is None or WORKLOAD_ATTR not in attrs:
        return None
    try:
        d = json.loads(str(attrs[WORKLOAD_ATTR]))
        op = registry.get(d["kind"])
        return op, op.workload_from_json(d["workload"])
    except (ValueError, KeyError, TypeError):
        return None


class Operator:
    """One operator kind. Subclass it, set the three class attributes, implement the methods that raise
    ``NotImplementedError``, and ``registry.register`` one object (see the guide "Adding an operator")."""

    kind: str = ""
    #: whether ``compute`` takes ``requant`` (a fixed-point multiply in the epilogue, ``top.common.Requant``)
    takes_requant: bool = False
    workload_type: type = object
    tiling_type: type = object
    #: the core Relax ops graph_pack can offload to this operator (the first operator claiming an op
    #: counts its MACs when it stays on the CPU)
    relax_ops: tuple[str, ...] = ()
    #: options of graph_pack this operator reads, with their allowed values
    options: dict[str, tuple] = {}
    #: the graph_pack option that places the host chains this operator takes (``host_chain``), and what the
    #: placement notes call them
    host_option: str = ""
    host_what: str = ""

    # ---------------------------------------------------------------------------------------- workloads
    def accepts(self, obj) -> bool:
        """True if ``obj`` is a workload of this operator in a form other than ``workload_type``."""
        return False

    def workload(self, obj):
        """``obj`` as this operator's workload type (a TypeError if it is not one)."""
        if isinstance(obj, self.workload_type):
            return obj
        raise TypeError(f"{self.kind}: {obj!r} is not a {self.workload_type.__name__}")

    def workload_to_json(self, wkl) -> dict:
        return dataclasses.asdict(self.workload(wkl))

    def workload_from_json(self, obj: dict):
        return self.workload_type(**obj)

    def describe(self, wkl) -> str:
        return f"{self.kind} {wkl}"

    def label(self, wkl) -> str:
        """What a placement row calls a layer of this workload."""
        return self.kind

    def kernel_name(self, wkl) -> str:
        """The shape part of a network kernel's name."""
        return "_".join(str(v) for v in dataclasses.astuple(self.workload(wkl)))

    def useful_macs(self, wkl) -> int:
        return int(self.workload(wkl).macs)

    def issued_macs(self, wkl, env: Environment) -> int:
        """Multiply-accumulates the GEMMs issue (padded channels and zero weights of a tile included)."""
        raise NotImplementedError

    # ---------------------------------------------------------------------------------------- support
    def shape_refusal(self, wkl, env: Environment) -> str | None:
        """Why VTA cannot run this shape at all (before any tiling is tried), or None."""
        return None

    def refusal(self, wkl, env: Environment | None = None, acc_operands: int = 1) -> str | None:
        """None if VTA can run the workload (``acc_operands`` per-channel tensors in ACC), else why, in one
        sentence."""
        env = env or get_env()
        reason = self.shape_refusal(wkl, env)
        if reason:
            return reason
        try:
            self.tiling(wkl, env, acc_operands)
        except VTACompileError as e:
            return str(e)
        return None

    # ---------------------------------------------------------------------------------------- compute
    def compute(self, wkl, env: Environment | None = None, *, shift: int = 8, bias: bool = True,
                clip: tuple[int, int] | None = (0, 127), channel_shift: bool = False):
        """A whole layer as a PrimFunc: ``res = int8(clip((op(data, weight) + bias) >> shift))`` over packed
        tensors; it records its workload (``workload_of``) for the schedule."""
        raise NotImplementedError

    def schedule(self, func, tiling=None, env: Environment | None = None, mock: tuple[str, ...] = ()):
        """The ``s_tir.Schedule`` of a layer made by ``compute``; ``tiling`` defaults to :meth:`tiling` of the
        workload the function records."""
        raise NotImplementedError

    def workload_of(self, func):
        """The workload of this operator that a function made by :meth:`compute` records, or None."""
        got = recorded_workload(func)
        return got[1] if got is not None and got[0].workload_type is self.workload_type else None

    def scheduled(self, wkl, t, env: Environment, acc_operands: int, shift: int | None):
        """The scheduled layer a tuning measurement builds: a bias, and an immediate ``shift`` or (with two ACC
        operands) a per-channel shift tensor."""
        func = self.compute(wkl, env, shift=shift or 0, bias=True, channel_shift=acc_operands >= 2)
        return self.schedule(func, t, env=env)

    # ---------------------------------------------------------------------------------------- tiling space
    def knobs(self, wkl, env: Environment) -> list[Knob]:
        raise NotImplementedError

    def check(self, wkl, t, env: Environment) -> str | None:
        """The schedule's validity rule: why it refuses tiling ``t`` (the tiles divide the loops, the threads
        divide the tiles, ...), or None."""
        return None

    def valid(self, wkl, t, env: Environment) -> bool:
        return self.check(wkl, t, env) is None

    def needs(self, wkl, t, env: Environment, acc_operands: int = 1) -> BufferNeeds:
        raise NotImplementedError

    def fits(self, wkl, t, env: Environment, acc_operands: int = 1) -> bool:
        return self.needs(wkl, t, env, acc_operands).fit(env)

    def estimate(self, wkl, t, env: Environment) -> float:
        """The cost model: estimated device cycles of tiling ``t``."""
        raise NotImplementedError

    def smallest(self, wkl, env: Environment):
        """The smallest tiling (the refusal message says what it needs)."""
        return self.tiling_type()

    def tiling_from_knobs(self, knobs: dict):
        return self.tiling_type(**knobs)

    def knob_values(self, t) -> dict:
        return dataclasses.asdict(t)

    def legal(self, wkl, env: Environment, acc_operands: int = 1) -> list:
        """Every tiling of the knobs' product that the schedule accepts and that fits, in knob order."""
        wkl = self.workload(wkl)
        knobs = self.knobs(wkl, env)
        names = [k.name for k in knobs]
        out = []
        for values in itertools.product(*(k.values for k in knobs)):
            t = self.tiling_type(**dict(zip(names, values)))
            if self.valid(wkl, t, env) and self.fits(wkl, t, env, acc_operands):
                out.append(t)
        return out

    def model_choice(self, wkl, env: Environment, acc_operands: int = 1):
        """The tiling the cost model picks among the legal ones (what a build uses without records)."""
        wkl = self.workload(wkl)
        best = min(self.legal(wkl, env, acc_operands), key=lambda t: self.estimate(wkl, t, env), default=None)
        if best is None:
            raise VTACompileError(f"{self.kind} {wkl}: no tiling fits the on-chip buffers of {env.MODEL}: the smallest "
                                  "tile (one block of every loop) needs "
                                  + self.needs(wkl, self.smallest(wkl, env), env, acc_operands).excess(env))
        return best

    def tiling(self, wkl, env: Environment | None = None, acc_operands: int = 1, tuned: bool = True):
        """The tiling of a workload: the best measured one (the active ``apply_history_best`` records, else the
        records shipped with the package) when ``tuned`` and there is one, else the cost model's choice
        (``acc_operands``: per-channel epilogue tensors in ACC, 1 for a bias, 2 for a bias and a shift)."""
        env = env or get_env()
        wkl = self.workload(wkl)
        key = (wkl, env.config.hash(), acc_operands, tuned and dispatch.context_key())
        chosen = self.__dict__.setdefault("_chosen", {})
        if key not in chosen:           # the cost model's search is worth remembering (graph_pack asks often)
            reason = self.shape_refusal(wkl, env)
            if reason:
                raise VTACompileError(f"{self.kind} {wkl}: {reason}")
            best = dispatch.lookup(self.kind, wkl, env, acc_operands) if tuned else None
            if len(chosen) > 4096:
                chosen.clear()
            chosen[key] = best if best is not None else self.model_choice(wkl, env, acc_operands)
        return chosen[key]

    def candidates(self, wkl, env: Environment, acc_operands: int) -> list:
        """Every legal tiling that fits, best first by the cost model (the model's choice first)."""
        wkl = self.workload(wkl)
        ranked = sorted(enumerate(self.legal(wkl, env, acc_operands)),
                        key=lambda it: (self.estimate(wkl, it[1], env), it[0]))
        return [t for _, t in ranked]

    def size(self, wkl, env: Environment) -> int:
        """Knob combinations before any filtering."""
        return math.prod(len(k.values) for k in self.knobs(self.workload(wkl), env))

    def features(self, wkl, t, env: Environment, knobs: list[Knob]) -> list[float]:
        """Numbers describing a candidate for the tuner's learned model: the log of the cost model's estimate,
        log2 of every numeric knob, one-hot of every other."""
        f = [math.log(max(self.estimate(wkl, t, env), 1.0))]
        for k in knobs:
            v = getattr(t, k.name)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                f.append(math.log2(max(v, 1)))
            else:
                f.extend(1.0 if v == x else 0.0 for x in k.values)
        return f

    # ---------------------------------------------------------------------------------------- data
    def pack_weights(self, w: np.ndarray, wkl, env: Environment) -> np.ndarray:
        """Weights in the network's layout (zero-padded to the workload's channels) -> the kernel's layout."""
        raise NotImplementedError

    def pack_channels(self, v: np.ndarray, wkl, env: Environment) -> np.ndarray:
        """One int32 value per output channel (zero-padded to the workload's) -> the layout of a bias operand."""
        raise NotImplementedError

    def data(self, wkl, env: Environment, acc_operands: int, seed: int = 0) -> LayerData:
        """Random inputs of one tuning measurement, packed, and the numpy reference of its output."""
        raise NotImplementedError

    def unpack(self, out: np.ndarray) -> np.ndarray:
        """The layer's packed output in the reference's layout."""
        raise NotImplementedError

    # ---------------------------------------------------------------------------------------- graphs
    def pattern(self):
        """The Relax dataflow pattern of the core op (graph_pack adds VTA's epilogue after it), or None."""
        return None

    def from_relax(self, attrs, x_shape: tuple[int, ...], weight: np.ndarray, out_shape: tuple[int, ...],
                   env: Environment, options: dict) -> Any:
        """A core op that matched :meth:`pattern` -> an :class:`Offload`, the reason VTA cannot run it (a str), or
        None when the op is not this operator's to take (graph_pack then asks the next operator whose pattern
        matches)."""
        raise NotImplementedError

    def host_chain(self, node, users: dict, env: Environment, options: dict) -> Any:
        """For an operator that takes over int8 ops the quantizer leaves on the host (no GEMM pattern; pooling):
        the chain starting at graph node ``node`` (``users``: node id -> its users) as ``(Offload, nodes, input,
        output)`` (the chain's nodes, its int8 input node and its last node), why VTA cannot run it (a str), or
        None when it is not this operator's."""
        return None

    def host_work(self, wkl) -> tuple[int, int, float]:
        """What the host does for a workload taken by :meth:`host_chain`: (elements, operations per element,
        bytes per element), for ``graph.host_cost``'s estimate."""
        raise NotImplementedError

    def residual_workload(self, wkl, env: Environment) -> Any:
        """The workload of this layer with a residual add fused into its epilogue (an int8 shortcut of the
        output's shape, see ``vta_compiler.top.common.Residual``), or why it cannot take one (a str)."""
        return f"{self.kind} layers have no fused residual add"

    def placement_refusal(self, off: Offload, env: Environment, acc_operands: int) -> str | None:
        """The placement note of a matched layer VTA cannot run (no tiling fits), or None."""
        reason = self.refusal(off.workload, env, acc_operands)
        return f"does not fit VTA's buffers: {reason}" if reason else None

    def host_macs(self, out_shape, arg_shapes) -> int:
        """MACs of one of ``relax_ops`` left on the CPU."""
        return 0


@dataclasses.dataclass
class Offload:
    """How graph_pack runs a matched Relax layer on VTA: the workload, its weights in the network's layout
    (the operator pads and packs them) and where the layer's data differ from the kernel's.

    The kernel reads a plain input of ``input_shape`` (2-D or 4-D; default: the layer's input shape) and writes
    a plain output of ``output_shape`` (default: the layer's output shape). When only the shapes differ, the
    input and output are views (reshapes) of the layer's; ``prepare(x, emit, name, shape) -> x`` is a host
    transform of the plain input for a kernel that reads something else (a folded first layer). Per-channel
    epilogue constants run along ``channel_axis`` of the layer's output."""
    op: Operator
    workload: Any
    weight: np.ndarray
    params: dict = dataclasses.field(default_factory=dict)     # what the operator read from the op's attributes
    prepare: Any = None
    input_shape: tuple[int, ...] | None = None
    output_shape: tuple[int, ...] | None = None
    channel_axis: int = 1
    note: str = ""
    #: further int8 graph nodes the kernel reads after its input, packed (an elementwise multiply's second operand)
    operands: tuple = ()
