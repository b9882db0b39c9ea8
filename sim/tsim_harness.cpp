// tsim harness: drives the Verilated VTA core (top module vta_core, C++ class Vtop).
//
// * AxiChecker watches the core's AXI4 master port every cycle and records each broken rule with
//   the cycle, the channel, the transaction/beat and the rule (see the list in check()). The run
//   stops at the first violation; Python reads the messages through tsim_violation_*().
// * An AXI4 slave model serves the master from the simulated DRAM arena that the Python runtime
//   uses (a numpy uint8 array indexed by physical address). A beat that lies wholly outside every
//   allocation gets SLVERR (writes to it are dropped): the core then reports DRAM_ACCESS. Random
//   back-pressure on each of the five channels, random read and write-response latency per burst,
//   read data reordered and interleaved across IDs, and W beats taken before their AW are all
//   configurable (tsim_set_bus).
// * AXI4-Lite register reads and writes are driven cycle by cycle.
// * tsim_run() clocks the core until its irq output rises or a cycle bound is reached; no Python
//   runs per cycle.
// The checker is also exported on its own (axi_checker_*) so that tests can feed it hand-made
// cycles and see every rule fire. Loaded by sim/tsim.py with ctypes.
// * The profile build (-DVTA_PROFILE=1, Verilated with tsim_profile.vlt so that a few of the core's
//   internal signals stay readable) records an event whenever a module's state changes: fetch,
//   load, compute and store (busy / waiting for a token, and the retired or dispatched index),
//   GEMM and ALU activity, and the run itself. Python drains them with tsim_profile_drain(); the
//   normal build has none of this code.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#ifndef CHECKER_ONLY
#include "Vtop.h"
#include "verilated.h"
#if VM_TRACE_FST
#include "verilated_fst_c.h"
#endif
#include "Vtop___024root.h"
#include <type_traits>
double sc_time_stamp() { return 0; }
#endif

namespace {

constexpr int MAX_BEAT = 64;             // widest bus the checker handles (512 bits)
constexpr uint64_t BOUNDARY = 4096;      // AXI: no burst crosses a 4 KiB boundary
constexpr uint32_t BURST_INCR = 1;

// What the checker sees of the master port in one cycle (after the combinational settle, before
// the rising edge): the master's outputs, the slave's READYs and the R/B handshakes.
struct AxiSample {
    uint8_t rst;
    uint8_t arvalid, arready, awvalid, awready, wvalid, wready, wlast;
    uint8_t rvalid, rready, rlast, bvalid, bready;
    uint32_t arid, arlen, arsize, arburst, arlock;
    uint32_t awid, awlen, awsize, awburst, awlock;
    uint32_t rid, bid;
    uint64_t araddr, awaddr, wstrb;
    uint8_t wdata[MAX_BEAT];
};

struct Addr {
    uint32_t id, len, size, burst, lock;
    uint64_t addr;
    bool operator==(const Addr& o) const {
        return id == o.id && len == o.len && size == o.size && burst == o.burst && lock == o.lock && addr == o.addr;
    }
};

class AxiChecker {
  public:
    // beat_bytes: bus width; max_beats: longest legal burst (256 for AXI4, 16 for an AXI3 port);
    // read_ids: bit i set if ARID i is one the core declares; write_id: the one AWID (an AXI3 port's
    // WID is tied to it), or -1 for any.
    AxiChecker(uint32_t beat_bytes, uint32_t max_beats, uint64_t read_ids, int write_id)
        : beat_(beat_bytes), max_beats_(max_beats), read_ids_(read_ids), write_id_(write_id) {
        log_beat_ = 0;
        while ((1u << log_beat_) < beat_) log_beat_++;
    }

    uint64_t count() const { return count_; }
    // Nothing waits for a READY: a cycle with no VALID on AR/AW/W and no R/B handshake only counts (tick).
    bool settled() const { return !ar_wait_ && !aw_wait_ && !w_wait_; }
    void tick() { cycle++; }
    const std::vector<std::string>& messages() const { return msgs_; }
    uint64_t cycle = 0;

