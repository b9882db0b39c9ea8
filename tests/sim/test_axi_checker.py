"""The AXI4 master checker of tsim's harness, fed hand-made cycles: clean traffic passes, and each
rule fires on a trace that breaks only that rule, with a message naming the channel, the
transaction or beat, and the rule. (tests/sim/test_tsim.py runs it on the real core.)"""

import shutil

import pytest

if shutil.which("g++") is None:
    pytest.skip("g++ is not installed", allow_module_level=True)

from sim.tsim import AxiChecker, AxiSample  # noqa: E402

BEAT = 8            # a 64-bit bus
MAX_BEATS = 16      # an AXI3 port
READ_IDS = (0, 1, 2, 3, 4)
WRITE_ID = 5
IDLE = {}


def sample(**kw) -> AxiSample:
    s = AxiSample()
    defaults = {"arsize": 3, "awsize": 3, "arburst": 1, "awburst": 1, "wstrb": 0xFF, "awid": WRITE_ID,
                "rready": 1, "bready": 1}
    for k, v in {**defaults, **kw}.items():
        if k == "wdata":
            for i, b in enumerate(v):
                s.wdata[i] = b
        else:
            setattr(s, k, v)
    return s


def ar(addr=0x1000, len=3, **kw):
    return {"arvalid": 1, "arready": 1, "araddr": addr, "arlen": len, **kw}


def aw(addr=0x2000, len=1, **kw):
    return {"awvalid": 1, "awready": 1, "awaddr": addr, "awlen": len, **kw}


def w(last=0, data=b"\x11" * 8, **kw):
    return {"wvalid": 1, "wready": 1, "wlast": last, "wdata": data, **kw}


def r(beats, rid=0):
    return [{"rvalid": 1, "rid": rid, "rlast": int(k == beats - 1)} for k in range(beats)]


B = {"bvalid": 1, "bid": WRITE_ID}


def run(cycles, finish=True):
    chk = AxiChecker(BEAT, MAX_BEATS, READ_IDS, WRITE_ID)
    for c in cycles:
        chk.step(sample(**c))
    if finish:
        chk.finished()
    return chk.violations()


CLEAN = {
    "read, ARREADY late": [ar(arready=0), ar(arready=0), ar(), IDLE, *r(4)],
    "two IDs, data interleaved": [ar(len=1), ar(addr=0x3000, len=1, arid=2),
                                  {"rvalid": 1, "rid": 2}, {"rvalid": 1, "rid": 0},
                                  {"rvalid": 1, "rid": 2, "rlast": 1}, {"rvalid": 1, "rid": 0, "rlast": 1}],
    "write, WREADY late": [aw(), w(wready=0), w(), w(last=1, wready=0), w(last=1), B],
    "W before its AW": [w(), w(last=1), aw(), B],
    "W with AW, then a 1-beat burst": [{**aw(), **w()}, w(last=1), aw(addr=0x2100, len=0), w(last=1), B, B],
    "16 beats up to a 4 KiB boundary": [ar(addr=0x1F80, len=15), *r(16)],
    "zero strobes (an abandoned burst)": [aw(len=0), w(last=1, wstrb=0), B],
    "VALID low in reset": [{"rst": 1}, {"rst": 1}, ar(), *r(4)],
}


@pytest.mark.parametrize("name", CLEAN)
def test_clean_traffic_passes(name):
    assert run(CLEAN[name]) == []


