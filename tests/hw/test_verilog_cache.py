"""The Verilog cache (``vta_hw.verilog``) and tsim's library cache honour ``$VTA_CACHE_DIR``, and two
processes regenerating the same Verilog while a third reads it never clash: no FileNotFoundError on
the rename, and the reader never sees a part of the file."""

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_caches_live_under_vta_cache_dir(tmp_path, monkeypatch):
    from vta_hw.cache import cache_dir
    from vta_hw.spec import load_config
    from vta_hw.verilog import verilog_dir
    from vta_runtime import cxx

    monkeypatch.setenv("VTA_CACHE_DIR", str(tmp_path))
    cfg = load_config()
    assert cache_dir() == tmp_path
    assert verilog_dir(cfg) == tmp_path / "hw" / cfg.hash(hardware_only=True)
    assert cxx.cache_dir() == tmp_path
    import sim.tsim
    assert sim.tsim.build_root() == tmp_path / "tsim"
    monkeypatch.delenv("VTA_CACHE_DIR")
    assert verilog_dir(cfg).parent.parent != tmp_path       # the negative control: the default is elsewhere


# A process that regenerates the Verilog (force=True) again and again, with a converter that returns a
# large text at once (the real one takes many seconds), or reads it and checks each read is whole.
_WORKER = textwrap.dedent('''
    import sys, time
    from pathlib import Path
    import amaranth.back.verilog
    import vta_hw.verilog as v
    role, folder, rounds = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    TEXT = "".join(f"// line {k} of a large Verilog file\\n" for k in range(200_000)) + "endmodule\\n"
    amaranth.back.verilog.convert = lambda *a, **k: TEXT
    v.verilog_dir = lambda cfg: folder
    while not (folder.parent / "go").exists():
        time.sleep(0.01)
    if role == "writer":
        for _ in range(rounds):
            assert v.generate(force=True) == folder / "vta_core.v"
    else:
        seen = 0
        deadline = time.monotonic() + 60
        while not (folder.parent / "writers_done").exists() and time.monotonic() < deadline:
            p = folder / "vta_core.v"
            if p.exists():
                got = p.read_text()
                assert got == TEXT, f"read a file of {len(got)} characters, want {len(TEXT)}"
                seen += 1
        assert seen > 0, "the reader never saw the file"
    print(role, "ok")
''')


def test_two_writers_and_a_reader_share_the_verilog_cache(tmp_path):
    folder = tmp_path / "hw" / "entry"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "VTA_CACHE_DIR": str(tmp_path / "cache")}
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)

    def start(role):
        return subprocess.Popen([sys.executable, str(script), role, str(folder), "25"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    writers = [start("writer"), start("writer")]
    reader = start("reader")
    time.sleep(1.0)                          # let all three import and wait at the barrier
    (tmp_path / "hw" / "go").parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "hw" / "go").write_text("")
    outs = [w.communicate(timeout=300)[0] for w in writers]
    (tmp_path / "hw" / "writers_done").write_text("")
    outs.append(reader.communicate(timeout=300)[0])
    for p, out in zip(writers + [reader], outs):
        assert p.returncode == 0, out
    assert sorted(o.strip().splitlines()[-1] for o in outs) == ["reader ok", "writer ok", "writer ok"]
    leftovers = [p.name for p in folder.iterdir() if p.name not in ("vta_core.v", "sources.sha", "config.json",
                                                                     ".lock")]
    assert leftovers == []                   # every temporary file was renamed or removed