    void check(const AxiSample& s) {
        if (s.rst) {
            if (s.arvalid) fail("AR", "", "ARVALID high during reset (AXI: VALID is low while ARESETn is asserted)");
            if (s.awvalid) fail("AW", "", "AWVALID high during reset (AXI: VALID is low while ARESETn is asserted)");
            if (s.wvalid) fail("W", "", "WVALID high during reset (AXI: VALID is low while ARESETn is asserted)");
            forget();
            cycle++;
            return;
        }
        // nothing offered on AR/AW/W, no handshake on R/B and nothing waiting for READY: no rule to check
        // and nothing to track (most cycles of a compute-bound run)
        if (!s.arvalid && !s.awvalid && !s.wvalid && !ar_wait_ && !aw_wait_ && !w_wait_ && !(s.rvalid && s.rready) &&
            !(s.bvalid && s.bready)) {
            cycle++;
            return;
        }
        Addr ar{s.arid, s.arlen, s.arsize, s.arburst, s.arlock, s.araddr};
        Addr aw{s.awid, s.awlen, s.awsize, s.awburst, s.awlock, s.awaddr};
        // VALID stays high, and the payload stays put, until READY
        stable("AR", "ARVALID", ar_wait_, s.arvalid, ar_prev_ == ar, ar_n_);
        stable("AW", "AWVALID", aw_wait_, s.awvalid, aw_prev_ == aw, aw_n_);
        bool w_same = w_prev_strb_ == s.wstrb && w_prev_last_ == s.wlast && !std::memcmp(w_prev_data_, s.wdata, beat_);
        if (w_wait_) {
            if (!s.wvalid) fail("W", w_where(w_beats_seen_), "WVALID dropped before WREADY (AXI: once VALID is high it "
                                                             "stays high until the handshake)");
            else if (!w_same) fail("W", w_where(w_beats_seen_), "WDATA/WSTRB/WLAST changed while WVALID was high and "
                                                                "WREADY low");
        }
        ar_wait_ = s.arvalid && !s.arready;
        aw_wait_ = s.awvalid && !s.awready;
        w_wait_ = s.wvalid && !s.wready;
        ar_prev_ = ar;
        aw_prev_ = aw;
        std::memcpy(w_prev_data_, s.wdata, beat_);
        w_prev_strb_ = s.wstrb;
        w_prev_last_ = s.wlast;

        if (s.arvalid && s.arready) {
            address("AR", ar, ar_n_);
            if (!(ar.id < 64 && (read_ids_ >> ar.id & 1)))
                fail("AR", txn("AR", ar_n_, ar), "ARID " + std::to_string(ar.id) +
                     " is not the ID of any read client (read data would be routed to no one)");
            reads_.push_back({ar.id, ar.len + 1});
            ar_n_++;
        }
        if (s.awvalid && s.awready) {
            address("AW", aw, aw_n_);
            if (write_id_ >= 0 && aw.id != (uint32_t)write_id_)
                fail("AW", txn("AW", aw_n_, aw), "AWID " + std::to_string(aw.id) + " is not the write ID " +
                     std::to_string(write_id_) + " (an AXI3 port's WID is tied to it)");
            aws_.push_back({aw, aw_n_});
            aw_n_++;
            if (aws_.size() > MAX_PENDING) fail("AW", txn("AW", aw_n_ - 1, aw), "more than 1024 write bursts await data");
        }
        if (s.wvalid && s.wready) {
            uint64_t all = beat_ >= 64 ? ~0ull : ((1ull << beat_) - 1);
            if (s.wstrb & ~all) fail("W", w_where(w_beats_seen_), "WSTRB has bits beyond the bus width");
            else if (s.wstrb != 0 && s.wstrb != all)
                fail("W", w_where(w_beats_seen_), "WSTRB is neither all ones nor all zeros (the core writes whole beats; "
                                                  "zero strobes only to finish a burst it abandons)");
            w_early_.push_back(s.wlast);
            w_beats_seen_++;
            if (w_early_.size() > MAX_PENDING) fail("W", w_where(w_beats_seen_ - 1), "more than 1024 W beats without an AW");
        }
        match_writes();
        if (s.rvalid && s.rready) {
            // the slave model keeps AXI's read ordering; this only tracks completion
            auto it = std::find_if(reads_.begin(), reads_.end(), [&](const Read& r) { return r.id == s.rid; });
            if (it != reads_.end() && --it->beats == 0) reads_.erase(it);
        }
        if (s.bvalid && s.bready && b_owed_) b_owed_--;
        cycle++;
    }

    // The core said it is done (irq): nothing may be outstanding on the bus.
    void finished() {
        if (!reads_.empty())
            fail("R", "", std::to_string(reads_.size()) + " read burst(s) still owe data when the core signals done");
        if (!aws_.empty() || !w_early_.empty())
            fail("W", "", "a write burst is incomplete (" + std::to_string(aws_.size()) + " AW without all W beats, " +
                 std::to_string(w_early_.size()) + " W beats without an AW) when the core signals done");
        if (b_owed_) fail("B", "", std::to_string(b_owed_) + " write response(s) not taken when the core signals done");
    }

    void forget() {
        ar_wait_ = aw_wait_ = w_wait_ = false;
        reads_.clear();
        aws_.clear();
        w_early_.clear();
        w_beat_ = 0;
        b_owed_ = 0;
    }

    void fail(const std::string& ch, const std::string& where, const std::string& rule) {
        count_++;
        if (msgs_.size() < 32)
            msgs_.push_back("cycle " + std::to_string(cycle) + ": " + ch + " channel" + (where.empty() ? "" : ", " + where) +
                            ": " + rule);
    }

