"""Files that two processes write at once: whole-file replacement, and read-modify-write under a lock
(vta_hw.files, the synthesis cache, autotune's ship)."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _start(code: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(procs) -> None:
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0, out


#: children wait here after their imports until every one is ready, so that their loops overlap
BARRIER = """
import os, sys, time
def barrier(folder, me, n):
    open(os.path.join(folder, f"ready-{me}"), "w").close()
    deadline = time.monotonic() + 120
    while sum(f.startswith("ready-") for f in os.listdir(folder)) < n and time.monotonic() < deadline:
        time.sleep(0.01)
"""


WRITER = BARRIER + """
import json
from vta_hw.files import write_atomic
path, me = sys.argv[1], sys.argv[2]
barrier(sys.argv[3], me, 2)
for i in range(60):
    write_atomic(path, json.dumps({"writer": me, "i": i, "pad": [me * 40] * 20000}))
"""


def test_two_writers_and_a_reader_see_whole_files(tmp_path):
    path = tmp_path / "result.json"
    (tmp_path / "sync").mkdir()
    procs = [_start(WRITER, str(path), name, str(tmp_path / "sync")) for name in ("a", "b")]
    seen = set()
    while any(p.poll() is None for p in procs):
        if path.exists():
            d = json.loads(path.read_text())          # never a part of a file
            assert d["pad"] == [d["writer"] * 40] * 20000
            seen.add(d["writer"])
    _finish(procs)
    assert json.loads(path.read_text())["i"] == 59 and seen
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json", "sync"]   # no temporary file left


SYNTH = BARRIER + """
from pathlib import Path
import vta_hw.synth as synth
from vta_hw import timing
out = Path(sys.argv[1])

# yosys and the timing analysis stand aside (the real ones take minutes): what is tested is the
# cache beside the Verilog, which both processes read and write
class Report:
    def to_json(self):
        return {"paths": ["x" * 60] * 20000}
def run_yosys(verilog, family, out_dir, progress, netlist=False):
    (out_dir / f"netlist_{family}.json").write_text("{}")
    time.sleep(0.01)
    return {"DSP48E1": 128, "LUT6": 1000}
synth.generate = lambda cfg, **kw: out / "vta_core.v"
synth.run_yosys = run_yosys
timing.analyse = lambda *a, **k: Report()
timing.format_report = lambda *a, **k: "report"
barrier(sys.argv[2], sys.argv[3], 2)
for i in range(20):
    data = synth.synth("xc7", progress=lambda m: None, force=i % 2 == 0)
    assert data["cells"] == {"DSP48E1": 128, "LUT6": 1000} and len(data["timing"]["paths"]) == 20000
"""


def test_two_processes_share_the_synthesis_cache(tmp_path):
    (tmp_path / "synth").mkdir()
    (tmp_path / "sync").mkdir()
    _finish([_start(SYNTH, str(tmp_path), str(tmp_path / "sync"), me) for me in ("a", "b")])
    assert json.loads((tmp_path / "synth" / "result_xc7.json").read_text())["family"] == "xc7"


SHIP = BARRIER + """
from pathlib import Path
from vta_compiler.autotune.__main__ import ship
from vta_hw.spec import load_config
dest, log, log2bits = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
cfg = load_config({**load_config().cfg_dict, "LOG_INP_BUFF_SIZE": log2bits})
barrier(sys.argv[4], log2bits, 2)
for _ in range(25):
    assert ship(log, cfg, dest) == 50
"""


def test_two_processes_ship_records_of_two_configs_to_one_file(tmp_path):
    """Each ships its configuration's records to the same file, again and again: neither process's
    records are lost (a read-modify-write without the lock drops the other's)."""
    from vta_hw.spec import load_config
    dest = tmp_path / "records" / "resnet18.jsonl"
    procs, want = [], {}
    for bits in (14, 15):
        cfg = load_config({**load_config().cfg_dict, "LOG_INP_BUFF_SIZE": bits})
        h = cfg.hash(hardware_only=True)
        log = tmp_path / f"log{bits}.jsonl"
        lines = [json.dumps({"v": 1, "config": h, "trial": k, "pad": "p" * 2000}) for k in range(50)]
        log.write_text("\n".join(lines) + "\n")
        want[h] = lines
        procs.append(_start(SHIP, str(dest), str(log), str(bits), str(tmp_path)))
    _finish(procs)
    got = dest.read_text().splitlines()
    assert len(want) == 2 and sorted(got) == sorted(sum(want.values(), []))