# (trace, finish, the channel and place the message names, the rule it states)
BROKEN = {
    "ARVALID in reset": ([{"rst": 1, "arvalid": 1}], True, "AR channel", "ARVALID high during reset"),
    "AWVALID in reset": ([{"rst": 1, "awvalid": 1}], True, "AW channel", "AWVALID high during reset"),
    "WVALID in reset": ([{"rst": 1, "wvalid": 1}], True, "W channel", "WVALID high during reset"),
    "ARVALID dropped": ([ar(arready=0), IDLE], False, "AR channel, AR #0", "ARVALID dropped before ARREADY"),
    "AR payload changed": ([ar(arready=0), ar(addr=0x1040), *r(4)], True, "AR channel, AR #0",
                           "AR address/control changed while ARVALID was high"),
    "ARLEN changed": ([ar(arready=0), ar(len=2), *r(3)], True, "AR channel, AR #0",
                      "AR address/control changed"),
    "AWVALID dropped": ([aw(awready=0), w(), w(last=1), IDLE], False, "AW channel, AW #0",
                        "AWVALID dropped before AWREADY"),
    "AW payload changed": ([aw(awready=0), aw(addr=0x2040), w(), w(last=1), B], True, "AW channel, AW #0",
                           "AW address/control changed while AWVALID was high"),
    "WVALID dropped": ([aw(), w(wready=0), IDLE, w(), w(last=1), B], True, "W channel, beat 0 of write burst AW #0",
                       "WVALID dropped before WREADY"),
    "WDATA changed": ([aw(), w(wready=0), w(data=b"\x22" * 8), w(last=1), B], True,
                      "W channel, beat 0 of write burst AW #0", "WDATA/WSTRB/WLAST changed while WVALID was high"),
    "ARBURST FIXED": ([ar(arburst=0), *r(4)], True, "AR channel, AR #0 (id 0, addr 0x1000, 4 beats)",
                      "ARBURST 0 is not INCR (1)"),
    "AWBURST WRAP": ([aw(awburst=2), w(), w(last=1), B], True, "AW channel, AW #0", "AWBURST 2 is not INCR"),
    "ARSIZE narrow": ([ar(arsize=2), *r(4)], True, "AR channel, AR #0",
                      "ARSIZE 2 (4 bytes) is not the bus width (8 bytes"),
    "AWSIZE too wide": ([aw(awsize=4), w(), w(last=1), B], True, "AW channel", "AWSIZE 4 (16 bytes) is not the bus"),
    "ARLEN too long for AXI3": ([ar(addr=0x1000, len=16), *r(17)], True, "AR channel, AR #0 (id 0, addr 0x1000, "
                                "17 beats)", "ARLEN 16 makes a burst of 17 beats, more than this port takes (16)"),
    "AWLEN too long for AXI3": ([aw(len=31), *[w() for _ in range(31)], w(last=1), B], True, "AW channel",
                                "more than this port takes (16)"),
    "AR crosses 4 KiB": ([ar(addr=0x1FC0, len=15), *r(16)], True, "AR channel, AR #0",
                         "burst crosses a 4 KiB boundary (bytes 0x1fc0..0x203f)"),
    "AW crosses 4 KiB": ([aw(addr=0x2FF8, len=1), w(), w(last=1), B], True, "AW channel",
                         "burst crosses a 4 KiB boundary"),
    "AR unaligned": ([ar(addr=0x1004, len=0), *r(1)], True, "AR channel", "address not aligned to ARSIZE (8 bytes)"),
    "ARLOCK": ([ar(arlock=1), *r(4)], True, "AR channel", "ARLOCK 1: exclusive access is not supported"),
    "ARID of no client": ([ar(arid=7), *r(4, rid=7)], True, "AR channel, AR #0 (id 7",
                          "ARID 7 is not the ID of any read client"),
    "AWID not the write ID": ([aw(awid=2), w(), w(last=1), B], True, "AW channel, AW #0 (id 2",
                              "AWID 2 is not the write ID 5"),
    "WLAST missing": ([aw(), w(), w(), B], True, "W channel, beat 1 of write burst AW #0 (id 5, addr 0x2000, 2 beats)",
                      "WLAST low on the last beat"),
    "WLAST early": ([aw(len=2), w(last=1), B], False, "W channel, beat 0 of write burst AW #0",
                    "WLAST high before the last beat"),
    "WLAST wrong, W before AW": ([w(last=1), w(last=1), aw(), B], False, "beat 0 of write burst AW #0",
                                 "WLAST high before the last beat"),
    "WSTRB partial": ([aw(len=0), w(last=1, wstrb=0x0F), B], True, "W channel",
                      "WSTRB is neither all ones nor all zeros"),
    "WSTRB beyond the bus": ([aw(len=0), w(last=1, wstrb=0x1FF), B], True, "W channel",
                             "WSTRB has bits beyond the bus width"),
    "done with read data owed": ([ar(), *r(3)], True, "R channel", "1 read burst(s) still owe data"),
    "done with W beats missing": ([aw(), w()], True, "W channel", "a write burst is incomplete (1 AW"),
    "done with W beats but no AW": ([w(), w(last=1)], True, "W channel", "0 AW without all W beats, 2 W beats"),
    "done with a response not taken": ([aw(), w(), w(last=1)], True, "B channel",
                                       "1 write response(s) not taken"),
}


@pytest.mark.parametrize("name", BROKEN)
def test_each_rule_fires_and_says_where(name):
    cycles, finish, where, rule = BROKEN[name]
    got = run(cycles, finish)
    assert len(got) == 1, got
    assert where in got[0] and rule in got[0], got[0]
    assert got[0].startswith("cycle ")


def test_the_cycle_of_the_violation_is_named():
    got = run([IDLE, IDLE, IDLE, ar(arburst=0), *r(4)])
    assert got == ["cycle 3: AR channel, AR #0 (id 0, addr 0x1000, 4 beats): ARBURST 0 is not INCR (1)"]


def test_an_axi4_port_takes_256_beats():
    chk = AxiChecker(16, 256, READ_IDS, WRITE_ID)
    for c in [ar(addr=0x0, len=255, arsize=4), *r(256)]:
        chk.step(sample(**c))
    chk.finished()
    assert chk.violations() == []
    chk.step(sample(**ar(addr=0x0, len=255, arsize=3)))
    assert chk.violations() == ["cycle 257: AR channel, AR #1 (id 0, addr 0x0, 256 beats): ARSIZE 3 (8 bytes) is not "
                                "the bus width (16 bytes; the core issues no narrow transfers)"]