  private:
    struct Read { uint32_t id, beats; };
    struct PendingAw { Addr a; uint64_t n; };
    static constexpr size_t MAX_PENDING = 1024;

    uint32_t beat_, max_beats_, log_beat_;
    uint64_t read_ids_;
    int write_id_;
    uint64_t count_ = 0;
    std::vector<std::string> msgs_;
    bool ar_wait_ = false, aw_wait_ = false, w_wait_ = false;
    Addr ar_prev_{}, aw_prev_{};
    uint8_t w_prev_data_[MAX_BEAT] = {};
    uint64_t w_prev_strb_ = 0;
    bool w_prev_last_ = false;
    uint64_t ar_n_ = 0, aw_n_ = 0, w_beats_seen_ = 0;
    std::deque<Read> reads_;
    std::deque<PendingAw> aws_;   // accepted AWs whose W beats are not all seen
    std::deque<bool> w_early_;    // WLAST of W beats not yet matched to an AW (AXI4 lets W lead AW)
    uint32_t w_beat_ = 0;         // beats of the current burst matched so far
    uint64_t b_owed_ = 0;

    static std::string hex(uint64_t v) {
        char b[24];
        std::snprintf(b, sizeof b, "0x%llx", (unsigned long long)v);
        return b;
    }
    std::string txn(const char* ch, uint64_t n, const Addr& a) const {
        return std::string(ch) + " #" + std::to_string(n) + " (id " + std::to_string(a.id) + ", addr " + hex(a.addr) +
               ", " + std::to_string(a.len + 1) + " beats)";
    }
    std::string w_where(uint64_t beat_no) const {
        (void)beat_no;
        if (!aws_.empty() && w_early_.empty())
            return "beat " + std::to_string(w_beat_) + " of write burst " + txn("AW", aws_.front().n, aws_.front().a);
        return "W beat " + std::to_string(beat_no) + " (before its AW)";
    }

    void stable(const char* ch, const char* valid, bool waiting, bool v, bool same, uint64_t n) {
        if (!waiting || (v && same)) return;
        std::string where = std::string(ch) + " #" + std::to_string(n);
        if (!v) fail(ch, where, std::string(valid) + " dropped before " + ch + "READY (AXI: once VALID is high it stays "
                                "high until the handshake)");
        else fail(ch, where, std::string(ch) + " address/control changed while " + valid + " was high and " + ch +
                             "READY low");
    }

    void address(const char* ch, const Addr& a, uint64_t n) {
        std::string where = txn(ch, n, a), c = ch;
        if (a.burst != BURST_INCR)
            fail(ch, where, c + "BURST " + std::to_string(a.burst) + " is not INCR (1)");
        if (a.size != log_beat_)
            fail(ch, where, c + "SIZE " + std::to_string(a.size) + " (" + std::to_string(1u << a.size) +
                 " bytes) is not the bus width (" + std::to_string(beat_) + " bytes; the core issues no narrow transfers)");
        if (a.len + 1 > max_beats_)
            fail(ch, where, c + "LEN " + std::to_string(a.len) + " makes a burst of " + std::to_string(a.len + 1) +
                 " beats, more than this port takes (" + std::to_string(max_beats_) + ")");
        if (a.lock) fail(ch, where, c + "LOCK " + std::to_string(a.lock) + ": exclusive access is not supported");
        uint64_t step = 1ull << std::min<uint32_t>(a.size, 12);
        if (a.addr % step)
            fail(ch, where, "address not aligned to " + c + "SIZE (" + std::to_string(step) + " bytes)");
        uint64_t first = a.addr & ~(step - 1), last = first + (uint64_t)(a.len + 1) * step - 1;
        if (first / BOUNDARY != last / BOUNDARY)
            fail(ch, where, "burst crosses a 4 KiB boundary (bytes " + hex(a.addr) + ".." + hex(last) + ")");
    }

