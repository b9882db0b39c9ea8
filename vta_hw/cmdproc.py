"""What the three command processors (load, compute, store) share: the status they report to the
core's supervisor and the way they latch their first error."""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Value
from amaranth.lib.wiring import Out

from .layouts import INDEX_BITS


def module_status_members() -> dict:
    """Status outputs shared by load, compute and store."""
    return {
        "quiet": Out(1),       # can do nothing until some other module acts
        "holding": Out(1),     # has an instruction it has not retired (executing or waiting)
        "head_valid": Out(1),  # an instruction is held or queued: head_index is its index
        "head_index": Out(INDEX_BITS),
        "retired": Out(INDEX_BITS),   # index of the last retired instruction + 1
        "busy": Out(1),
        "stall": Out(1),
        "dma_active": Out(1),
        "error": Out(1),
        "error_code": Out(8),
        "error_detail": Out(8),
        "error_info": Out(32),
        "error_index": Out(INDEX_BITS),
    }


def drive_status(m: Module, unit, *, idle: Value, waiting: Value, index: Value, dma_idle: Value, halt: Value,
                 done: Value | int = 0, engines_idle: Value | int = 1) -> None:
    """The status outputs of a command processor.

    ``idle``: it holds no instruction; ``waiting``: it holds one that waits for a dependency
    token; ``done``: it will take no more commands (compute after FINISH); ``engines_idle``: its
    datapath engines (besides DMA) have nothing in flight."""
    holding = ~idle
    m.d.comb += [
        unit.holding.eq(holding),
        unit.head_valid.eq(holding | unit.cmd.valid),
        unit.head_index.eq(Mux(holding, index, unit.cmd.payload.index)),
        unit.busy.eq(holding & ~waiting),
        unit.stall.eq(waiting),
        unit.dma_active.eq(~dma_idle),
        unit.quiet.eq(dma_idle & engines_idle & ((idle & (~unit.cmd.valid | done | halt)) | (waiting & ~halt))),
    ]


def latch_error(m: Module, unit, code: int, detail, info, index: Value) -> None:
    """Statements that record an error (the caller keeps the first one: guard with ``~unit.error``)."""
    m.d.sync += [unit.error.eq(1), unit.error_code.eq(code), unit.error_detail.eq(detail),
                 unit.error_info.eq(info), unit.error_index.eq(index)]


def sequence_commands(m: Module, unit, *, insn: Value, index: Value, halt: Value, waiting: Value, skip: Value,
                      done: Value, pop: list, start, push: list, accept: Value | int = 1):
    """The in-order life of one instruction in a command processor.

    Take it from ``unit.cmd`` (while ``accept``) into ``insn``/``index``; wait while ``waiting``
    (its tokens are missing); then pop its tokens (the comb statements ``pop``) and call ``start()``
    to add the statements that start its work, or go straight to the push if ``skip``; wait until
    ``done``; push its tokens (the comb statements ``push``) and retire it. ``halt`` drops the
    instruction at any step. Returns ``(idle, stalled, retiring)``: the first two for
    :func:`drive_status`, ``retiring`` is high in the cycle the instruction retires."""
    with m.FSM(init="IDLE", name="sequence") as fsm:
        with m.State("IDLE"):
            m.d.comb += unit.cmd.ready.eq(~halt & accept)
            with m.If(unit.cmd.valid & unit.cmd.ready):
                m.d.sync += [insn.eq(unit.cmd.payload.insn), index.eq(unit.cmd.payload.index)]
                m.next = "WAIT"
        with m.State("WAIT"):
            with m.If(halt):
                m.next = "IDLE"
            with m.Elif(~waiting):
                m.d.comb += pop
                with m.If(skip):
                    m.next = "PUSH"
                with m.Else():
                    start()
                    m.next = "EXECUTING"
        with m.State("EXECUTING"):
            with m.If(halt):
                m.next = "IDLE"
            with m.Elif(done):
                m.next = "PUSH"
        with m.State("PUSH"):
            with m.If(halt):
                m.next = "IDLE"
            with m.Else():
                m.d.comb += push
                m.d.sync += unit.retired.eq(index + 1)
                m.next = "IDLE"
    return fsm.ongoing("IDLE"), fsm.ongoing("WAIT") & waiting, fsm.ongoing("PUSH") & ~halt
