// tsim harness: drives the Verilated VTA core (top module vta_core, C++ class Vtop).
//
// * An AXI4 slave model serves the core's AXI master straight from the simulated DRAM arena
//   that the Python runtime uses (a numpy uint8 array indexed by physical address).
//   A beat that lies wholly outside every allocation gets SLVERR (writes to it are dropped):
//   the core then reports DRAM_ACCESS. Read and write latency and random back-pressure on every
//   channel are configurable.
// * AXI4-Lite register reads and writes are driven cycle by cycle.
// * tsim_run() clocks the core until its irq output rises or a cycle bound is reached; no Python
//   runs per cycle.
// Loaded by sim/tsim.py with ctypes.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <vector>

#include "Vtop.h"
#include "verilated.h"
#if VM_TRACE_FST
#include "verilated_fst_c.h"
#endif

double sc_time_stamp() { return 0; }

namespace {

constexpr int BEAT = AXI_BEAT_BYTES;  // defined on the compiler command line

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
    uint64_t ready_at;
};

struct BResp {
    uint32_t id;
    uint32_t resp;
    uint64_t ready_at;
};

struct Sim {
    VerilatedContext* ctx = nullptr;
    Vtop* top = nullptr;
#if VM_TRACE_FST
    VerilatedFstC* tfp = nullptr;
#endif
    uint64_t time = 0;
    uint64_t cycle = 0;
    uint8_t* mem = nullptr;
    uint64_t mem_bytes = 0;
    std::vector<uint64_t> starts, ends;  // allocations, sorted, [start, end)
    std::deque<Burst> rq, wq;
    std::deque<BResp> bq;
    uint32_t read_latency = 4, write_latency = 4, stall_percent = 0;
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    uint64_t bus_errors = 0, read_beats = 0, write_beats = 0;
    // registered slave outputs for the coming edge
    bool arready = false, awready = false, wready = false, rvalid = false, bvalid = false;