    // Pair W beats with AWs in order and check WLAST on each.
    void match_writes() {
        while (!aws_.empty() && !w_early_.empty()) {
            const PendingAw& p = aws_.front();
            bool wlast = w_early_.front();
            w_early_.pop_front();
            uint32_t beats = p.a.len + 1;
            bool last = w_beat_ + 1 == beats;
            if (wlast != last) {
                std::string where = "beat " + std::to_string(w_beat_) + " of write burst " + txn("AW", p.n, p.a);
                fail("W", where, last ? "WLAST low on the last beat" : "WLAST high before the last beat");
            }
            if (last || wlast) {   // after an early WLAST the next beat starts the next burst
                aws_.pop_front();
                w_beat_ = 0;
                b_owed_++;
            } else {
                w_beat_++;
            }
        }
    }
};

#ifndef CHECKER_ONLY
constexpr int BEAT = AXI_BEAT_BYTES;  // defined on the compiler command line
static_assert(BEAT <= MAX_BEAT, "bus too wide for the checker");

inline void put_data(uint64_t& port, const uint8_t* src) { std::memcpy(&port, src, 8); }
template <std::size_t N> inline void put_data(VlWide<N>& port, const uint8_t* src) {
    for (std::size_t i = 0; i < N; i++) std::memcpy(&port[i], src + 4 * i, 4);
}
inline void get_data(const uint64_t& port, uint8_t* dst) { std::memcpy(dst, &port, 8); }
template <std::size_t N> inline void get_data(const VlWide<N>& port, uint8_t* dst) {
    for (std::size_t i = 0; i < N; i++) std::memcpy(dst + 4 * i, &port[i], 4);
}

struct Burst {
    uint32_t id;
    uint64_t addr;
    uint32_t beats;
    uint32_t done;
    uint64_t ready_at;  // first cycle its data (read) or its response (write) may be given
    bool error;         // a write beat fell outside every allocation: answer SLVERR
};

struct WBeat {
    uint8_t data[BEAT];
    uint64_t strb;
};

// Channels for back-pressure: the slave's READY on AR, AW, W and its VALID gaps on R, B.
enum Chan { AR, AW, W, R, B, NCHAN };

struct BusParams {
    uint32_t stall_percent[NCHAN];     // chance per cycle that the channel is held off
    uint32_t read_latency_min, read_latency_max;     // AR handshake -> first beat may go
    uint32_t write_latency_min, write_latency_max;   // last W beat -> B may go
    uint32_t reorder;                  // serve and interleave read bursts of different IDs in any order
    uint32_t early_w_beats;            // W beats taken before their AW (0: WREADY waits for the AW)
    uint64_t seed;
};

// One profile event: from `cycle` on, `track` is in `state` with `value` (see sim/tsim_profile.py).
struct ProfileEvent {
    uint64_t cycle;
    uint32_t value;
    uint16_t track;
    uint16_t state;
};
// tracks: the run (state 1 while the core is BUSY), fetch (state: busy | waiting << 1, value: instructions
// dispatched), load/compute/store (state: busy | waiting << 1, value: index of the last retired + 1), GEMM
// and ALU (state 1 while active)
enum Track { T_RUN, T_FETCH, T_LOAD, T_COMPUTE, T_STORE, T_GEMM, T_ALU, NTRACK };
constexpr size_t PROFILE_MAX_EVENTS = size_t(1) << 24;   // undrained events beyond this are counted, not kept

struct Sim {
    VerilatedContext* ctx = nullptr;
    Vtop* top = nullptr;
#if VM_TRACE_FST
    VerilatedFstC* tfp = nullptr;
#endif
    AxiChecker* chk = nullptr;
    uint64_t time = 0;
    uint64_t cycle = 0;
    uint8_t* mem = nullptr;
    uint64_t mem_bytes = 0;
    std::vector<uint64_t> starts, ends;  // allocations, sorted, [start, end)
    std::vector<Burst> rq;               // accepted read bursts, oldest first
    std::deque<Burst> wq;                // accepted write bursts awaiting W beats
    std::deque<WBeat> early;             // W beats taken before their AW
    std::deque<Burst> bq;                // write responses owed
    BusParams bus{{0, 0, 0, 0, 0}, 8, 8, 8, 8, 0, 0, 1};
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    uint64_t bus_errors = 0, read_beats = 0, write_beats = 0;
    bool prev_irq = false;
    uint32_t evaluated_rid = 0;          // m_axi_rid in the last evaluation
    // slave outputs decided for the coming cycle
    bool ready[NCHAN] = {};
    int r_sel = -1;                      // the read burst whose beat is shown on R (kept until taken)
#if VTA_PROFILE
    std::vector<ProfileEvent> events;
    uint64_t events_dropped = 0;
    uint32_t track_state[NTRACK] = {}, track_value[NTRACK] = {};

    void note(int track, uint32_t state, uint32_t value) {
        if (state == track_state[track] && value == track_value[track]) return;
        track_state[track] = state;
        track_value[track] = value;
        if (events.size() < PROFILE_MAX_EVENTS) events.push_back({cycle, value, (uint16_t)track, (uint16_t)state});
        else events_dropped++;
    }
    // The state during this cycle (after the combinational settle, before the rising edge).
    void sample() {
        const Vtop___024root* r = top->rootp;
        note(T_RUN, r->vta_core__DOT__rd_control & 1, 0);
        note(T_FETCH, r->vta_core__DOT__rd_state_fetch & 3, r->vta_core__DOT__rd_insn_dispatched);
        note(T_LOAD, r->vta_core__DOT__rd_state_load & 3, r->vta_core__DOT__rd_retired_load);
        note(T_COMPUTE, r->vta_core__DOT__rd_state_compute & 3, r->vta_core__DOT__rd_retired_compute);
        note(T_STORE, r->vta_core__DOT__rd_state_store & 3, r->vta_core__DOT__rd_retired_store);
        note(T_GEMM, r->vta_core__DOT__gemm_active, 0);
        note(T_ALU, r->vta_core__DOT__alu_active, 0);
    }
#endif

