"""A fixed-seed batch of the differential fuzzer (fsim vs tsim); ``nox -s fuzz -- N`` runs more."""

import numpy as np
import pytest

tsim = pytest.importorskip("sim.tsim")
if not tsim.verilator_available():
    pytest.skip("Verilator is not installed", allow_module_level=True)

from sim import fuzz  # noqa: E402


@pytest.mark.parametrize("name", sorted(fuzz.configs()))
def test_fixed_seed_batch(name):
    failures = fuzz.fuzz(100, seed=20240, names=[name], quiet=True, jobs=2)
    assert not failures, "\n".join(f"seed {p.seed}: {'; '.join(pr)}" for p, pr in failures)


def test_results_do_not_depend_on_the_number_of_workers():
    """Each program's seed draws its program and its tsim bus; the cycle counts (which the random
    bus changes) are the same from one process or two."""
    cases = [(name, 500 + k) for k, name in enumerate(sorted(fuzz.configs()) * 2)]
    one = {(p.cfg_name, p.seed): (p.tsim_cycles, pr) for p, pr in fuzz.run_all(cases, jobs=1)}
    two = {(p.cfg_name, p.seed): (p.tsim_cycles, pr) for p, pr in fuzz.run_all(cases, jobs=2)}
    assert one == two
    assert all(pr == [] and cyc > 0 for cyc, pr in one.values())
    assert len({repr(fuzz.bus_for(seed)) for _, seed in cases}) == len(cases)


def test_reproducer_round_trip(tmp_path, monkeypatch):
    monkeypatch.setattr(fuzz, "OUT_DIR", tmp_path)
    prog, problems = fuzz.run_case("1x16x16", 7)
    assert problems == []
    path = fuzz.save(prog, problems)
    assert fuzz.load(path).insns == prog.insns
    assert fuzz.replay(path) == []


def test_extension_configs_and_a_batch_with_mul_and_acc_8bit(tmp_path, monkeypatch):
    """NAME+ext: the config with every ISA extension, whose programs have MUL and ACC_8BIT (the
    default configs' programs do not change: seeds keep their meaning)."""
    from sim.fsim import FsimDevice
    from vta_hw.spec import Isa, MemType, Opcode
    assert list(fuzz.configs()) == ["1x16x16", "2x8x8", "ultra96"]
    assert sorted(fuzz.configs(extended=True)) == sorted([*fuzz.configs(), "1x16x16+ext", "2x8x8+ext", "ultra96+ext"])
    cfg = fuzz.config_of("2x8x8+ext")
    assert cfg.ISA_EXTENSIONS == ("alu_mul", "acc_8bit") and cfg.BATCH == 2
    seen = {"mul": 0, "acc8": 0}
    for seed in range(20):
        prog = fuzz.make_program("2x8x8+ext", seed, FsimDevice(cfg, dram_bytes=fuzz.DRAM_BYTES).alloc)
        for a, b in Isa.words_from_bytes(prog.insns):
            f = cfg.isa.decode(int(a) | int(b) << 64)
            seen["mul"] += f["opcode"] == Opcode.ALU and f["alu_opcode"] == 4
            seen["acc8"] += f["opcode"] == Opcode.LOAD and f["memory_type"] == MemType.ACC_8BIT
    assert seen["mul"] > 20 and seen["acc8"] > 20
    monkeypatch.setattr(fuzz, "OUT_DIR", tmp_path)
    failures = fuzz.fuzz(40, seed=20250, names=["2x8x8+ext"], quiet=True, jobs=1)
    assert not failures, "\n".join(f"seed {p.seed}: {'; '.join(pr)}" for p, pr in failures)


BATCH_SHAPES = ("no sync at the end", "a loop past a buffer", "sparse inputs", "run twice")


def _batch_programs(name, seeds):
    from sim.fsim import FsimDevice
    cfg = fuzz.load_config(fuzz.configs()[name])
    for seed in seeds:
        yield fuzz.make_program(name, seed, FsimDevice(cfg, dram_bytes=fuzz.DRAM_BYTES).alloc)


def test_fixed_batch_has_every_shape():
    """The default suite's batch has programs of each shape (so test_fixed_seed_batch compares them)."""
    seen = {shape: 0 for shape in BATCH_SHAPES}
    for prog in _batch_programs("1x16x16", range(20240, 20240 + 150)):
        for note in prog.notes:
            seen[note.split(" (")[0]] += 1
    assert all(n >= 5 for n in seen.values()), seen


def _largest_index(dev, words, i, what):
    """The largest index the loop of GEMM/ALU instruction i reaches in operand ``what`` (dst/src/wgt)."""
    isa = dev.config.isa
    w = int(words[i, 0]) | int(words[i, 1]) << 64
    f = isa.decode(w)
    uops = [isa.uop.decode(int(u)) for u in dev.uop[f["uop_bgn"]:f["uop_end"], 0]]
    base = max(u[f"{what}_idx"] for u in uops)
    return base + (f["iter_out"] - 1) * f[f"{what}_factor_out"] + (f["iter_in"] - 1) * f[f"{what}_factor_in"]


def test_loop_errors_are_compared_by_first_index_and_counters():
    """Programs with a loop past a buffer fail alike on fsim and tsim: same instruction, same first
    failing index (often not the loop's largest), same compute counters (the uops before it ran)."""
    import re

    seeds = [p.seed for p in _batch_programs("1x16x16", range(20240, 20240 + 150)) if "a loop past a buffer" in p.notes]
    first_not_largest = 0
    for seed in seeds:
        fs, ts = fuzz._fresh_pair("1x16x16", seed)
        try:
            prog = fuzz.make_program("1x16x16", seed, fs.alloc)
            for _, data in prog.buffers:   # the same allocations on tsim
                ts.alloc(data.size)
            fe, _, fst, _ = fuzz._run_on(fs, prog)
            te, _, tst, _ = fuzz._run_on(ts, prog)
        finally:
            ts.close()
        assert fe == te and fe[0] == "SramIndexError", (prog.seed, fe, te)
        assert all(fst[k] == tst[k] for k in fuzz.COMPUTE_COUNTERS), (prog.seed, fst, tst)
        m = re.search(r"(ACC \(dst\)|ACC \(src\)|INP \(src\)|WGT) index (\d+)", fe[2])
        what = {"ACC (dst)": "dst", "ACC (src)": "src", "INP (src)": "src", "WGT": "wgt"}[m.group(1)]
        words = np.frombuffer(prog.insns, "<u8").reshape(-1, 2)
        first_not_largest += int(m.group(2)) < _largest_index(fs, words, fe[1], what)
    assert len(seeds) >= 5 and first_not_largest >= 5, (seeds, first_not_largest)