    bool stall() {
        if (!stall_percent) return false;
        rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
        return (rng % 100) < stall_percent;
    }
    bool beat_ok(uint64_t a) const {
        // legal if any byte of [a, a+BEAT) lies inside an allocation
        if (a >= mem_bytes || a + BEAT > mem_bytes) return false;
        auto it = std::upper_bound(starts.begin(), starts.end(), a + BEAT - 1);
        if (it == starts.begin()) return false;
        size_t k = (it - starts.begin()) - 1;
        return ends[k] > a;
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

// One clock cycle, with the AXI slave model on the master port.
void cycle(Sim* s) {
    Vtop* t = s->top;
    // drive slave outputs decided for this cycle
    t->m_axi_arready = s->arready;
    t->m_axi_awready = s->awready;
    t->m_axi_wready = s->wready && !s->wq.empty();
    uint8_t buf[BEAT];
    bool rv = s->rvalid && !s->rq.empty() && s->rq.front().ready_at <= s->cycle;
    t->m_axi_rvalid = rv;
    if (rv) {
        Burst& b = s->rq.front();
        uint64_t a = b.addr + (uint64_t)b.done * BEAT;
        bool ok = s->beat_ok(a);
        if (ok) std::memcpy(buf, s->mem + a, BEAT); else std::memset(buf, 0, BEAT);
        put_data(t->m_axi_rdata, buf);
        t->m_axi_rid = b.id;
        t->m_axi_rlast = (b.done + 1 == b.beats);
        t->m_axi_rresp = ok ? 0 : 2;
    }
    bool bv = s->bvalid && !s->bq.empty() && s->bq.front().ready_at <= s->cycle;
    t->m_axi_bvalid = bv;
    if (bv) {
        t->m_axi_bid = s->bq.front().id;
        t->m_axi_bresp = s->bq.front().resp;
    }
    eval_half(s, 0);
    // sample handshakes (inputs and combinational outputs are settled)
    bool ar_fire = t->m_axi_arvalid && t->m_axi_arready;
    bool aw_fire = t->m_axi_awvalid && t->m_axi_awready;
    bool w_fire = t->m_axi_wvalid && t->m_axi_wready;
    bool r_fire = rv && t->m_axi_rready;
    bool b_fire = bv && t->m_axi_bready;
    Burst ar{}, aw{};
    if (ar_fire) ar = Burst{(uint32_t)t->m_axi_arid, (uint64_t)t->m_axi_araddr, (uint32_t)t->m_axi_arlen + 1u, 0,
                            s->cycle + s->read_latency};
    if (aw_fire) aw = Burst{(uint32_t)t->m_axi_awid, (uint64_t)t->m_axi_awaddr, (uint32_t)t->m_axi_awlen + 1u, 0, 0};
    uint8_t wbuf[BEAT];
    uint64_t wstrb = 0;
    bool wlast = false;
    if (w_fire) {
        get_data(t->m_axi_wdata, wbuf);
        wstrb = (uint64_t)t->m_axi_wstrb;
        wlast = t->m_axi_wlast;
    }
    eval_half(s, 1);
    // update the model
    if (ar_fire) s->rq.push_back(ar);
    if (aw_fire) s->wq.push_back(aw);
    if (r_fire) {
        s->read_beats++;
        Burst& b = s->rq.front();
        uint64_t a = b.addr + (uint64_t)b.done * BEAT;
        if (!s->beat_ok(a)) s->bus_errors++;
        if (++b.done == b.beats) s->rq.pop_front();
    }
    if (w_fire) {
        s->write_beats++;
        Burst& b = s->wq.front();
        uint64_t a = b.addr + (uint64_t)b.done * BEAT;
        if (s->beat_ok(a)) {
            for (int i = 0; i < BEAT; i++)
                if (wstrb >> i & 1) s->mem[a + i] = wbuf[i];
        } else if (wstrb) {
            b.ready_at = 1;  // remember the error for the response
            s->bus_errors++;
        }
        if (++b.done == b.beats) {
            (void)wlast;
            s->bq.push_back(BResp{b.id, b.ready_at ? 2u : 0u, s->cycle + s->write_latency});
            s->wq.pop_front();
        }
    }
    if (b_fire) s->bq.pop_front();
    // decide the slave outputs of the next cycle (a VALID, once raised, stays until its handshake)
    s->arready = !s->stall();
    s->awready = !s->stall();
    s->wready = !s->stall();
    s->rvalid = (rv && !r_fire) || !s->stall();
    s->bvalid = (bv && !b_fire) || !s->stall();
    s->cycle++;
}

void lite_idle(Vtop* t) {
    t->s_axi_awvalid = 0;
    t->s_axi_wvalid = 0;
    t->s_axi_bready = 0;
    t->s_axi_arvalid = 0;
    t->s_axi_rready = 0;
}

}  // namespace

extern "C" {

void* tsim_create(const char* trace_path) {
    Sim* s = new Sim;
    s->ctx = new VerilatedContext;
    s->top = new Vtop{s->ctx};
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

void tsim_set_bus(void* p, uint32_t read_latency, uint32_t write_latency, uint32_t stall_percent, uint64_t seed) {
    Sim* s = (Sim*)p;
    s->read_latency = read_latency;
    s->write_latency = write_latency;
    s->stall_percent = stall_percent;
    s->rng = seed ? seed : 0x9E3779B97F4A7C15ull;
}

// Hold rst for n cycles; the bus model forgets everything in flight.
void tsim_reset(void* p, int n) {
    Sim* s = (Sim*)p;
    s->rq.clear();
    s->wq.clear();
    s->bq.clear();
    lite_idle(s->top);
    s->top->rst = 1;
    for (int i = 0; i < n; i++) cycle(s);
    s->top->rst = 0;
    cycle(s);
}

// AXI4-Lite write; returns 0, or -1 if no response came within max_cycles.
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
        if (aw_fire) { aw = true; t->s_axi_awvalid = 0; }
        if (w_fire) { w = true; t->s_axi_wvalid = 0; }
        if (b_fire && aw && w) { lite_idle(t); return 0; }
    }
    lite_idle(t);
    return -1;
}

// AXI4-Lite read; returns 0, or -1 on timeout.
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
        if (ar_fire) t->s_axi_arvalid = 0;
        if (r_fire) { *data = v; lite_idle(t); return 0; }
    }
    lite_idle(t);
    return -1;
}

// Clock until irq is high (returns the cycles run) or max_cycles have passed.
uint64_t tsim_run(void* p, uint64_t max_cycles) {
    Sim* s = (Sim*)p;
    uint64_t i = 0;
    for (; i < max_cycles; i++) {
        if (s->top->irq) break;
        cycle(s);
    }
    return i;
}

int tsim_irq(void* p) { return ((Sim*)p)->top->irq; }
uint64_t tsim_cycle(void* p) { return ((Sim*)p)->cycle; }
uint64_t tsim_bus_errors(void* p) { return ((Sim*)p)->bus_errors; }
uint64_t tsim_read_beats(void* p) { return ((Sim*)p)->read_beats; }
uint64_t tsim_write_beats(void* p) { return ((Sim*)p)->write_beats; }
uint64_t tsim_bus_pending(void* p) {
    Sim* s = (Sim*)p;
    return s->rq.size() + s->wq.size() + s->bq.size();
}

}  // extern "C"
