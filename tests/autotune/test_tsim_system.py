"""tsim servers that simulate a board's memory system (``rpc_server --tsim-system``), as ``nox -s dse``
measures each board: the state and status the server keeps, the refusals, and (slow) a whole sweep point
measured through them: every layer of a small ResNet-18 on tsim with the Ultra96's bus, summed."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

pytest.importorskip("tvm")

from vta_compiler.exec.rpc_server import ServerState, make_state_dir, tsim_system_config  # noqa: E402
from vta_hw.spec import ConfigError, load_config  # noqa: E402

TSIM = {**load_config().cfg_dict, "TARGET": "tsim"}


def test_a_tsim_server_of_a_boards_system(tmp_path):
    cfg = tmp_path / "tsim.json"
    cfg.write_text(json.dumps({**TSIM, "LOG_BLOCK": 5, "LOG_WGT_BUFF_SIZE": 20, "AXI_PORTS": 2}))
    state = ServerState(make_state_dir(str(cfg), str(tmp_path / "state"), tsim_system="zcu104"))
    status = json.loads(state.status())
    assert status["system"] == "zcu104" and status["config"]["TARGET"] == "tsim"
    # the Verilated core is built for the board's bus: two 128-bit ports side by side, 32-beat bursts
    sys_cfg = tsim_system_config(state.config(), state.system)
    assert (sys_cfg.TARGET, sys_cfg.AXI_DATA_BITS, sys_cfg.AXI_MAX_BURST_BEATS) == ("zcu104", 256, 32)
    assert sys_cfg.hash(hardware_only=True) != state.config().hash(hardware_only=True)
    plain = ServerState(make_state_dir(str(cfg), str(tmp_path / "plain")))
    assert json.loads(plain.status())["system"] is None
    assert tsim_system_config(plain.config(), None) == plain.config()


def test_tsim_system_refusals(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({**TSIM, "AXI_PORTS": 2}))
    with pytest.raises(ConfigError, match="AXI_PORTS=2 but TARGET=pynq has 1 coherent memory port"):
        make_state_dir(str(cfg), str(tmp_path / "a"), tsim_system="pynq")
    with pytest.raises(ConfigError, match="'zc706' is not a board TARGET; the boards are pynq, ultra96"):
        make_state_dir(str(cfg), str(tmp_path / "b"), tsim_system="zc706")
    cfg.write_text(json.dumps({**TSIM, "TARGET": "sim"}))
    with pytest.raises(ConfigError, match="must have TARGET tsim, not 'sim'"):
        make_state_dir(str(cfg), str(tmp_path / "c"), tsim_system="ultra96")


@pytest.mark.slow      # a tsim build of a small configuration with the Ultra96's bus, a dozen layers measured
def test_a_sweep_point_measured_on_the_boards_system(tmp_path):
    from sim.tsim import verilator_available
    if not verilator_available():
        pytest.skip("tsim needs Verilator")
    from boards import dse
    from boards.platforms import BOARDS
    small = {**load_config().cfg_dict, "TARGET": "ultra96", "LOG_BATCH": 1, "LOG_BLOCK": 3,
             "LOG_UOP_BUFF_SIZE": 12, "LOG_INP_BUFF_SIZE": 13, "LOG_WGT_BUFF_SIZE": 14, "LOG_ACC_BUFF_SIZE": 14}
    res = dse.Result(config={**small, "FPGA_FREQ": 250}, status="synthesised", clock_mhz=250)
    args = SimpleNamespace(networks=["resnet18"], image=32, trials=1, tracker=None, servers=1, timeout=600,
                           quiet=True)
    dse.measure_cycles(res, BOARDS["ultra96"], tmp_path, args)
    assert res.status == "ok", res.note
    rows = res.layers["resnet18"]
    assert sum(uses for _, uses, _, _ in rows) == 21                   # 20 convolutions and the classifier
    assert res.cycles["resnet18"] == sum(uses * cycles for _, uses, cycles, _ in rows)
    assert all(cycles >= ideal for _, _, cycles, ideal in rows)          # never above the array's peak
    c = res.counters["resnet18"]
    # 128-bit beats: every DMA byte the layers moved went over the bus in 16-byte beats
    moved = sum(c.get(k, 0) for k in ("inp_load_nbytes", "wgt_load_nbytes", "acc_load_nbytes", "uop_load_nbytes"))
    assert moved <= 16 * c["axi_read_beats"] < 2 * moved
    assert res.ms("resnet18", per_image=False) == pytest.approx(res.cycles["resnet18"] / 250e3)
    assert (tmp_path / "resnet18.done").read_text() == "1"
    before = (tmp_path / "resnet18.jsonl").read_text()
    dse.measure_cycles(res, BOARDS["ultra96"], tmp_path, args)          # resumed from the log: nothing measured
    assert (tmp_path / "resnet18.jsonl").read_text() == before
