"""The timing estimate (``vta_hw.timing``) on small hand-written netlists, where every delay can be
added up by hand from the cell models (yosys's cells_sim.v for xc7; published xczu3eg reports for
xcup), and its structural check: block RAM and DSP outputs must be registered."""

import pytest

from vta_hw import timing

_OUTPUTS = {"Q", "O", "CO", "P", "DOADO"}


def _netlist(cells: dict, ports: dict | None = None, names: dict | None = None) -> dict:
    netnames = {name: {"hide_name": 0, "bits": bits} for name, bits in (names or {}).items()}
    for c in cells.values():     # as yosys writes them
        c["port_directions"] = {p: "output" if p in _OUTPUTS else "input" for p in c["connections"]}
    return {"modules": {"top": {"attributes": {"top": "00000000000000000000000000000001"},
                                "ports": ports or {}, "cells": cells, "netnames": netnames}}}


def _ff(d, q, ce="1"):
    return {"type": "FDRE", "parameters": {}, "connections": {"C": [1], "CE": [ce], "R": ["0"], "D": [d], "Q": [q]}}


def _lut6(inputs, out):
    conns = {f"I{k}": [b] for k, b in enumerate(inputs)}
    conns["O"] = [out]
    return {"type": "LUT6", "parameters": {}, "connections": conns}


def _carry4(s, di, ci, o, co):
    return {"type": "CARRY4", "parameters": {},
            "connections": {"S": s, "DI": di, "CI": [ci], "CYINIT": ["0"], "O": o, "CO": co}}


def test_register_lut_carry_chain_register_adds_up_as_on_paper():
    # q (FF) -> LUT6 pin I0 -> CARRY4 S[0] -> CO[3] -> CARRY4 CI -> O[1] -> FF
    cells = {
        "src": _ff(10, 2),
        "lut": _lut6([2, "0", "0", "0", "0", "0"], 3),
        "c0": _carry4([3, "0", "0", "0"], ["0"] * 4, "0", [20, 21, 22, 23], [24, 25, 26, 27]),
        "c1": _carry4(["1"] * 4, ["0"] * 4, 27, [30, 31, 32, 33], [34, 35, 36, 37]),
        "dst": _ff(31, 40),
        "other": _ff(2, 41),      # a register-to-register path with no logic
    }
    rep = timing.analyse(_netlist(cells, names={"q": [2], "result": [40], "copy": [41]}), "xc7")
    worst = rep.worst
    # FDRE clk->Q 303, LUT6 I0->O 642, CARRY4 S[0]->CO[3] 508, CARRY4 CI->O[1] 334, FDRE D setup 0
    assert worst.ns == pytest.approx((303 + 642 + 508 + 334) / 1000)
    assert (worst.start, worst.end, worst.levels) == ("q", "result", 3)
    assert worst.nets == 3                              # q, the LUT output, the carry output; CO->CI is free
    assert worst.route_ns == pytest.approx(3 * timing.MODELS["xc7"].net_ps / 1000)
    assert [c[0] for c in worst.cells] == ["FDRE", "LUT6", "CARRY4", "CARRY4"]
    assert rep.paths[-1].end == "copy" and rep.paths[-1].ns == pytest.approx(0.303) and rep.paths[-1].levels == 0
    assert rep.unregistered == []

    up = timing.analyse(_netlist(cells, names={"q": [2], "result": [40]}), "xcup").worst
    # UltraScale+: FDRE 96, LUT6 I0 642*0.27, CARRY8 S[0]->CO[3] 238, CI->O[1] 80, setup D 27
    assert up.ns == pytest.approx((96 + round(642 * 0.27) + 238 + 80 + 27) / 1000)


def test_the_latest_input_wins_and_setup_counts():
    # two paths into one LUT: a FF directly (pin I5) and a FF through a LUT (pin I0); CE endpoint
    cells = {
        "a": _ff(10, 2), "b": _ff(11, 3),
        "l1": _lut6([3, "0", "0", "0", "0", "0"], 4),
        "l2": _lut6([4, "0", "0", "0", "0", 2], 5),
        "dst": _ff("0", 6, ce=5),
    }
    w = timing.analyse(_netlist(cells, names={"b": [3], "dst": [6]}), "xc7").worst
    assert w.ns == pytest.approx((303 + 642 + 642 + 109) / 1000)    # ... LUT6 I0, I0, FDRE CE setup 109
    assert (w.start, w.end, w.levels) == ("b", "dst (CE)", 2)


def _bram(do_reg: int, addr_bit, dout):
    return {"type": "RAMB18E1", "parameters": {"DOA_REG": str(do_reg), "RAM_MODE": "TDP"},
            "connections": {"CLKARDCLK": [1], "ADDRARDADDR": [addr_bit], "DOADO": dout, "WEA": ["0"]}}


