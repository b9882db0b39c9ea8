"""tsim's profile build: every instruction of every module gets its interval, from the hardware's own signals.

The intervals are checked against what the stream says (each module runs its own instructions in order, one
at a time; an instruction that pops a token starts its work no earlier than the end of the instruction that
pushed it) and against the core's performance counters, which count the same cycles through other logic."""

import numpy as np
import pytest

tsim = pytest.importorskip("sim.tsim")
if not tsim.verilator_available():
    pytest.skip("Verilator is not installed", allow_module_level=True)

from sim.tsim import TsimDevice  # noqa: E402
from sim.tsim_profile import ProfileError, decode_run, split_runs  # noqa: E402
from vta_hw.spec import Stage, stage_of  # noqa: E402
from vta_runtime import CommandQueue, DeviceError  # noqa: E402
from vta_runtime.programs import GemmTiling, blocked_gemm, gemm_reference, informative_shift  # noqa: E402

RNG = np.random.default_rng(11)
MODULE = {Stage.LOAD: "load", Stage.COMPUTE: "compute", Stage.STORE: "store"}


@pytest.fixture(scope="module")
def profiled():
    """A double-buffered blocked GEMM (loads, GEMMs, three ALU ops per tile, stores, tokens both ways)."""
    dev = TsimDevice(profile=True)
    a = RNG.integers(-128, 128, (4, 64), dtype=np.int8)
    b = RNG.integers(-128, 128, (32, 64), dtype=np.int8)
    shift = informative_shift(a, b)
    c = blocked_gemm(CommandQueue(dev), a, b, shift, GemmTiling(tile_m=1, tile_n=2, tile_k=2, vthreads=2))
    assert np.array_equal(c, gemm_reference(a, b, shift))
    runs = dev.profiled_runs()
    words = [w for w, _ in dev._profile_raw]
    return dev, runs, words


def _stages(isa, words):
    out = []
    for lo, hi in words:
        f = isa.decode(int(lo) | int(hi) << 64)
        out.append(stage_of(f["opcode"], f.get("memory_type", 0)))
    return out


def test_every_instruction_has_its_interval_in_its_module(profiled):
    dev, runs, words = profiled
    assert len(runs) == 1
    run, stages = runs[0], _stages(dev.isa, words[0])
    assert len(run.names) == len(stages) == 68
    for stage, module in MODULE.items():
        want = [i for i, s in enumerate(stages) if s == stage]
        assert [iv.index for iv in run.intervals[module]] == want, module
        assert all(iv.retired for iv in run.intervals[module])
    assert [iv.index for iv in run.intervals["fetch"]] == list(range(len(stages)))
    assert {iv.name for iv in run.intervals["compute"]} >= {"GEMM", "ALU SHR", "ALU MAX", "ALU MIN", "LOAD UOP",
                                                            "FINISH"}
    assert {iv.name for iv in run.intervals["load"]} >= {"LOAD INP", "LOAD WGT"}


def test_intervals_of_one_module_do_not_overlap(profiled):
    _, runs, _ = profiled
    run = runs[0]
    for module, ivs in run.intervals.items():
        for iv in ivs:
            assert 0 <= iv.start < iv.end <= run.cycles, (module, iv)
            if iv.stall:
                assert iv.start <= iv.stall[0] < iv.stall[1] <= iv.end, (module, iv)
        for x, y in zip(ivs, ivs[1:]):
            # a command processor idles at least one cycle between two instructions; fetch's are contiguous;
            # compute's sequencer lets a GEMM or ALU go to its engine before it retires (in order)
            if module == "compute":
                assert (x.issued if x.issued is not None else x.end) < y.start, (module, x, y)
                assert x.end <= y.end, (module, x, y)
            else:
                assert (x.end == y.start) if module == "fetch" else (x.end < y.start), (module, x, y)


def test_a_pop_starts_work_after_the_push_it_needs_has_ended(profiled):
    _, runs, _ = profiled
    run = runs[0]
    pushes, pops = {}, {}
    for module in ("load", "compute", "store"):
        for iv in run.intervals[module]:
            for q in iv.pushes:
                pushes.setdefault(q, []).append(iv)
            for q in iv.pops:
                pops.setdefault(q, []).append(iv)
    assert set(pops) == {"l2g", "g2l", "g2s", "s2g"}
    def pushed(iv, q):
        """When ``iv`` has pushed to ``q`` at the latest: at its retirement, except a g2l push, which the compute
        module gives once the instruction's work (and every older GEMM's) is done, at or before retirement."""
        if q != "g2l" or iv.module != "compute":
            return iv.end
        return max([b for _, b in iv.active] or [iv.issued if iv.issued is not None else iv.end])

    waited = 0
    for q, consumers in pops.items():
        producers = sorted(pushed(iv, q) for iv in pushes[q])
        assert len(producers) >= len(consumers)
        for k, c in enumerate(sorted(consumers, key=lambda iv: iv.busy_start)):
            # the k-th pop of a queue needs k pushes done: the token shows the cycle after the pushing one
            assert c.busy_start >= producers[k], (q, k, c, producers[k])
            waited += c.busy_start == producers[k] and c.stall is not None
    assert waited > 0        # some instruction waited and started the very cycle its token arrived


