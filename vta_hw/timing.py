"""A static timing estimate of a synthesised netlist (yosys ``synth_xilinx`` + ``write_json``).

No open place-and-route tool exists for Zynq parts, so this estimates the *logic* delay of every
register-to-register path of the flattened netlist from per-cell delay models, and separately a
rough *routed* delay (logic plus an average delay per general-routing net). The target (issue
"a number for the clock"): the logic of every path fits the clock period with ``ROUTING_SHARE``
of it left for routing.

Delay models (picoseconds), one per family (``MODELS``):

* ``xc7`` (xc7z020 -1, Pynq): the cell delays yosys carries in ``techlibs/xilinx/cells_sim.v``
  (specify blocks from the prjxray timing database of artix7 -1): LUT delay by input pin,
  MUXF7/F8, every CARRY4 arc, FF clock-to-out and setup, LUT-RAM and SRL read/write, DSP48E1 by
  its pipeline registers (AREG/BREG/ADREG/MREG/PREG ...), block RAM with and without its output
  register. yosys's own ``sta`` has no arcs for CARRY4 and FDRE (it ignores carry chains); they
  are taken from the same specify blocks here. DSP clock-enable/reset pins get a setup of 0.4 ns.
  A DSP without pipeline registers whose output goes straight into registers is timed with an M
  register: Vivado packs such a register into the DSP (yosys does for DSP48E1, not for DSP48E2).
* ``xcup`` (xczu3eg -1, Ultra96): yosys has no UltraScale+ delays. FF, LUT, CARRY8 and DSP48E2
  figures come from published Vivado post-route timing reports of xczu3eg-sbva484-1 (FDRE
  clock-to-Q 0.096, LUT 0.04-0.17 by pin, CARRY8 S->CO7 0.24 and CI->CO7 0.023, DSP48E2
  multiplier path 1.9); block RAM, LUT-RAM and SRL are the xc7 figures scaled (0.4, 0.3). UltraRAM
  (URAM288, xczu7ev): clock to data out 1.50 ns without its output register, 0.65 with it, 0.45 ns setup
  (estimates: no published report was at hand; a URAM read is a little slower than a block RAM's).

Routing: ``net_ps`` per net on general routing (carry-chain and DSP cascade nets are free),
from the same kind of reports (7-series -1: 0.3-1.1 ns per net, part of which yosys's LUT pin
delays already hold; UltraScale+ -1: 0.13-0.58 ns). It is an average, not a placement: use it to
rank paths, not to sign off.

The clock is ideal (no skew, no clock-tree delay, no jitter). Top-level inputs arrive at 0 and
top-level outputs must arrive by the period (the caller's registers are assumed to be there).
Cells without a model (black boxes such as the processing system) start and end paths at 0.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

#: share of the clock period left for routing: logic may use at most (1 - ROUTING_SHARE) of it
ROUTING_SHARE = 0.30

_XC7_LUT = {1: (127,), 2: (238, 127), 3: (407, 238, 127), 4: (472, 407, 238, 127),
            5: (631, 472, 407, 238, 127), 6: (642, 631, 472, 407, 238, 127)}
_XC7_CARRY4 = {
    ("CYINIT", 0): {("O", 0): 482, ("O", 1): 598, ("O", 2): 584, ("O", 3): 642,
                    ("CO", 0): 536, ("CO", 1): 494, ("CO", 2): 592, ("CO", 3): 580},
    ("CI", 0): {("O", 0): 222, ("O", 1): 334, ("O", 2): 239, ("O", 3): 313,
                ("CO", 0): 271, ("CO", 1): 157, ("CO", 2): 228, ("CO", 3): 114},
    ("S", 0): {("O", 0): 223, ("O", 1): 400, ("O", 2): 523, ("O", 3): 582,
               ("CO", 0): 340, ("CO", 1): 433, ("CO", 2): 512, ("CO", 3): 508},
    ("S", 1): {("O", 1): 205, ("O", 2): 558, ("O", 3): 618, ("CO", 1): 469, ("CO", 2): 548, ("CO", 3): 528},
    ("S", 2): {("O", 2): 226, ("O", 3): 330, ("CO", 2): 292, ("CO", 3): 378},
    ("S", 3): {("O", 3): 227, ("CO", 3): 380},
    ("DI", 0): {("O", 1): 407, ("O", 2): 556, ("O", 3): 615, ("CO", 0): 379, ("CO", 1): 465, ("CO", 2): 540,
                ("CO", 3): 526},
    ("DI", 1): {("O", 2): 537, ("O", 3): 596, ("CO", 1): 445, ("CO", 2): 520, ("CO", 3): 507},
    ("DI", 2): {("O", 3): 438, ("CO", 2): 356, ("CO", 3): 398},
    ("DI", 3): {("CO", 3): 385},
}


def _xcup_carry(bits: int) -> dict:
    """CARRY8 (and a CARRY4 as its lower half): CI->CO 0.023, CI->O[k] 0.07+0.01k, S->CO 0.24 from
    the low bits and 0.20 from the others, DI->CO 0.14 (observed); S/DI->O interpolated."""
    arcs: dict = {("CI", 0): {}}
    for k in range(bits):
        arcs[("CI", 0)][("CO", k)] = 23
        arcs[("CI", 0)][("O", k)] = 70 + 10 * k
    for j in range(bits):
        s_co = 238 if j < 2 else 197
        arcs[("S", j)] = {("O", j): 60}
        arcs[("DI", j)] = {}
        for k in range(j, bits):
            arcs[("S", j)][("CO", k)] = s_co
            arcs[("DI", j)][("CO", k)] = 138
            if k > j:
                arcs[("S", j)][("O", k)] = s_co + 10 * (k - j)
                arcs[("DI", j)][("O", k)] = 138 + 10 * (k - j)
    arcs[("CYINIT", 0)] = arcs[("CI", 0)]
    return arcs


@dataclass(frozen=True)
class DelayModel:
    family: str
    part: str
    lut: dict                 # LUT size -> delay by input pin I0..
    muxf: dict                # MUXF7/MUXF8 -> pin -> delay
    carry: dict               # CARRY4/CARRY8 -> {(in pin, bit): {(out pin, bit): delay}}
    ff_clk_q: int
    ff_setup: dict
    lutram_scale: float       # LUT-RAM / SRL figures are the xc7 ones times this
    bram_clk_do: dict         # output register used? -> clock to data out
    bram_setup: dict
    uram_clk_do: dict         # URAM288 output register (OREG) used? -> clock to data out
    uram_setup: int
    dsp_scale: float          # DSP figures are yosys's DSP48E1 ones times this ...
    dsp_preg_clk_p: int       # ... except the P register's clock to out
    net_ps: int               # routing estimate per general-routing net


MODELS = {
    "xc7": DelayModel(
        family="xc7", part="xc7z020-1", lut=_XC7_LUT,
        muxf={"MUXF7": {"I0": 217, "I1": 223, "S": 296}, "MUXF8": {"I0": 104, "I1": 94, "S": 273}},
        carry={"CARRY4": _XC7_CARRY4}, ff_clk_q=303,
        ff_setup={"D": 0, "CE": 109, "R": 404, "S": 404, "CLR": 404, "PRE": 404}, lutram_scale=1.0,
        bram_clk_do={False: 2454, True: 882},
        bram_setup={"ADDR": 566, "WE": 532, "DI": 737, "EN": 566, "REGCE": 360, "RSTREG": 342, "RSTRAM": 342},
        uram_clk_do={False: 3750, True: 1625}, uram_setup=1125,   # no 7-series part has URAM: xcup / 0.4
        dsp_scale=1.0, dsp_preg_clk_p=329, net_ps=400),
    "xcup": DelayModel(
        family="xcup", part="xczu3eg-1",
        lut={n: tuple(round(d * 0.27) for d in pins) for n, pins in _XC7_LUT.items()},
        muxf={"MUXF7": {"I0": 60, "I1": 60, "S": 80}, "MUXF8": {"I0": 30, "I1": 30, "S": 75},
              "MUXF9": {"I0": 30, "I1": 30, "S": 75}},
        carry={"CARRY8": _xcup_carry(8), "CARRY4": _xcup_carry(4)}, ff_clk_q=96,
        ff_setup={"D": 27, "CE": 0, "R": 120, "S": 120, "CLR": 120, "PRE": 120}, lutram_scale=0.3,
        bram_clk_do={False: 982, True: 353},
        bram_setup={"ADDR": 226, "WE": 213, "DI": 295, "EN": 226, "REGCE": 144, "RSTREG": 137, "RSTRAM": 137},
        uram_clk_do={False: 1500, True: 650}, uram_setup=450,
        dsp_scale=0.7, dsp_preg_clk_p=347, net_ps=300),
}

_LUTRAM_CLK_O = 1153            # write clock to read data (a write changes the output)
_LUTRAM_SETUP = {"D": 453, "DI": 453, "WE": 654, "WADDR": 245}
_LUTRAM_MUX = {128: 193 + 175, 256: 2 * (193 + 175)}   # wider than 64 deep: F7/F8 muxes on the read path
_SRL_CLK_Q, _SRL_CLK_Q31 = 1472, 1114
_SRL_SETUP = {"D": 173, "CE": 109}
_DSP_CTRL_SETUP = 400   # CE*/RST* and control inputs (not in yosys's model)


@dataclass
class CellTiming:
    """Arcs of one cell instance: combinational (in bit -> out bit), launch (clock -> out bit) and
    capture (in bit -> setup), delays in ps. ``dedicated``: output pins on dedicated routing
    (carry out, DSP cascade), which cost no routing estimate."""
    comb: list = field(default_factory=list)      # (in_port, in_idx, out_port, out_idx, ps)
    launch: list = field(default_factory=list)    # (out_port, out_idx, ps)
    capture: list = field(default_factory=list)   # (in_port, in_idx, ps)
    dedicated: tuple = ()


def _param_int(params: dict, name: str, default: int = 0) -> int:
    v = params.get(name)
    if v is None:
        return default
    if isinstance(v, int):
        return v
    s = str(v).strip()
    if re.fullmatch(r"[01xz]+", s):
        s = s.replace("x", "0").replace("z", "0")
        return int(s, 2)
    try:
        return int(s)
    except ValueError:
        return default


def _width(conns: dict, port: str) -> int:
    return len(conns.get(port, ()))


def _dsp_timing(model: DelayModel, p: dict, conns: dict, m_register_after: bool = False) -> CellTiming:
    """DSP48E1/E2 as yosys's DSP48E1 model (functions ``A.required``, ``P.arrival``, ...).

    ``m_register_after``: the multiplier has no register of its own but its output goes straight
    into fabric registers, which Vivado packs into the DSP as its M register (yosys does this for
    DSP48E1 but not for DSP48E2): the multiply is then timed with an M register."""
    reg = {k: _param_int(p, k) for k in ("AREG", "BREG", "CREG", "DREG", "ADREG", "MREG", "PREG")}
    if m_register_after and not reg["MREG"] and not reg["PREG"]:
        reg["MREG"] = 1
    use_mult = str(p.get("USE_MULT", "MULTIPLY")).strip('"')
    use_d = str(p.get("USE_DPORT", "FALSE")).strip('"') == "TRUE" or str(p.get("AMULTSEL", "A")) == "AD"
    patdet = str(p.get("USE_PATTERN_DETECT", "NO_PATDET")) != "NO_PATDET"
    mult = use_mult != "NONE"
    k = model.dsp_scale

    def required(port):
        if port == "A":
            if reg["AREG"]:
                return 254
            if mult and not use_d:
                return 1416 if reg["MREG"] else (3030 if patdet else 2739) if reg["PREG"] else None
            if mult and use_d:
                return 2400 if reg["MREG"] else 1283 if reg["ADREG"] else (4014 if patdet else 3723) \
                    if reg["PREG"] else None
            return (1730 if patdet else 1441) if reg["PREG"] else None
        if port == "B":
            if reg["BREG"]:
                return 324
            if mult and reg["MREG"]:
                return 1285
            return ((2898 if patdet else 2608) if mult else (1718 if patdet else 1428)) if reg["PREG"] else None
        if port == "C":
            return 168 if reg["CREG"] else (1534 if patdet else 1244) if reg["PREG"] else None
        if port == "D":
            if not use_d:
                return None
            return 248 if reg["DREG"] else 1195 if reg["ADREG"] else 2310 if reg["MREG"] else \
                (3925 if patdet else 3635) if reg["PREG"] else None
        if port == "PCIN":
            return (1315 if patdet else 1025) if reg["PREG"] else None
        return None

    comb = {"A": 3806 if use_d else (2823 if mult else 1523), "B": 2690 if mult else 1509, "C": 1325,
            "D": 3717, "PCIN": 1107}
    if reg["PREG"]:
        arrival = model.dsp_preg_clk_p / k
    elif reg["CREG"] or reg["MREG"]:
        arrival = 1687 if reg["CREG"] else 1671
    elif reg["AREG"]:
        arrival = 3935 if use_d else (2952 if mult else 1632)
    elif reg["DREG"] and use_d:
        arrival = 3908
    elif reg["ADREG"] and use_d:
        arrival = 2958
    elif reg["BREG"]:
        arrival = 2813 if mult else 1616
    else:
        arrival = None
    t = CellTiming(dedicated=("PCOUT", "ACOUT", "BCOUT", "CARRYCASCOUT"))
    outs = [o for o in ("P", "PCOUT") if o in conns]
    if arrival is not None:
        for o in outs:
            for i in range(_width(conns, o)):
                t.launch.append((o, i, (arrival + (106 if o == "PCOUT" else 0)) * k))
    for port in ("A", "B", "C", "D", "PCIN", "ACIN", "BCIN"):
        if port not in conns:
            continue
        base = port[0] if port in ("ACIN", "BCIN") else port
        req = required(base)
        for i in range(_width(conns, port)):
            if req is not None:
                t.capture.append((port, i, req * k))
            elif not reg["PREG"]:
                for o in outs:
                    for j in range(_width(conns, o)):
                        t.comb.append((port, i, o, j, (comb[base] + (148 if o == "PCOUT" else 0)) * k))
    for port in conns:
        if port.startswith(("CE", "RST", "OPMODE", "ALUMODE", "INMODE", "CARRYIN")):
            for i in range(_width(conns, port)):
                t.capture.append((port, i, _DSP_CTRL_SETUP * k))
    return t


_BRAM_IN = ("ADDR", "WE", "DI", "EN", "REGCE", "RSTREG", "RSTRAM")


def _bram_timing(model: DelayModel, p: dict, conns: dict) -> CellTiming:
    """Block RAM: data out launched by the read clock (with or without the output register), every
    address/data/enable input captured."""
    t = CellTiming()
    sdp = str(p.get("RAM_MODE", "TDP")).strip('"') == "SDP"
    reg_a = _param_int(p, "DOA_REG") != 0
    reg_b = _param_int(p, "DOB_REG") != 0
    for port, bits in conns.items():
        if port.startswith("DO"):   # DOADO, DOPADOP, DOBDO (E1); DOUTADOUT ... (E2)
            side_b = re.match(r"DO(UT)?P?B", port) is not None
            registered = reg_a if (sdp or not side_b) else reg_b
            t.launch += [(port, i, model.bram_clk_do[registered]) for i in range(len(bits))]
            continue
        kind = "DI" if port.startswith("DIN") else next((k for k in _BRAM_IN if port.startswith(k)), None)
        if kind is None:
            continue
        t.capture += [(port, i, model.bram_setup[kind]) for i in range(len(bits))]
    return t


_URAM_IN = ("ADDR", "DIN", "BWE", "EN", "RDB_WR", "RST")


def _uram_timing(model: DelayModel, p: dict, conns: dict) -> CellTiming:
    """UltraRAM: DOUT_A/DOUT_B launched by the clock (with or without OREG_A/B), the port inputs captured."""
    t = CellTiming()
    for port, bits in conns.items():
        if port.startswith("DOUT_"):
            registered = str(p.get(f"OREG_{port[-1]}", "FALSE")).strip('"') == "TRUE"
            t.launch += [(port, i, model.uram_clk_do[registered]) for i in range(len(bits))]
        elif port.startswith(_URAM_IN):
            t.capture += [(port, i, model.uram_setup) for i in range(len(bits))]
    return t


def _lutram_timing(model: DelayModel, cell_type: str, conns: dict) -> CellTiming:
    """LUT-RAMs: asynchronous read (address -> data out), synchronous write (xc7 figures, scaled)."""
    k = model.lutram_scale
    t = CellTiming()
    m = re.match(r"RAM(\d+)X", cell_type)
    depth = int(m.group(1)) if m else (64 if "64" in cell_type else 32)
    extra = _LUTRAM_MUX.get(depth, 0)
    outs = [o for o in conns if o.startswith("DO") or o in ("SPO", "DPO", "O")]
    for o in outs:
        t.launch += [(o, i, (_LUTRAM_CLK_O + extra) * k) for i in range(_width(conns, o))]

    def outs_of(addr_port):
        if re.fullmatch(r"(A|DPRA)\d?", addr_port):
            want = "DPO" if addr_port.startswith("DPRA") else "SPO"
            return [o for o in outs if o in (want, "O")]
        letter = addr_port[len("ADDR"):][:1]
        return [o for o in outs if o == f"DO{letter}"]

    for port in conns:
        n = _width(conns, port)
        if port.startswith("ADDR") or re.fullmatch(r"(A|DPRA)\d?", port):
            for i in range(n):
                bit = int(port[-1]) if port[-1].isdigit() else i
                d = ((_XC7_LUT[6][bit] if bit < 6 else 0) + extra) * k
                for o in outs_of(port):
                    t.comb += [(port, i, o, j, d) for j in range(_width(conns, o))]
                if port in ("A", "ADDRD", "ADDRH") or re.fullmatch(r"A\d", port):
                    t.capture.append((port, i, _LUTRAM_SETUP["WADDR"] * k))
        elif port.startswith("DI") or port == "D":
            t.capture += [(port, i, _LUTRAM_SETUP["D"] * k) for i in range(n)]
        elif port == "WE":
            t.capture.append((port, 0, _LUTRAM_SETUP["WE"] * k))
        elif port.startswith("WADR"):
            t.capture += [(port, i, _LUTRAM_SETUP["WADDR"] * k) for i in range(n)]
    return t


def _srl_timing(model: DelayModel, cell_type: str, conns: dict) -> CellTiming:
    k = model.lutram_scale
    t = CellTiming(capture=[(pin, 0, _SRL_SETUP[pin] * k) for pin in ("D", "CE") if pin in conns])
    t.launch.append(("Q", 0, _SRL_CLK_Q * k))
    if "Q31" in conns:
        t.launch.append(("Q31", 0, _SRL_CLK_Q31 * k))
    if cell_type == "SRLC32E":
        pins = [("A", i) for i in range(_width(conns, "A"))]
    else:
        pins = [(f"A{i}", 0) for i in range(4) if f"A{i}" in conns]
    for bit, (pin, idx) in enumerate(pins):
        t.comb.append((pin, idx, "Q", 0, _XC7_LUT[6][bit + 1] * k))
    return t


_NO_TIMING = ("VCC", "GND", "BUFG", "BUFG_PS", "BUFGCE", "IBUF", "OBUF")


def cell_timing(model: DelayModel, cell_type: str, params: dict, conns: dict,
                m_register_after: bool = False) -> CellTiming | None:
    """The arcs of one cell; None for cells without data timing (constants, clock and I/O buffers,
    black boxes: see :func:`analyse`). ``m_register_after``: see :func:`_dsp_timing`."""
    m = re.fullmatch(r"LUT([1-6])", cell_type)
    if m:
        n = int(m.group(1))
        return CellTiming(comb=[(f"I{i}", 0, "O", 0, model.lut[n][i]) for i in range(n) if f"I{i}" in conns])
    if cell_type == "INV":
        return CellTiming(comb=[("I", 0, "O", 0, model.lut[1][0])])
    if cell_type in model.muxf:
        return CellTiming(comb=[(pin, 0, "O", 0, d) for pin, d in model.muxf[cell_type].items() if pin in conns])
    if cell_type in ("CARRY4", "CARRY8"):
        arcs = model.carry.get(cell_type) or next(iter(model.carry.values()))
        t = CellTiming(dedicated=("CO",))
        for (ip, ib), outs in arcs.items():
            if ib >= _width(conns, ip):
                continue
            t.comb += [(ip, ib, op, ob, d) for (op, ob), d in outs.items() if ob < _width(conns, op)]
        return t
    if re.fullmatch(r"FD[RSCP]E(_1)?", cell_type):
        return CellTiming(launch=[("Q", 0, model.ff_clk_q)],
                          capture=[(pin, 0, model.ff_setup[pin]) for pin in ("D", "CE", "R", "S", "CLR", "PRE")
                                   if pin in conns])
    if cell_type in ("SRL16E", "SRLC16E", "SRLC32E"):
        return _srl_timing(model, cell_type, conns)
    if cell_type.startswith("RAMB"):
        return _bram_timing(model, params, conns)
    if cell_type.startswith("URAM288"):
        return _uram_timing(model, params, conns)
    if cell_type.startswith("DSP48"):
        return _dsp_timing(model, params, conns, m_register_after)
    if re.match(r"RAM\d+(X\d+[SD]|M\d*)", cell_type):
        return _lutram_timing(model, cell_type, conns)
    return None


@dataclass
class TimingPath:
    """The worst path into one endpoint."""
    ns: float                 # logic delay, including the endpoint's setup
    levels: int               # combinational cells on the path (each CARRY cell counts, as in Vivado)
    nets: int                 # nets on general routing
    route_ns: float           # nets x the model's routing estimate
    start: str                # launching register / RAM / DSP / port
    end: str                  # capturing register / RAM / DSP / port
    cells: list               # (cell type, arc, cumulative ns, net) from start to end

    @property
    def routed_ns(self) -> float:
        return self.ns + self.route_ns


@dataclass
class TimingReport:
    """What :func:`analyse` found: the worst path per class of (start, end), worst first, the number of
    endpoints timed, and the block RAM and DSP outputs that feed logic before any register."""
    family: str
    paths: list               # worst first, one per class of (start, end)
    endpoints: int
    unregistered: list        # block RAM / DSP outputs that feed logic before a register

    @property
    def worst(self) -> TimingPath | None:
        return self.paths[0] if self.paths else None

    @property
    def worst_routed(self) -> TimingPath | None:
        return max(self.paths, key=lambda p: p.routed_ns) if self.paths else None

    def to_json(self) -> dict:
        return {"family": self.family, "endpoints": self.endpoints, "unregistered": self.unregistered,
                "paths": [{"ns": round(p.ns, 3), "levels": p.levels, "nets": p.nets,
                           "routed_ns": round(p.routed_ns, 3), "start": p.start, "end": p.end} for p in self.paths]}


def budget_ns(period_ns: float) -> float:
    """The most logic a path may have: the period less the share left for routing."""
    return period_ns * (1 - ROUTING_SHARE)


def _bit_names(module: dict) -> dict:
    """A readable name for every net bit: the shortest public net name with its bit index."""
    names: dict = {}
    for name, net in module["netnames"].items():
        hidden = net.get("hide_name", 0)
        for i, b in enumerate(net["bits"]):
            if isinstance(b, str):
                continue
            label = name if len(net["bits"]) == 1 else f"{name}[{i}]"
            key = (hidden, len(label))
            old = names.get(b)
            if old is None or key < old[0]:
                names[b] = (key, label)
    return {b: v[1].lstrip("\\") for b, v in names.items()}


def _top(mods: dict) -> str:
    for name, mod in mods.items():
        top = str(mod.get("attributes", {}).get("top", "0"))
        if top not in ("0", "") and int(top, 2 if set(top) <= {"0", "1"} else 10):
            return name
    raise ValueError("no top module in the netlist")


def analyse(netlist: dict | str | Path, family: str, top: str | None = None, max_paths: int = 12) -> TimingReport:
    """Worst paths of a flattened netlist (yosys ``write_json`` after ``synth_xilinx -flatten``).

    Args:
        netlist: the netlist as a dict, or the path of its JSON file.
        family: ``"xc7"`` or ``"xcup"``, which delay model applies (``MODELS``).
        top: the module to time (default: the netlist's top).
        max_paths: how many classes of paths to keep.

    Raises:
        KeyError: an unknown family.

    Example:
        >>> from vta_hw import synth, timing
        >>> synth.run_yosys(verilog, "xc7", out_dir, netlist=True)
        >>> rep = timing.analyse(out_dir / "netlist_xc7.json", "xc7")
        >>> print(timing.format_report(rep, period_ns=10.0))
    """
    model = MODELS[family]
    if not isinstance(netlist, dict):
        netlist = json.loads(Path(netlist).read_text())
    mods = netlist["modules"]
    module = mods[top or _top(mods)]
    names = _bit_names(module)

    # fanin: bit -> [(from bit, ps, cell type, arc)]; launch: bit -> (ps, cell name, cell type)
    fanin: dict = {}
    launch: dict = {}
    dedicated: set = set()
    captures: list = []   # (bit, setup ps, cell name, cell type, pin, into a register: FF D, DSP A/B/C/D register)
    ram_dsp_out: dict = {}   # bit -> (cell name, type): block RAM / DSP outputs without their output register
    # which bits feed only the D pin of flip-flops (a DSP whose product does is given an M register)
    into_ff_only: dict = {}
    for cell in module["cells"].values():
        is_ff = bool(re.fullmatch(r"FD[RSCP]E(_1)?", cell["type"]))
        dirs = cell.get("port_directions", {})
        for port, bits in cell["connections"].items():
            if dirs.get(port) == "input":
                for b in bits:
                    if not isinstance(b, str):
                        into_ff_only[b] = into_ff_only.get(b, True) and is_ff and port == "D"
    for port in module["ports"].values():
        if port["direction"] == "output":
            into_ff_only.update({b: False for b in port["bits"] if not isinstance(b, str)})

    for cname, cell in module["cells"].items():
        ctype = cell["type"].lstrip("\\")
        conns = cell["connections"]
        m_after = ctype.startswith("DSP48") and all(into_ff_only.get(b, True) for b in conns.get("P", ())
                                                    if not isinstance(b, str))
        t = cell_timing(model, ctype, cell.get("parameters", {}), conns, m_after)
        if t is None:
            if ctype in _NO_TIMING:
                for b_in, b_out in zip(conns.get("I", []), conns.get("O", [])):
                    if ctype in ("IBUF", "OBUF") and not isinstance(b_out, str):
                        src = None if isinstance(b_in, str) else b_in
                        fanin.setdefault(b_out, []).append((src, 0, ctype, "I->O"))
                continue
            dirs = cell.get("port_directions", {})
            pins = [(p, i, d) for p, d in dirs.items() for i in range(_width(conns, p))]
            t = CellTiming(launch=[(p, i, 0) for p, i, d in pins if d == "output"],
                           capture=[(p, i, 0) for p, i, d in pins if d == "input"])
        for ip, ii, op, oi, d in t.comb:
            b_in, b_out = conns[ip][ii], conns[op][oi]
            if not isinstance(b_out, str):
                arc = f"{ip}[{ii}]->{op}[{oi}]" if _width(conns, ip) > 1 or _width(conns, op) > 1 else f"{ip}->{op}"
                fanin.setdefault(b_out, []).append((None if isinstance(b_in, str) else b_in, d, ctype, arc))
        for op, oi, d in t.launch:
            b = conns[op][oi]
            if not isinstance(b, str) and d >= launch.get(b, (-1,))[0]:
                launch[b] = (d, cname, ctype)
        if ctype.startswith("RAMB"):
            p = cell.get("parameters", {})
            sdp = str(p.get("RAM_MODE", "TDP")).strip('"') == "SDP"
            for op, bits in conns.items():
                if op.startswith("DO"):
                    side_b = re.match(r"DO(UT)?P?B", op) is not None
                    reg = _param_int(p, "DOB_REG" if side_b and not sdp else "DOA_REG") != 0
                    ram_dsp_out.update({b: (cname, ctype) for b in bits if not isinstance(b, str) and not reg})
        elif ctype.startswith("URAM288"):
            p = cell.get("parameters", {})
            for op, bits in conns.items():
                if op.startswith("DOUT_") and str(p.get(f"OREG_{op[-1]}", "FALSE")).strip('"') != "TRUE":
                    ram_dsp_out.update({b: (cname, ctype) for b in bits if not isinstance(b, str)})
        elif ctype.startswith("DSP48") and not _param_int(cell.get("parameters", {}), "PREG"):
            ram_dsp_out.update({b: (cname, ctype) for b in conns.get("P", ()) if not isinstance(b, str)})
        for op in t.dedicated:
            dedicated.update(b for b in conns.get(op, ()) if not isinstance(b, str))
        if ctype.startswith("FD"):
            reg_pins = {"D"}
        elif ctype.startswith("DSP48"):
            p = cell.get("parameters", {})
            reg_pins = {pin for pin, reg in (("A", "AREG"), ("ACIN", "AREG"), ("B", "BREG"), ("BCIN", "BREG"),
                                             ("C", "CREG"), ("D", "DREG")) if _param_int(p, reg)}
        else:
            reg_pins = set()
        for ip, ii, d in t.capture:
            b = conns[ip][ii]
            if not isinstance(b, str):
                captures.append((b, d, cname, ctype, f"{ip}[{ii}]" if _width(conns, ip) > 1 else ip, ip in reg_pins))
    for pname, port in module["ports"].items():
        for i, b in enumerate(port["bits"]):
            if isinstance(b, str):
                continue
            label = pname if len(port["bits"]) == 1 else f"{pname}[{i}]"
            if port["direction"] == "input":
                launch.setdefault(b, (0, label, "input port"))
            else:
                captures.append((b, 0, label, "output port", "", False))

    # latest arrival of every bit, in topological order (iterative depth-first)
    arrival: dict = {}
    best: dict = {}       # bit -> (from bit, cell type, arc) of the latest arc; None at a start point
    levels: dict = {}
    nets: dict = {}
    on_stack: set = set()
    for root in list(fanin) + list(launch):
        if root in arrival:
            continue
        stack = [root]
        while stack:
            b = stack[-1]
            if b in arrival:
                stack.pop()
                continue
            if b not in on_stack:
                on_stack.add(b)
                for src, *_ in fanin.get(b, ()):
                    if src is not None and src not in arrival:
                        if src in on_stack:
                            raise ValueError(f"combinational loop through {names.get(src, src)}")
                        stack.append(src)
                continue
            stack.pop()
            on_stack.discard(b)
            a = launch[b][0] if b in launch else None
            choice, lv, nn = None, 0, 0
            for src, d, ctype, arc in fanin.get(b, ()):
                if src is None or arrival.get(src) is None:
                    continue
                if a is None or arrival[src] + d > a:
                    a, choice = arrival[src] + d, (src, ctype, arc)
                    lv, nn = levels[src] + 1, nets[src] + (src not in dedicated)
            arrival[b], best[b], levels[b], nets[b] = a, choice, lv, nn

    def trace(b):
        cells = []
        while best.get(b) is not None:
            src, ctype, arc = best[b]
            cells.append((ctype, arc, arrival[b] / 1000, names.get(b, str(b))))
            b = src
        cells.append((launch[b][2] if b in launch else "?", "clk->out", (arrival[b] or 0) / 1000, names.get(b, str(b))))
        cells.reverse()
        return b, cells

    worst_by_end: dict = {}
    for b, setup, cname, ctype, pin, _ in captures:
        if arrival.get(b) is None:
            continue
        total = arrival[b] + setup
        if ctype.startswith("FD"):
            q = module["cells"][cname]["connections"]["Q"][0]
            end = names.get(q, cname) + ("" if pin == "D" else f" ({pin})")
        elif ctype == "output port":
            end = f"port {cname}"
        else:
            end = f"{ctype} {_short_cell(cname)} {pin}"
        if total > worst_by_end.get(end, (-1,))[0]:
            worst_by_end[end] = (total, b, end)
    # one path per class of (start, end): names with their numbers (bits, lanes, RAM slices) masked
    by_class: dict = {}
    for total, b, end in sorted(worst_by_end.values(), key=lambda x: -x[0]):
        sb, cells = trace(b)
        start = names.get(sb, str(sb))
        if sb in launch and launch[sb][2].startswith(("RAMB", "URAM", "DSP48", "RAM")):
            start = f"{launch[sb][2]} {_short_cell(launch[sb][1])} ({start})"
        key = (_class(start), _class(end))
        if key not in by_class:
            n = nets[b] + 1   # the net into the endpoint
            by_class[key] = TimingPath(ns=total / 1000, levels=levels[b], nets=n, route_ns=n * model.net_ps / 1000,
                                       start=start, end=end, cells=cells)
            if len(by_class) >= max_paths:
                break

    # block RAM / DSP outputs without their own output register must feed a register directly: a
    # fabric register (Vivado moves it into the RAM's DOA_REG / the DSP's PREG) or a DSP's input
    # register; anything else is a read or a multiply whose result is used unregistered
    unregistered = set()
    for arcs in fanin.values():
        for src, *_ in arcs:
            if src in ram_dsp_out:
                unregistered.add(src)
    for b, _, _, _, _, into_register in captures:
        if b in ram_dsp_out and not into_register:
            unregistered.add(b)
    per_cell: dict = {}
    for b in sorted(unregistered, key=str):
        per_cell.setdefault(ram_dsp_out[b], names.get(b, str(b)))
    unregistered = {f"{ctype} {_short_cell(cname)} (e.g. {net})" for (cname, ctype), net in per_cell.items()}
    return TimingReport(family=family, paths=sorted(by_class.values(), key=lambda p: -p.ns),
                        endpoints=len(captures), unregistered=sorted(unregistered))


def _class(name: str) -> str:
    return re.sub(r"\d+", "#", name)


def _short_cell(name: str) -> str:
    name = name.lstrip("\\$")
    return name if len(name) < 60 else name[:28] + "..." + name[-28:]


def format_report(rep: TimingReport, period_ns: float, n: int = 5, detail: bool = True) -> str:
    """The report as ``nox -s synth`` prints it: the worst logic against the budget of ``period_ns``, the
    estimate with routing, the ``n`` worst paths and, with ``detail``, the worst path cell by cell."""
    if not rep.worst:
        return f"{rep.family}: no register-to-register paths"
    budget = budget_ns(period_ns)
    w, wr = rep.worst, rep.worst_routed
    verdict = "fits" if w.ns <= budget else "OVER"
    lines = [f"{rep.family} ({MODELS[rep.family].part}): worst logic {w.ns:.2f} ns against {budget:.2f} ns "
             f"({period_ns:.2f} ns period, {ROUTING_SHARE:.0%} left for routing): {verdict}; "
             f"with estimated routing {wr.routed_ns:.2f} ns (~{1000 / wr.routed_ns:.0f} MHz)"]
    for p in rep.paths[:n]:
        lines.append(f"  {p.ns:5.2f} ns logic, {p.levels:2d} levels, ~{p.routed_ns:5.2f} ns routed: "
                     f"{p.start} -> {p.end}")
    if rep.unregistered:
        lines.append(f"  unregistered block RAM/DSP outputs: {len(rep.unregistered)}, e.g. {rep.unregistered[0]}")
    if detail:
        lines.append("  worst path:")
        for ctype, arc, t, net in w.cells:
            lines.append(f"    {t:6.3f}  {ctype:10s} {arc:22s} {net}")
    return "\n".join(lines)


def model_hash() -> str:
    """Hash of this module's source: cached results are redone when the delay model changes."""
    import hashlib
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
