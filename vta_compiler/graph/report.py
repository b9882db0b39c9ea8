"""Reports: the placement table of a packed network (each op, VTA or CPU, why not VTA, its MACs).

graph_pack writes one row per operator into the packed ``main`` function's ``vta.placement`` attribute
(JSON); :func:`placement` reads it back as a :class:`Placement`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import tvm

from ..environment import Environment
from .ir import GraphError, Node
from .layout import host_reason
from .legalize import VtaLayer
from .match import offloadable_ops

#: the packed main function's attribute holding the placement rows
PLACEMENT_ATTR = "vta.placement"


def vta_row(layer: VtaLayer, env: Environment, kernel: str, tiling) -> dict:
    """The row of a layer on VTA: its epilogue, useful and issued MACs, kernel and tiling."""
    epi = ["+bias"] if layer.bias is not None else []
    if layer.shift is not None:
        epi.append(">>shift[c]" if isinstance(layer.shift, np.ndarray) else f">>{layer.shift}")
    if layer.requant is not None:     # the fixed-point multiply (ALU MUL, ISA extension alu_mul)
        m = "M[c]" if layer.requant.multiplier is None else str(layer.requant.multiplier)
        epi.append(f"*{m}>>{layer.requant.post_shift}")
    if layer.clip is not None:
        epi.append(f"clip{layer.clip}")
    off = layer.offload
    note = off.note
    if layer.residual is not None:
        epi.append(f"residual({layer.shortcut.name})")
        fused = (f"residual add {layer.out.name} fused (ISA extension acc_8bit): shortcut {layer.shortcut.name} "
                 "loaded as int8 (ACC_8BIT) and added in the epilogue" +
                 (f": {layer.residual_why}" if layer.residual_why else ""))
        note = f"{note}; {fused}" if note else fused
    return {"name": layer.name, "op": f"{layer.label} {'+'.join(epi) or ''}".strip(), "device": "VTA",
            "layout": "packed", "macs": layer.macs, "issued_macs": int(layer.op.issued_macs(off.workload, env)),
            "kernel": kernel, "tiling": str(tiling), "fold": off.prepare is not None, "note": note,
            **({"residual": layer.out.name} if layer.residual is not None else {})}


def host_row(n: Node, packed: bool, reason: str | None, acc_8bit: bool = False) -> dict:
    """The row of an operator left on the CPU, with why (and its MACs if VTA could have run its kind);
    ``acc_8bit``: the configuration has that ISA extension."""
    op = offloadable_ops().get(n.op)
    macs = op.host_macs(n.shape, [a.shape for a in n.tensor_args]) if op is not None else 0
    return {"name": n.name, "op": n.op.removeprefix("relax."), "device": "CPU", "layout": "packed" if packed else
            "plain", "macs": macs, "note": reason or host_reason(n, acc_8bit)}


@dataclass
class Placement:
    """Where each operator of a packed network runs, and why not on VTA; and how often a tensor changes between
    the plain and the packed layout (``layout_changes``: ``packed`` plain -> packed, ``unpacked`` back)."""
    model: str
    rows: list[dict]
    layout_changes: dict = field(default_factory=dict)

    @property
    def vta_macs(self) -> int:
        return sum(r["macs"] for r in self.rows if r["device"] == "VTA")

    @property
    def total_macs(self) -> int:
        return sum(r["macs"] for r in self.rows)

    @property
    def vta_share(self) -> float:
        """Fraction of the network's multiply-accumulates that run on VTA."""
        return self.vta_macs / self.total_macs if self.total_macs else 0.0

    @property
    def vta_rows(self) -> list[dict]:
        return [r for r in self.rows if r["device"] == "VTA"]

    def summary(self) -> str:
        n_vta = len(self.vta_rows)
        lc = self.layout_changes
        changes = f"; {lc.get('packed', 0) + lc.get('unpacked', 0)} layout changes ({lc.get('packed', 0)} to the " \
            f"packed layout, {lc.get('unpacked', 0)} back)" if lc else ""
        return (f"{n_vta} ops on VTA ({self.vta_macs / 1e6:.1f} of {self.total_macs / 1e6:.1f} M MACs, "
                f"{100 * self.vta_share:.2f}%), {len(self.rows) - n_vta} on the CPU ({self.model}){changes}")

    def __str__(self) -> str:
        head = ("#", "op", "name", "device", "layout", "MACs", "why not VTA / note")
        lines = [head]
        for k, r in enumerate(self.rows):
            note = r["note"] if r["device"] == "CPU" else (r.get("note") or r.get("kernel", ""))
            lines.append((str(k), r["op"], r["name"], r["device"], r["layout"],
                          f"{r['macs']:,}" if r["macs"] else "", note))
        widths = [max(len(row[i]) for row in lines) for i in range(len(head) - 1)]
        out = []
        for row in lines:
            out.append("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1])
        return "\n".join(out + [self.summary()])

    __repr__ = __str__


def placement(pmod: tvm.IRModule) -> Placement:
    """The placement table of a packed network: each op, VTA or CPU, and why not VTA."""
    f = pmod["main"]
    if f.attrs is None or PLACEMENT_ATTR not in f.attrs:
        raise GraphError("placement() expects the result of graph.graph_pack")
    data = json.loads(str(f.attrs[PLACEMENT_ATTR]))
    return Placement(data["model"], data["rows"], data.get("layout_changes", {}))