    uint64_t next() {
        rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
        return rng;
    }
    bool stall(Chan c) { return bus.stall_percent[c] && next() % 100 < bus.stall_percent[c]; }
    uint64_t latency(uint32_t lo, uint32_t hi) { return hi > lo ? lo + next() % (hi - lo + 1) : lo; }
    bool beat_ok(uint64_t a) const {
        // legal if any byte of [a, a+BEAT) lies inside an allocation
        if (a >= mem_bytes || a + BEAT > mem_bytes) return false;
        auto it = std::upper_bound(starts.begin(), starts.end(), a + BEAT - 1);
        if (it == starts.begin()) return false;
        size_t k = (it - starts.begin()) - 1;
        return ends[k] > a;
    }
    // A read burst that may show a beat now: the oldest of its ID (AXI keeps one ID's data in
    // order); with reorder, any such burst, else only the oldest of all.
    std::vector<int> ok;                 // pick_read's candidates (a member: no allocation per cycle)
    int pick_read() {
        ok.clear();
        uint64_t seen = 0;
        for (size_t i = 0; i < rq.size(); i++) {
            uint64_t bit = 1ull << (rq[i].id & 63);
            if (seen & bit) continue;
            seen |= bit;
            if (rq[i].ready_at <= cycle) ok.push_back((int)i);
            if (!bus.reorder) break;
        }
        if (ok.empty()) return -1;
        return ok[next() % ok.size()];
    }
    void write_beat(Burst& b, const uint8_t* data, uint64_t strb) {
        write_beats++;
        uint64_t a = b.addr + (uint64_t)b.done * BEAT;
        if (beat_ok(a)) {
            for (int i = 0; i < BEAT; i++)
                if (strb >> i & 1) mem[a + i] = data[i];
        } else if (strb) {
            b.error = true;
            bus_errors++;
        }
        if (++b.done == b.beats) {
            b.ready_at = cycle + latency(bus.write_latency_min, bus.write_latency_max);
            bq.push_back(b);
            wq.pop_front();
        }
    }
};

void eval_half(Sim* s, int clk) {
    s->top->clk = clk;
    s->top->eval();
#if VM_TRACE_FST
    if (s->tfp) s->tfp->dump(s->time);
#endif
    s->time++;
}

// One evaluation a cycle instead of two. Verilator sees a rising clock edge as clk differing from the
// value it remembers from its last evaluation (a __Vtrigprevexpr___TOP__clk__N member of the root, one
// per scheduling region that watches clk). Setting those to 0 and evaluating once with clk = 1 is the
// falling-edge evaluation and the rising one in one: nothing in the core is combinational in clk, so the
// falling-edge evaluation only settled the inputs, and the rising one settles them first anyway. That
// needs the master port's outputs to be settled before the inputs of this cycle are: true of every
// output but RREADY, which is the ready of the read client RID names; so a cycle whose R beat has
// another RID than the last evaluation saw still settles first (see cycle()). The members are found at
// compile time; a Verilator that names them otherwise gets two evaluations a cycle, as before.
template <typename T, typename = void> struct HasClkPrev0 : std::false_type {};
template <typename T> struct HasClkPrev0<T, std::void_t<decltype(T::__Vtrigprevexpr___TOP__clk__0)>> : std::true_type {};
template <typename T, typename = void> struct HasClkPrev1 : std::false_type {};
template <typename T> struct HasClkPrev1<T, std::void_t<decltype(T::__Vtrigprevexpr___TOP__clk__1)>> : std::true_type {};
template <typename T, typename = void> struct HasClkPrev2 : std::false_type {};
template <typename T> struct HasClkPrev2<T, std::void_t<decltype(T::__Vtrigprevexpr___TOP__clk__2)>> : std::true_type {};
// not with a waveform (it records both halves of the clock) nor in the profile build; TSIM_ONE_EVAL: the
// build found no output but RREADY computed from an input (sim.tsim.input_combinational_outputs)
#ifndef TSIM_ONE_EVAL
#define TSIM_ONE_EVAL 0
#endif
constexpr bool ONE_EVAL = TSIM_ONE_EVAL && !VM_TRACE_FST && !VTA_PROFILE &&
    (HasClkPrev0<Vtop___024root>::value || HasClkPrev1<Vtop___024root>::value || HasClkPrev2<Vtop___024root>::value);

template <typename T> void forget_clock(T* r) {
    if constexpr (HasClkPrev0<T>::value) r->__Vtrigprevexpr___TOP__clk__0 = 0;
    if constexpr (HasClkPrev1<T>::value) r->__Vtrigprevexpr___TOP__clk__1 = 0;
    if constexpr (HasClkPrev2<T>::value) r->__Vtrigprevexpr___TOP__clk__2 = 0;
}

// One clock cycle, with the AXI slave model and the checker on the master port.
void cycle(Sim* s) {
    Vtop* t = s->top;
    t->m_axi_arready = s->ready[AR];
    t->m_axi_awready = s->ready[AW];
    t->m_axi_wready = s->ready[W];
    uint8_t buf[BEAT];
    int rs = s->r_sel;
    bool rv = rs >= 0;
    t->m_axi_rvalid = rv;
    if (rv) {
        Burst& b = s->rq[rs];
        uint64_t a = b.addr + (uint64_t)b.done * BEAT;
        bool ok = s->beat_ok(a);
        if (ok) std::memcpy(buf, s->mem + a, BEAT); else std::memset(buf, 0, BEAT);
        put_data(t->m_axi_rdata, buf);
        t->m_axi_rid = b.id;
        t->m_axi_rlast = (b.done + 1 == b.beats);
        t->m_axi_rresp = ok ? 0 : 2;
    }
    bool bv = s->ready[B] && !s->bq.empty() && s->bq.front().ready_at <= s->cycle;
    t->m_axi_bvalid = bv;
    if (bv) {
        t->m_axi_bid = s->bq.front().id;
        t->m_axi_bresp = s->bq.front().error ? 2 : 0;
    }
    // the outputs are settled unless this is a beat with another RID than the last evaluation saw
    bool settled = ONE_EVAL && t->clk && !(rv && t->m_axi_rid != s->evaluated_rid);
    if (!settled) eval_half(s, 0);
#if VTA_PROFILE
    s->sample();
#endif
    // sample (inputs and combinational outputs are settled)
    bool ar_fire = t->m_axi_arvalid && t->m_axi_arready, aw_fire = t->m_axi_awvalid && t->m_axi_awready;
    bool w_fire = t->m_axi_wvalid && t->m_axi_wready;
    bool r_fire = rv && t->m_axi_rready, b_fire = bv && t->m_axi_bready;
    AxiSample x;                         // filled (up to BEAT bytes of wdata) on every cycle with a handshake
    if (!t->rst && !t->m_axi_arvalid && !t->m_axi_awvalid && !t->m_axi_wvalid && !r_fire && !b_fire &&
        s->chk->settled()) {
        s->chk->tick();                  // nothing on the bus to check or to track
    } else {
        x.rst = t->rst;
        x.arvalid = t->m_axi_arvalid; x.arready = t->m_axi_arready;
        x.arid = t->m_axi_arid; x.araddr = t->m_axi_araddr; x.arlen = t->m_axi_arlen; x.arsize = t->m_axi_arsize;
        x.arburst = t->m_axi_arburst; x.arlock = t->m_axi_arlock;
        x.awvalid = t->m_axi_awvalid; x.awready = t->m_axi_awready;
        x.awid = t->m_axi_awid; x.awaddr = t->m_axi_awaddr; x.awlen = t->m_axi_awlen; x.awsize = t->m_axi_awsize;
        x.awburst = t->m_axi_awburst; x.awlock = t->m_axi_awlock;
        x.wvalid = t->m_axi_wvalid; x.wready = t->m_axi_wready; x.wlast = t->m_axi_wlast;
        x.wstrb = (uint64_t)t->m_axi_wstrb;
        get_data(t->m_axi_wdata, x.wdata);
        x.rvalid = rv; x.rready = t->m_axi_rready; x.rlast = t->m_axi_rlast; x.rid = t->m_axi_rid;
        x.bvalid = bv; x.bready = t->m_axi_bready; x.bid = t->m_axi_bid;
        s->chk->check(x);
    }
    if (settled) forget_clock(t->rootp);
    eval_half(s, 1);
    s->evaluated_rid = t->m_axi_rid;
    if (t->rst) {
        s->rq.clear(); s->wq.clear(); s->bq.clear(); s->early.clear();
        s->r_sel = -1;
    } else {
        if (ar_fire)
            s->rq.push_back(Burst{x.arid, x.araddr, x.arlen + 1u, 0,
                                  s->cycle + s->latency(s->bus.read_latency_min, s->bus.read_latency_max), false});
        if (aw_fire) s->wq.push_back(Burst{x.awid, x.awaddr, x.awlen + 1u, 0, 0, false});
        if (r_fire) {
            s->read_beats++;
            Burst& b = s->rq[rs];
            if (!s->beat_ok(b.addr + (uint64_t)b.done * BEAT)) s->bus_errors++;
            if (++b.done == b.beats) s->rq.erase(s->rq.begin() + rs);
        }
        if (w_fire) {
            WBeat wb;
            std::memcpy(wb.data, x.wdata, BEAT);
            wb.strb = x.wstrb;
            s->early.push_back(wb);
        }
        while (!s->wq.empty() && !s->early.empty()) {   // W beats meet their AW in order
            s->write_beat(s->wq.front(), s->early.front().data, s->early.front().strb);
            s->early.pop_front();
        }
        if (b_fire) s->bq.pop_front();
    }
    s->cycle++;
    // the slave's outputs for the next cycle; a beat shown on R stays until it is taken
    s->ready[AR] = !s->stall(AR);
    s->ready[AW] = !s->stall(AW);
    s->ready[W] = (!s->wq.empty() || s->early.size() < s->bus.early_w_beats) && !s->stall(W);
    if (rv && !r_fire) s->r_sel = rs;
    else s->r_sel = s->stall(R) ? -1 : s->pick_read();
    s->ready[B] = (bv && !b_fire) || !s->stall(B);
    bool irq = t->irq;
    if (irq && !s->prev_irq) s->chk->finished();
    s->prev_irq = irq;
}

void lite_idle(Vtop* t) {
    t->s_axi_awvalid = 0;
    t->s_axi_wvalid = 0;
    t->s_axi_bready = 0;
    t->s_axi_arvalid = 0;
    t->s_axi_rready = 0;
}
#endif  // CHECKER_ONLY

}  // namespace