def test_intervals_add_up_to_the_cores_counters(profiled):
    """The hardware's busy/stall counters count through other logic than the event trace."""
    dev, runs, _ = profiled
    run, s = runs[0], dev.stats()
    assert run.cycles == s["cycle_count"]
    for module in ("load", "compute", "store"):
        ivs = run.intervals[module]
        assert sum((iv.issued or iv.end) - iv.busy_start for iv in ivs) == s[f"{module}_busy_cycles"], module
        assert sum(iv.stall_cycles for iv in ivs) == s[f"{module}_stall_cycles"], module
    fetch = run.intervals["fetch"]
    assert fetch[-1].end == s["fetch_busy_cycles"]
    assert sum(iv.stall_cycles for iv in fetch) == s["fetch_stall_cycles"]
    for engine in ("gemm", "alu"):
        stretches = run.engines[engine]
        assert sum(b - a for a, b in stretches) == s[f"{engine}_busy_cycles"] > 0
        attached = [a for iv in run.intervals["compute"] for a in iv.active
                    if iv.name.split()[0] == engine.upper()]
        assert attached == stretches, engine      # each stretch inside a compute instruction of its kind


def test_decoding_refuses_a_stream_that_does_not_fit_the_events(profiled):
    dev, _, _ = profiled
    words, chunks = dev._profile_raw[0]
    events = np.concatenate(chunks)
    (window,) = split_runs(events)
    with pytest.raises(ProfileError, match="load held 19 instructions but the stream gives it 8"):
        decode_run(dev.isa, words[:30], events, *window)


def test_the_normal_build_records_nothing_and_says_so():
    dev = TsimDevice()
    assert dev.lib.tsim_profile_enabled() == 0
    with pytest.raises(DeviceError, match=r"needs the profile build: TsimDevice\(profile=True\)"):
        dev.profiled_runs()



def test_alu_work_runs_beside_the_gemm_of_another_tile():
    """A convolution's tiles: one output-channel block's requantization (ALU) runs while the GEMM engine
    computes the next block, the result is still exact, and instructions still retire in stream order."""
    import vta_runtime
    from vta_compiler.testing.layers import run_conv2d
    from vta_compiler.top.conv2d import Conv2DTiling, Conv2DWorkload
    dev = TsimDevice(profile=True)
    vta_runtime.set_command_queue(CommandQueue(dev))
    try:
        r = run_conv2d(Conv2DWorkload(1, 8, 8, 32, 64, 3, 3, 1, 1, 1, 1),
                       Conv2DTiling(tile_co=4, tile_h=8, tile_w=8, tile_ci=2, oc_nthread=2), seed=3)
        run = dev.profiled_runs()[-1]
    finally:
        vta_runtime.set_command_queue(None)
        dev.close()
    assert r.correct and r.inside_fraction > 0.5
    beside = sum(max(0, min(b, d) - max(a, c)) for a, b in run.engines["alu"] for c, d in run.engines["gemm"])
    alu = sum(b - a for a, b in run.engines["alu"])
    assert beside > alu // 4, (beside, alu)
    comp = run.intervals["compute"]
    assert all(iv.retired for iv in comp) and [iv.end for iv in comp] == sorted(iv.end for iv in comp)


def test_the_next_tiles_gemms_run_beside_this_tiles_epilogue():
    """Tiles with a chunk loop over the input channels: with two accumulator copies (``acc_nbuf=2``) a tile's
    requantization runs while the GEMM engine computes the next tile (the tokens let its loads start and its resets
    use the other copy); with one copy the next tile's resets wait for this tile's stores, so nothing overlaps (the
    negative control). Both results exact."""
    import vta_runtime
    from vta_compiler.testing.layers import run_conv2d
    from vta_compiler.top.conv2d import Conv2DTiling, Conv2DWorkload
    dev = TsimDevice(profile=True)
    vta_runtime.set_command_queue(CommandQueue(dev))
    beside = {}
    try:
        for copies in (1, 2):
            r = run_conv2d(Conv2DWorkload(1, 16, 8, 64, 32, 3, 3, 1, 1, 1, 1),
                           Conv2DTiling(tile_co=2, tile_h=2, tile_w=8, ko_nthread=2, acc_nbuf=copies), seed=3)
            assert r.correct and r.inside_fraction > 0.4
            run = dev.profiled_runs(clear=True)[-1]
            alu = sum(b - a for a, b in run.engines["alu"])
            beside[copies] = sum(max(0, min(b, d) - max(a, c)) for a, b in run.engines["alu"]
                                 for c, d in run.engines["gemm"]) / alu
    finally:
        vta_runtime.set_command_queue(None)
        dev.close()
    assert beside[2] > 0.1 and beside[1] < beside[2] / 2, beside
