"""DMA engines: one DRAM row at a time, split into AXI bursts.

``DmaReader`` turns row commands (byte address, element count) into AR bursts (at most 256
beats, never across a 4 KiB boundary, several outstanding) and the returning beats into a stream
of whole elements. Elements may be wider than a beat (they are assembled from consecutive beats)
or narrower (several per beat; a row may then start inside a beat, e.g. UOP loads).

``DmaWriter`` does the reverse for elements at least one beat wide (STORE).

Timing (``vta_hw.timing``): a row command is first registered, then checked and turned into a
burst count in the next cycle (narrow arithmetic: the count of beats only needs the offset inside
the first beat); the length of the next burst is computed a cycle ahead, so a new burst can be
issued at most every other cycle (a burst is at least one beat, and usually many). The reader's
count of outstanding bursts takes a burst's last beat a cycle late (the consumer's ready is not on
the path into it).

Both accept ``halt``: no new bursts are issued, read data still owed by the bus is accepted and
dropped, write bursts already announced are completed with zero strobes, so the bus is never left
hanging. ``idle`` is true when no transaction is outstanding. A bus error response, or a row that
would run past the 32-bit address space, sets the sticky ``error``.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from .axi import ADDR_BITS, BOUNDARY_BYTES, MAX_BURST_BEATS, ReadClientSignature, WriteClientSignature

#: Width of byte addresses computed inside the DMA engines (wider than AXI so overflow is seen).
WIDE_ADDR_BITS = 48
COUNT_BITS = 17


def row_cmd_layout() -> data.StructLayout:
    return data.StructLayout({"addr": WIDE_ADDR_BITS, "count": COUNT_BITS})


def _log2(x: int) -> int:
    assert x > 0 and x & (x - 1) == 0, x
    return x.bit_length() - 1


class _BurstSplitter:
    """Shared burst-splitting logic: a registered row command, then the rest of the row, and the
    length of its next burst (registered: ``n`` is valid when ``n_valid``)."""

    def __init__(self, m: Module, elem_bytes: int, beat_bytes: int, max_beats: int = MAX_BURST_BEATS):
        self.log_b = _log2(beat_bytes)
        self.log_e = _log2(elem_bytes)
        beats_bits = COUNT_BITS + max(self.log_e - self.log_b, 0) + 2
        # the registered row command
        self.q_valid = Signal()
        self.q_addr = Signal(ADDR_BITS)
        self.q_count = Signal(COUNT_BITS)
        self.q_nonempty = Signal()
        self.q_bytes_m1 = Signal(COUNT_BITS + self.log_e)   # row bytes - 1
        self.q_high = Signal()                               # the row starts at or past 2^32
        self.q_past = Signal()                               # the row starts past 2^32
        self.q_round = Signal(self.log_b + 1)                # offset inside the first beat + beat - 1
        # the row being split into bursts
        self.cur = Signal(ADDR_BITS)
        self.beats_left = Signal(beats_bits)
        self.active = Signal()
        self.n = Signal(range(max_beats + 1))
        self.n_valid = Signal()
        to_boundary = Signal(range(BOUNDARY_BYTES // beat_bytes + 1))
        m.d.comb += to_boundary.eq((BOUNDARY_BYTES - self.cur[:_log2(BOUNDARY_BYTES)]) >> self.log_b)
        n = Signal(range(max_beats + 1))
        m.d.comb += n.eq(Mux(self.beats_left < max_beats, self.beats_left, max_beats))
        m.d.sync += [self.n.eq(Mux(to_boundary < n, to_boundary, n)), self.n_valid.eq(self.active)]

    def take(self, m: Module, addr, count):
        """Statements that register a row command (the caller checks ``~q_valid``)."""
        m.d.sync += [
            self.q_valid.eq(1), self.q_addr.eq(addr[:ADDR_BITS]), self.q_count.eq(count),
            self.q_nonempty.eq(count != 0), self.q_high.eq(addr[ADDR_BITS:] != 0),
            self.q_past.eq(addr > (1 << ADDR_BITS)),
            self.q_bytes_m1.eq(Cat(Const(-1, self.log_e), count - 1) if self.log_e else count - 1),
            self.q_round.eq(addr[:self.log_b] + ((1 << self.log_b) - 1)),
        ]

    def start(self, m: Module):
        """Statements that start splitting the registered row; returns (overflow, nonempty): the
        row ends past 2^32, the row has elements."""
        end_carry = Signal()
        m.d.comb += end_carry.eq((self.q_addr + self.q_bytes_m1)[ADDR_BITS])
        overflow = Mux(self.q_nonempty, self.q_high | end_carry, self.q_past)
        m.d.sync += [self.q_valid.eq(0), self.n_valid.eq(0)]
        with m.If(~overflow & self.q_nonempty):
            m.d.sync += [self.active.eq(1), self.cur.eq(self.q_addr >> self.log_b << self.log_b),
                         self.beats_left.eq((self.q_round + (self.q_count << self.log_e)) >> self.log_b)]
        return overflow, self.q_nonempty

    def issue(self, m: Module):
        """Statements that issue the next burst of ``n`` beats (the caller checks ``n_valid``)."""
        m.d.sync += [self.cur.eq(self.cur + (self.n << self.log_b)), self.beats_left.eq(self.beats_left - self.n),
                     self.n_valid.eq(0)]
        with m.If(self.beats_left == self.n):
            m.d.sync += self.active.eq(0)

    def stop(self, m: Module, halt):
        """``halt`` drops the row and the registered command (add after the other statements)."""
        with m.If(halt):
            m.d.sync += [self.active.eq(0), self.q_valid.eq(0)]


class DmaReader(wiring.Component):
    def __init__(self, elem_bits: int, data_bits: int, max_outstanding: int = 8, row_fifo_depth: int = 4,
                 max_burst_beats: int = MAX_BURST_BEATS):
        self.max_burst_beats = max_burst_beats
        self.elem_bits = elem_bits
        self.data_bits = data_bits
        self.max_outstanding = max_outstanding
        self.row_fifo_depth = row_fifo_depth
        super().__init__({
            "cmd": In(stream.Signature(row_cmd_layout())),
            "out": Out(stream.Signature(elem_bits)),
            "axi": Out(ReadClientSignature(data_bits)),
            "halt": In(1),
            "idle": Out(1),
            "error": Out(1),
            "error_addr": Out(ADDR_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        ew, dw = self.elem_bits, self.data_bits
        eb, bb = ew // 8, dw // 8
        sp = _BurstSplitter(m, eb, bb, self.max_burst_beats)
        ar, r = self.axi.ar, self.axi.r

        outstanding = Signal(range(self.max_outstanding + 1))
        issued = Signal()
        done_burst = Signal()
        # a burst's end counts a cycle late: the SRAM writer's decision to take a beat is not on the path
        # into the counter (timing); the count is one too high for that cycle, which only delays an issue
        m.d.sync += [done_burst.eq(r.valid & r.ready & r.payload.last),
                     outstanding.eq(outstanding + issued - done_burst)]

        narrow = ew < dw
        if narrow:
            k_per_beat = dw // ew
            info_layout = data.StructLayout({"skip": max(_log2(k_per_beat), 1), "count": COUNT_BITS})
            m.submodules.rows = rows = fifo.SyncFIFOBuffered(width=info_layout.size, depth=self.row_fifo_depth)
            info = data.View(info_layout, rows.r_data)
            info_w = data.View(info_layout, rows.w_data)

        # ---- issue side
        ar_valid = Signal()
        ar_addr = Signal(ADDR_BITS)
        ar_len = Signal(8)
        m.d.comb += [ar.valid.eq(ar_valid), ar.payload.addr.eq(ar_addr), ar.payload.len.eq(ar_len)]
        with m.If(ar.ready):
            m.d.sync += ar_valid.eq(0)

        cmd = self.cmd.payload
        m.d.comb += self.cmd.ready.eq(~sp.q_valid & ~self.halt)
        with m.If(self.cmd.valid & self.cmd.ready):
            sp.take(m, cmd.addr, cmd.count)
        can_start = sp.q_valid & ~sp.active & ~self.halt
        if narrow:
            can_start &= rows.w_rdy
        with m.If(can_start):
            overflow, nonempty = sp.start(m)
            with m.If(overflow):
                m.d.sync += [self.error.eq(1), self.error_addr.eq(sp.q_addr)]
            if narrow:
                with m.If(~overflow & nonempty):
                    m.d.comb += [rows.w_en.eq(1), info_w.count.eq(sp.q_count),
                                 info_w.skip.eq(sp.q_addr[_log2(eb):_log2(bb)])]

        slot_free = ~ar_valid | ar.ready
        with m.If(sp.active & sp.n_valid & slot_free & (outstanding < self.max_outstanding) & ~self.halt):
            m.d.comb += issued.eq(1)
            m.d.sync += [ar_valid.eq(1), ar_addr.eq(sp.cur), ar_len.eq(sp.n - 1)]
            sp.issue(m)
        sp.stop(m, self.halt)

        with m.If(r.valid & r.ready & (r.payload.resp != 0)):
            m.d.sync += [self.error.eq(1), self.error_addr.eq(ar_addr)]

        m.d.comb += self.idle.eq((outstanding == 0) & ~sp.active & ~sp.q_valid & ~ar_valid)

        # ---- data side
        if not narrow:
            ratio = ew // dw
            buf = Signal(ew)
            full = Signal()
            cnt = Signal(range(max(ratio, 2)))
            m.d.comb += [self.out.valid.eq(full & ~self.halt), self.out.payload.eq(buf)]
            m.d.comb += r.ready.eq(self.halt | ~full | self.out.ready)
            with m.If(self.out.valid & self.out.ready):
                m.d.sync += full.eq(0)
            with m.If(r.valid & r.ready & ~self.halt):
                if ratio == 1:
                    m.d.sync += [buf.eq(r.payload.data), full.eq(1)]
                else:
                    m.d.sync += buf.eq(Cat(buf[dw:], r.payload.data))
                    with m.If(cnt == ratio - 1):
                        m.d.sync += [cnt.eq(0), full.eq(1)]
                    with m.Else():
                        m.d.sync += cnt.eq(cnt + 1)
            with m.If(self.halt):
                m.d.sync += [full.eq(0), cnt.eq(0)]
        else:
            beat = Signal(dw)
            beat_valid = Signal()
            pos = Signal(range(k_per_beat))
            rem = Signal(COUNT_BITS)
            row_active = Signal()
            m.d.comb += [self.out.valid.eq(beat_valid & ~self.halt),
                         self.out.payload.eq(beat.word_select(pos, ew)),
                         r.ready.eq(self.halt | (~beat_valid & (row_active | rows.r_rdy)))]
            with m.If(r.valid & r.ready & ~self.halt):
                m.d.sync += [beat.eq(r.payload.data), beat_valid.eq(1)]
                with m.If(~row_active):
                    m.d.sync += [pos.eq(info.skip), rem.eq(info.count), row_active.eq(1)]
            with m.If(self.out.valid & self.out.ready):
                m.d.sync += [rem.eq(rem - 1), pos.eq(pos + 1)]
                with m.If(rem == 1):
                    m.d.sync += [beat_valid.eq(0), row_active.eq(0), pos.eq(0)]
                    m.d.comb += rows.r_en.eq(1)
                with m.Elif(pos == k_per_beat - 1):
                    m.d.sync += [beat_valid.eq(0), pos.eq(0)]
            with m.If(self.halt):
                m.d.sync += [beat_valid.eq(0), row_active.eq(0)]
        return m


class DmaWriter(wiring.Component):
    def __init__(self, elem_bits: int, data_bits: int, max_outstanding: int = 8, len_fifo_depth: int = 4,
                 max_burst_beats: int = MAX_BURST_BEATS):
        self.max_burst_beats = max_burst_beats
        assert elem_bits >= data_bits and elem_bits % data_bits == 0
        self.elem_bits = elem_bits
        self.data_bits = data_bits
        self.max_outstanding = max_outstanding
        self.len_fifo_depth = len_fifo_depth
        super().__init__({
            "cmd": In(stream.Signature(row_cmd_layout())),
            "inp": In(stream.Signature(elem_bits)),
            "axi": Out(WriteClientSignature(data_bits)),
            "halt": In(1),
            "idle": Out(1),
            "error": Out(1),
            "error_addr": Out(ADDR_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        ew, dw = self.elem_bits, self.data_bits
        ratio = ew // dw
        sp = _BurstSplitter(m, ew // 8, dw // 8, self.max_burst_beats)
        aw, w, b = self.axi.aw, self.axi.w, self.axi.b

        m.submodules.lens = lens = fifo.SyncFIFOBuffered(width=9, depth=self.len_fifo_depth)

        outstanding = Signal(range(self.max_outstanding + 1))
        issued = Signal()
        m.d.comb += b.ready.eq(1)
        m.d.sync += outstanding.eq(outstanding + issued - b.valid)
        with m.If(b.valid & (b.payload != 0)):
            m.d.sync += [self.error.eq(1), self.error_addr.eq(aw.payload.addr)]

        aw_valid = Signal()
        aw_addr = Signal(ADDR_BITS)
        aw_len = Signal(8)
        m.d.comb += [aw.valid.eq(aw_valid), aw.payload.addr.eq(aw_addr), aw.payload.len.eq(aw_len)]
        with m.If(aw.ready):
            m.d.sync += aw_valid.eq(0)

        cmd = self.cmd.payload
        m.d.comb += self.cmd.ready.eq(~sp.q_valid & ~self.halt)
        with m.If(self.cmd.valid & self.cmd.ready):
            sp.take(m, cmd.addr, cmd.count)
        with m.If(sp.q_valid & ~sp.active & ~self.halt):
            overflow, _ = sp.start(m)
            with m.If(overflow):
                m.d.sync += [self.error.eq(1), self.error_addr.eq(sp.q_addr)]

        slot_free = ~aw_valid | aw.ready
        with m.If(sp.active & sp.n_valid & slot_free & lens.w_rdy & (outstanding < self.max_outstanding) & ~self.halt):
            m.d.comb += [issued.eq(1), lens.w_en.eq(1), lens.w_data.eq(sp.n)]
            m.d.sync += [aw_valid.eq(1), aw_addr.eq(sp.cur), aw_len.eq(sp.n - 1)]
            sp.issue(m)
        sp.stop(m, self.halt)

        # ---- W side
        wrem = Signal(9)
        wactive = Signal()
        ebuf = Signal(ew)
        ecnt = Signal(range(ratio + 1))
        evalid = Signal()
        w_fire = Signal()
        m.d.comb += [
            w.valid.eq(wactive & (evalid | self.halt)),
            w.payload.data.eq(ebuf[:dw]),
            w.payload.strb.eq(Mux(evalid, Const(-1, dw // 8), 0)),
            w.payload.last.eq(wrem == 1),
            w_fire.eq(w.valid & w.ready),
        ]
        last_beat_of_elem = ecnt == 1
        with m.If(w_fire):
            m.d.sync += wrem.eq(wrem - 1)
            with m.If(wrem == 1):
                m.d.sync += wactive.eq(0)
            with m.If(evalid):
                m.d.sync += [ebuf.eq(ebuf >> dw), ecnt.eq(ecnt - 1)]
                with m.If(last_beat_of_elem):
                    m.d.sync += evalid.eq(0)
        # the next burst's length is taken as the last beat of this one goes, so bursts go back to back
        with m.If((~wactive | (w_fire & (wrem == 1))) & lens.r_rdy):
            m.d.comb += lens.r_en.eq(1)
            m.d.sync += [wactive.eq(1), wrem.eq(lens.r_data)]
        take = ~self.halt & (~evalid | (w_fire & last_beat_of_elem))
        m.d.comb += self.inp.ready.eq(take)
        with m.If(self.inp.valid & take):
            m.d.sync += [ebuf.eq(self.inp.payload), ecnt.eq(ratio), evalid.eq(1)]

        m.d.comb += self.idle.eq((outstanding == 0) & ~sp.active & ~sp.q_valid & ~aw_valid & ~wactive & ~lens.r_rdy)
        return m