extern "C" {

// ---- the checker on its own, for tests that feed it cycles by hand
void* axi_checker_create(uint32_t beat_bytes, uint32_t max_beats, uint64_t read_ids, int write_id) {
    return new AxiChecker(beat_bytes, max_beats, read_ids, write_id);
}
void axi_checker_destroy(void* c) { delete (AxiChecker*)c; }
void axi_checker_step(void* c, const AxiSample* s) { ((AxiChecker*)c)->check(*s); }
void axi_checker_finished(void* c) { ((AxiChecker*)c)->finished(); }
uint64_t axi_checker_count(void* c) { return ((AxiChecker*)c)->count(); }
// Message k (0-based, the first 32 are kept) into buf; returns its length, or -1 if there is none.
int axi_checker_message(void* c, int k, char* buf, int n) {
    const auto& m = ((AxiChecker*)c)->messages();
    if (k < 0 || k >= (int)m.size()) return -1;
    std::snprintf(buf, n, "%s", m[k].c_str());
    return (int)m[k].size();
}
int axi_sample_size() { return (int)sizeof(AxiSample); }

#ifndef CHECKER_ONLY
void* tsim_create(const char* trace_path, uint32_t max_beats, uint64_t read_ids, int write_id) {
    Sim* s = new Sim;
    s->ctx = new VerilatedContext;
    s->top = new Vtop{s->ctx};
    s->chk = new AxiChecker(BEAT, max_beats, read_ids, write_id);
#if VM_TRACE_FST
    if (trace_path && trace_path[0]) {
        s->ctx->traceEverOn(true);
        s->tfp = new VerilatedFstC;
        s->top->trace(s->tfp, 99);
        s->tfp->open(trace_path);
    }
#else
    (void)trace_path;
#endif
    lite_idle(s->top);
    return s;
}

void tsim_destroy(void* p) {
    Sim* s = (Sim*)p;
#if VM_TRACE_FST
    if (s->tfp) { s->tfp->close(); delete s->tfp; }
#endif
    s->top->final();
    delete s->top;
    delete s->ctx;
    delete s->chk;
    delete s;
}

int tsim_trace_enabled() {
#if VM_TRACE_FST
    return 1;
#else
    return 0;
#endif
}

void tsim_flush_trace(void* p) {
#if VM_TRACE_FST
    Sim* s = (Sim*)p;
    if (s->tfp) s->tfp->flush();
#else
    (void)p;
#endif
}

void tsim_set_memory(void* p, uint8_t* mem, uint64_t nbytes) {
    Sim* s = (Sim*)p;
    s->mem = mem;
    s->mem_bytes = nbytes;
}

void tsim_set_allocations(void* p, const uint64_t* starts, const uint64_t* sizes, int n) {
    Sim* s = (Sim*)p;
    s->starts.assign(starts, starts + n);
    s->ends.resize(n);
    for (int i = 0; i < n; i++) s->ends[i] = starts[i] + sizes[i];
}

int tsim_bus_params_size() { return (int)sizeof(BusParams); }

void tsim_set_bus(void* p, const BusParams* b) {
    Sim* s = (Sim*)p;
    s->bus = *b;
    s->rng = b->seed ? b->seed : 0x9E3779B97F4A7C15ull;
}

// Hold rst for n cycles; the bus model forgets everything in flight.
void tsim_reset(void* p, int n) {
    Sim* s = (Sim*)p;
    lite_idle(s->top);
    s->top->rst = 1;
    for (int i = 0; i < n; i++) cycle(s);
    s->top->rst = 0;
    cycle(s);
}

// AXI4-Lite write; returns 0, -1 if no response came within max_cycles, -2 on a bus violation.
int tsim_write_reg(void* p, uint32_t addr, uint32_t data, uint64_t max_cycles) {
    Sim* s = (Sim*)p;
    Vtop* t = s->top;
    t->s_axi_awaddr = addr;
    t->s_axi_awprot = 0;
    t->s_axi_wdata = data;
    t->s_axi_wstrb = 0xF;
    t->s_axi_awvalid = 1;
    t->s_axi_wvalid = 1;
    t->s_axi_bready = 1;
    bool aw = false, w = false;
    for (uint64_t i = 0; i < max_cycles; i++) {
        t->clk = 0;
        t->eval();
        bool aw_fire = t->s_axi_awvalid && t->s_axi_awready;
        bool w_fire = t->s_axi_wvalid && t->s_axi_wready;
        bool b_fire = t->s_axi_bvalid && t->s_axi_bready;
        cycle(s);
        if (s->chk->count()) { lite_idle(t); return -2; }
        if (aw_fire) { aw = true; t->s_axi_awvalid = 0; }
        if (w_fire) { w = true; t->s_axi_wvalid = 0; }
        if (b_fire && aw && w) { lite_idle(t); return 0; }
    }
    lite_idle(t);
    return -1;
}

// AXI4-Lite read; returns 0, -1 on timeout, -2 on a bus violation.
int tsim_read_reg(void* p, uint32_t addr, uint32_t* data, uint64_t max_cycles) {
    Sim* s = (Sim*)p;
    Vtop* t = s->top;
    t->s_axi_araddr = addr;
    t->s_axi_arprot = 0;
    t->s_axi_arvalid = 1;
    t->s_axi_rready = 1;
    for (uint64_t i = 0; i < max_cycles; i++) {
        t->clk = 0;
        t->eval();
        bool ar_fire = t->s_axi_arvalid && t->s_axi_arready;
        bool r_fire = t->s_axi_rvalid && t->s_axi_rready && !t->s_axi_arvalid;
        uint32_t v = t->s_axi_rdata;
        cycle(s);
        if (s->chk->count()) { lite_idle(t); return -2; }
        if (ar_fire) t->s_axi_arvalid = 0;
        if (r_fire) { *data = v; lite_idle(t); return 0; }
    }
    lite_idle(t);
    return -1;
}

// Clock until irq is high, a bus violation is seen, or max_cycles have passed; returns the cycles run.
uint64_t tsim_run(void* p, uint64_t max_cycles) {
    Sim* s = (Sim*)p;
    uint64_t i = 0;
    for (; i < max_cycles; i++) {
        if (s->top->irq || s->chk->count()) break;
        cycle(s);
    }
    return i;
}

int tsim_profile_enabled() { return VTA_PROFILE; }

// Move up to `max` recorded profile events (oldest first) into `out`; returns how many. `dropped` gets the
// number of events lost because nobody drained them (0 unless over PROFILE_MAX_EVENTS were pending).
uint64_t tsim_profile_drain(void* p, void* out, uint64_t max, uint64_t* dropped) {
#if VTA_PROFILE
    Sim* s = (Sim*)p;
    uint64_t n = std::min<uint64_t>(max, s->events.size());
    std::memcpy(out, s->events.data(), n * sizeof(ProfileEvent));
    s->events.erase(s->events.begin(), s->events.begin() + n);
    *dropped = s->events_dropped;
    return n;
#else
    (void)p; (void)out; (void)max;
    *dropped = 0;
    return 0;
#endif
}
int tsim_profile_event_size() { return (int)sizeof(ProfileEvent); }

int tsim_irq(void* p) { return ((Sim*)p)->top->irq; }
uint64_t tsim_cycle(void* p) { return ((Sim*)p)->cycle; }
uint64_t tsim_bus_errors(void* p) { return ((Sim*)p)->bus_errors; }
uint64_t tsim_read_beats(void* p) { return ((Sim*)p)->read_beats; }
uint64_t tsim_write_beats(void* p) { return ((Sim*)p)->write_beats; }
uint64_t tsim_bus_pending(void* p) {
    Sim* s = (Sim*)p;
    return s->rq.size() + s->wq.size() + s->bq.size() + s->early.size();
}
uint64_t tsim_violation_count(void* p) { return ((Sim*)p)->chk->count(); }
int tsim_violation_message(void* p, int k, char* buf, int n) { return axi_checker_message(((Sim*)p)->chk, k, buf, n); }
#endif  // CHECKER_ONLY

}  // extern "C"
