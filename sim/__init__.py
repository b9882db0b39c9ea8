"""Devices that run VTA instruction streams: ``sim.fsim`` (functional) and ``sim.tsim`` (Verilated core)."""