def test_block_ram_reads_and_dsp_products_must_be_registered():
    registered = {"addr": _ff(10, 2), "ram": _bram(0, 2, [3]), "q": _ff(3, 4), "l": _lut6([4] + ["0"] * 5, 5),
                  "d": _ff(5, 6)}
    rep = timing.analyse(_netlist(registered), "xc7")
    assert rep.unregistered == []
    assert max(p.ns for p in rep.paths) == pytest.approx(2.454)   # clock to DO without the output register
    used_raw = {"addr": _ff(10, 2), "ram": _bram(0, 2, [3]), "l": _lut6([3] + ["0"] * 5, 5), "d": _ff(5, 6)}
    rep = timing.analyse(_netlist(used_raw, names={"rd_data": [3]}), "xc7")
    assert len(rep.unregistered) == 1 and "RAMB18E1 ram" in rep.unregistered[0] and "rd_data" in rep.unregistered[0]
    assert rep.worst.ns == pytest.approx((2454 + 642) / 1000)
    with_doa_reg = dict(used_raw, ram=_bram(1, 2, [3]))
    rep = timing.analyse(_netlist(with_doa_reg), "xc7")
    assert rep.unregistered == [] and rep.worst.ns == pytest.approx((882 + 642) / 1000)

    def into_dsp(breg):
        return {"type": "DSP48E1", "parameters": {"BREG": str(breg), "MREG": "1", "PREG": "1", "USE_MULT": "MULTIPLY"},
                "connections": {"B": [3], "P": [9], "CLK": [1]}}
    # a read may also land in a DSP's input register (yosys merges the RAM's output register there)
    assert timing.analyse(_netlist({"addr": _ff(10, 2), "ram": _bram(0, 2, [3]), "m": into_dsp(1)}), "xc7") \
        .unregistered == []
    assert len(timing.analyse(_netlist({"addr": _ff(10, 2), "ram": _bram(0, 2, [3]), "m": into_dsp(0)}), "xc7")
               .unregistered) == 1

    def dsp(preg):
        return {"type": "DSP48E1", "parameters": {"AREG": "1", "BREG": "1", "MREG": "1", "PREG": str(preg),
                                                  "USE_MULT": "MULTIPLY", "USE_DPORT": "FALSE"},
                "connections": {"A": [2], "B": [2], "P": [7], "CLK": [1]}}
    # a multiply without registers of its own (yosys's DSP48E2 mapping) between fabric registers:
    # the register after it is the DSP's M register to Vivado, so the multiply is timed with one
    bare = {"AREG": "0", "BREG": "0", "MREG": "0", "PREG": "0", "USE_MULT": "MULTIPLY", "USE_DPORT": "FALSE"}
    rep = timing.analyse(_netlist({"a": _ff(10, 2), "m": {"type": "DSP48E2", "parameters": bare, "connections": {
        "A": [2], "B": [2], "P": [7], "CLK": [1]}}, "q": _ff(7, 8)}, names={"q": [8]}), "xcup")
    assert rep.unregistered == []
    ns = {p.end.split()[-1]: p.ns for p in rep.paths}
    assert ns == pytest.approx({"A": (96 + 1416 * 0.7) / 1000, "B": (96 + 1285 * 0.7) / 1000,   # into M
                                "q": (1671 * 0.7 + 27) / 1000})                                  # M -> P -> q
    rep = timing.analyse(_netlist({"a": _ff(10, 2), "m": {"type": "DSP48E2", "parameters": bare, "connections": {
        "A": [2], "B": [2], "P": [7], "CLK": [1]}}, "l": _lut6([7] + ["0"] * 5, 8), "q": _ff(8, 9)}), "xcup")
    assert len(rep.unregistered) == 1                          # a product used before any register
    assert rep.worst.ns == pytest.approx((96 + 2823 * 0.7 + round(642 * 0.27) + 27) / 1000)

    base = {"a": _ff(10, 2), "l": _lut6([7] + ["0"] * 5, 8), "d": _ff(8, 9)}
    rep = timing.analyse(_netlist(dict(base, m=dsp(0))), "xc7")
    assert len(rep.unregistered) == 1 and rep.worst.ns == pytest.approx((1671 + 642) / 1000)   # clock to P via MREG
    rep = timing.analyse(_netlist(dict(base, m=dsp(1))), "xc7")
    assert rep.unregistered == [] and rep.worst.ns == pytest.approx((329 + 642) / 1000)         # via PREG


def test_a_combinational_loop_is_refused():
    cells = {"l1": _lut6([3] + ["0"] * 5, 2), "l2": _lut6([2] + ["0"] * 5, 3)}
    with pytest.raises(ValueError, match="combinational loop"):
        timing.analyse(_netlist(cells), "xc7")


def test_budget_leaves_the_routing_share():
    assert timing.ROUTING_SHARE == 0.30
    assert timing.budget_ns(10.0) == pytest.approx(7.0)
    assert timing.budget_ns(1000 / 333) == pytest.approx(2.102, abs=1e-3)
