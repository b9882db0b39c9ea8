// The execution engine of fsim (sim/fsim.py): decodes, checks and runs a VTA instruction stream.
//
// Built on first use by sim/fsim_native.py and called through ctypes. It holds no ISA tables of
// its own: field positions, buffer geometry and the token-queue table come from vta_hw.spec at
// fsim_create (Params below), and the opcode / memory type / ALU opcode numbers are -D defines
// made from vta_hw.spec's enums. The SRAMs, the simulated DRAM and the counters are numpy arrays
// owned by FsimDevice; the engine only gets their addresses (fsim_bind).
//
// Semantics are those of the README ("Semantics") and of the hardware:
//  * LOAD and STORE are 2-D DMAs, loads zero-pad; the OUT SRAM is written only by GEMM and ALU.
//  * GEMM adds inp[src] x wgt[wgt]^T into acc[dst] (32-bit wrap-around), then OUT = low 8 bits of
//    every accumulator it wrote. The sum does not depend on the order of the additions, so the
//    uops run in any order that is convenient (the hardware's is outer loop, inner loop, uop).
//  * ALU runs uop by uop in program order (a uop may read what an earlier one wrote); a run of
//    epilogue ALU instructions over the same rows may run fused, row by row, where that gives the
//    same result (fused_alu).
//  * A reset GEMM zeroes the accumulators and leaves OUT alone.
//  * The opt-in ISA extensions (vta_hw.spec.EXTENSIONS), when the config enables them: ALU MUL (an
//    exact int16 x int16 product, AluMul) and ACC_8BIT loads (int8 sign-extended into ACC, load_acc8).
//    Otherwise the checks refuse them like any illegal opcode or memory type.
// Extra memory is a few arrays of the SRAM depths: nothing grows with the loop counts. Long
// instructions look at the clock every few thousand uops so a run's timeout holds inside them.
//
// Errors are returned as status codes with a report; Python words the messages (vta_runtime.diagnose),
// so fsim, tsim and the boards say the same thing about the same bad program.
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <deque>
#include <new>
#include <type_traits>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#ifndef OP_LOAD
#error "compile with the -D enum values from vta_hw.spec (sim/fsim_native.py does this)"
#endif

namespace {

// ---------------------------------------------------------------- parameters from vta_hw.spec
// The fields the engine reads, in the order sim/fsim_native.py passes their positions.
enum FieldId {
  F_OPCODE, F_POP_PREV, F_POP_NEXT, F_PUSH_PREV, F_PUSH_NEXT,
  // memory format
  F_MEMORY_TYPE, F_SRAM_BASE, F_DRAM_BASE, F_Y_SIZE, F_X_SIZE, F_X_STRIDE, F_Y_PAD_0, F_Y_PAD_1, F_X_PAD_0,
  F_X_PAD_1,
  // GEMM format
  F_RESET, F_UOP_BGN, F_UOP_END, F_ITER_OUT, F_ITER_IN, F_DST_FACTOR_OUT, F_DST_FACTOR_IN, F_SRC_FACTOR_OUT,
  F_SRC_FACTOR_IN, F_WGT_FACTOR_OUT, F_WGT_FACTOR_IN,
  // ALU format (its loop fields may be narrower than the GEMM ones)
  F_ALU_UOP_BGN, F_ALU_UOP_END, F_ALU_ITER_OUT, F_ALU_ITER_IN, F_ALU_DST_FACTOR_OUT, F_ALU_DST_FACTOR_IN,
  F_ALU_SRC_FACTOR_OUT, F_ALU_SRC_FACTOR_IN, F_ALU_OPCODE, F_USE_IMM, F_IMM,
  // uop format (bit positions inside the 32-bit uop)
  F_UOP_DST, F_UOP_SRC, F_UOP_WGT,
  NUM_FIELDS
};

struct Field {
  int word, shift, width, is_signed;
  uint64_t mask() const { return width >= 64 ? ~0ull : (1ull << width) - 1; }
};

// Counter slots; Python passes the index of each in vta_hw.spec.DEVICE_COUNTERS.
enum CounterId { C_INP, C_WGT, C_ACC, C_UOP, C_OUT, C_GEMM, C_ALU, NUM_COUNTERS };

constexpr int kStages = 3;   // LOAD, COMPUTE, STORE (vta_hw.spec.Stage minus 1)
constexpr int kQueues = 4;   // vta_hw.spec.TOKEN_QUEUES
constexpr int kFlags = 4;    // pop_prev, pop_next, push_prev, push_next

struct Params {
  Field field[NUM_FIELDS];
  int64_t batch, block_in, block_out;
  int64_t inp_depth, wgt_depth, acc_depth, uop_depth;
  int64_t elem_bytes[5];                 // by memory type UOP, WGT, INP, ACC, OUT
  int64_t shift_bits;                    // SHR reads the low shift_bits of its operand, signed
  int64_t counter_slot[NUM_COUNTERS];
  int64_t queue_of[kStages][kFlags];     // token queue a flag pops/pushes on that stage, -1: illegal
  // ISA extensions: enabled (0/1), and the DRAM element of an ACC_8BIT load (BATCH * BLOCK_OUT bytes)
  int64_t alu_mul, acc_8bit, acc8_elem_bytes;
};

// ---------------------------------------------------------------- status codes and the report
// (mirrored in sim/fsim_native.py)
// Whether [phys, phys + nbytes) lies inside the allocation containing phys (the last one starting at or
// before it); starts sorted, as PageAllocator.allocation_table() gives them.
bool inside_allocation(int64_t phys, int64_t nbytes, const int64_t* starts, const int64_t* sizes, int64_t nalloc) {
  const int64_t k = std::upper_bound(starts, starts + nalloc, phys) - starts - 1;
  return k >= 0 && phys + nbytes <= starts[k] + sizes[k];
}

enum Status { ST_OK = 0, ST_DEADLOCK = 1, ST_TIMEOUT = 2, ST_SRAM_INDEX = 3, ST_INTERNAL = 4 };
enum SramWhat { GEMM_DST = 0, GEMM_SRC = 1, GEMM_WGT = 2, ALU_DST = 3, ALU_SRC = 4 };
// report[]: 0 instruction index, 1 what (SramWhat), 2 value (the index that overflows),
// 3..5 next unexecuted instruction of each stage (n when none), 6..9 tokens per queue.
constexpr int kReportLen = 10;

using Clock = std::chrono::steady_clock;
// Uop iterations between two looks at the clock (a few tens of microseconds of work).
constexpr int64_t kClockEvery = 1 << 13;
constexpr int64_t kFoldUops = 1 << 14;   // at most this many uops after fold_accumulating_loop
// Accumulator rows the AVX2 GEMM kernel keeps in registers at once (at most 4: the rest of a chunk
// takes one block of 1-3 rows).
constexpr int kBlockRows = 4;
constexpr int64_t kChunkRows = 64;   // rows of a GEMM group between looks at the clock (a multiple of kBlockRows)

// 64-byte aligned storage for the tables the AVX2 kernel reads 32 bytes at a time: from the 16
// bytes std::vector promises, every other such load would straddle two cache lines (measured 6-16%
// slower on whole layers).
template <typename T>
struct LineAligned {
  using value_type = T;
  static constexpr std::align_val_t kLine{64};
  LineAligned() = default;
  template <typename U>
  LineAligned(const LineAligned<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kLine)); }
  void deallocate(T* ptr, size_t) { ::operator delete(ptr, kLine); }
  template <typename U>
  bool operator==(const LineAligned<U>&) const { return true; }
  template <typename U>
  bool operator!=(const LineAligned<U>&) const { return false; }
};

struct Timeout {};     // thrown inside a long instruction, caught by the run loop
struct Internal {};    // an access the checks should have refused: never corrupt memory

struct Engine {
  Params p;
  int8_t* inp = nullptr;
  int8_t* wgt = nullptr;
  int32_t* acc = nullptr;
  int8_t* out = nullptr;
  uint32_t* uop = nullptr;
  uint8_t* dram = nullptr;
  uint64_t dram_bytes = 0;
  int64_t* counters = nullptr;
  bool generic_gemm = false;            // use the plain loop even where the AVX2 kernel applies
  bool fuse = true;                     // fuse epilogue ALU instructions (fused_alu)
  int64_t fused_groups = 0;             // how many groups ran fused (for tests)

  // deadline of the current run
  bool has_deadline = false;
  Clock::time_point deadline;
  int64_t until_clock = kClockEvery;

  // scratch, sized by the SRAM depths once
  std::vector<uint32_t> u_dst, u_src, u_wgt;   // decoded uops of one instruction
  std::vector<const int16_t*> tiles;           // their rearranged weight tiles, in group order (AVX2 kernel)
  std::vector<int64_t> src_off;                // their INP offsets (elements), in group order
  std::vector<uint32_t> order, group_end;      // uops grouped by destination row (group_by_dst)
  std::vector<int16_t, LineAligned<int16_t>> wgt_pairs;   // weight tiles rearranged for the AVX2 kernel
  std::vector<int16_t, LineAligned<int16_t>> inp16;       // INP widened to 16 bits (AVX2 kernels): kept
                                                          // current by INP loads and at the start of a run
  std::vector<uint32_t> wgt_pairs_stamp;
  uint32_t pairs_stamp = 0;
  std::vector<int16_t, LineAligned<int16_t>> wgt_diag;   // a tile's diagonal, widened (made with its pairs)
  std::vector<uint8_t> wgt_is_diag;                      // 1: nothing off the diagonal (depthwise tiles)
  std::vector<const int16_t*> diags;                     // their diagonals, in group order
  bool all_diag = false;                                 // every tile set_tiles set is diagonal
  std::vector<std::pair<uint64_t, int32_t>> fused_steps;   // (opcode, immediate) after the first (fused_alu)
  int active_pairs[8] = {0};                   // input pairs a GEMM's rows are not all zero in (AVX2 kernel)
  int num_active = 8;

  int64_t acc_lanes() const { return p.batch * p.block_out; }
  int64_t inp_lanes() const { return p.batch * p.block_in; }
  int64_t wgt_lanes() const { return p.block_out * p.block_in; }

  uint64_t get(const uint64_t* w, FieldId id) const {
    const Field& f = p.field[id];
    return (w[f.word] >> f.shift) & f.mask();
  }
  int64_t get_signed(const uint64_t* w, FieldId id) const {
    const Field& f = p.field[id];
    uint64_t v = get(w, id);
    if (f.is_signed && (v >> (f.width - 1)) & 1) return static_cast<int64_t>(v) - (int64_t{1} << f.width);
    return static_cast<int64_t>(v);
  }
  uint32_t uop_field(uint32_t u, FieldId id) const {
    const Field& f = p.field[id];
    return static_cast<uint32_t>((u >> f.shift) & f.mask());
  }

  // Stage (0 LOAD, 1 COMPUTE, 2 STORE) of an instruction, -1 if no module runs it.
  int stage_of(const uint64_t* w) const {
    uint64_t op = get(w, F_OPCODE);
    if (op == OP_GEMM || op == OP_ALU || op == OP_FINISH) return 1;
    if (op == OP_STORE) return 2;
    if (op == OP_LOAD) {
      uint64_t mt = get(w, F_MEMORY_TYPE);
      if (mt == MEM_INP || mt == MEM_WGT) return 0;
      if (mt == MEM_UOP || mt == MEM_ACC || (mt == MEM_ACC_8BIT && p.acc_8bit)) return 1;
    }
    return -1;
  }

  // DRAM bytes of one element of a memory instruction of type mt (a legal one)
  int64_t elem_bytes_of(uint64_t mt) const { return mt == MEM_ACC_8BIT ? p.acc8_elem_bytes : p.elem_bytes[mt]; }

  // A new generation for a stamp array (cleared when the counter wraps around).
  static void next_stamp(uint32_t& stamp, std::vector<uint32_t>& stamps) {
    if (++stamp == 0) {
      std::fill(stamps.begin(), stamps.end(), 0);
      stamp = 1;
    }
  }

  void count(CounterId c, int64_t v) { counters[p.counter_slot[c]] += v; }

  // Called every uop iteration of a long instruction; looks at the clock now and then.
  void tick(int64_t uops) {
    until_clock -= uops;
    if (until_clock > 0) return;
    until_clock = kClockEvery;
    if (has_deadline && Clock::now() > deadline) throw Timeout{};
  }

  // ------------------------------------------------------------ streams checked before
  // The static checks are a pure function of a stream and the live allocations, and a device runs
  // the same streams again and again (a layer's, once per inference): a stream that passed with
  // the same allocations is not checked again. A few recent ones are kept, 4 MiB at most.
  struct CheckedStream {
    uint64_t hash;
    std::vector<uint64_t> key;   // n, nalloc, the words, the starts, the sizes
  };
  std::deque<CheckedStream> checked;   // most recent last
  size_t checked_words = 0;
  static constexpr size_t kCheckedStreams = 32, kCheckedWords = size_t{1} << 19;

  template <typename F>
  static void for_key(const uint64_t* words, int64_t n, const int64_t* starts, const int64_t* sizes, int64_t nalloc,
                      F f) {
    f(static_cast<uint64_t>(n));
    f(static_cast<uint64_t>(nalloc));
    for (int64_t i = 0; i < 2 * n; ++i) f(words[i]);
    for (int64_t i = 0; i < nalloc; ++i) f(static_cast<uint64_t>(starts[i]));
    for (int64_t i = 0; i < nalloc; ++i) f(static_cast<uint64_t>(sizes[i]));
  }
  static uint64_t key_hash(const uint64_t* words, int64_t n, const int64_t* starts, const int64_t* sizes,
                           int64_t nalloc) {
    uint64_t h = 0x9E3779B97F4A7C15ull;
    for_key(words, n, starts, sizes, nalloc, [&](uint64_t x) { h = (h ^ x) * 0xFF51AFD7ED558CCDull + (h >> 29); });
    return h;
  }
  bool checked_before(uint64_t hash, const uint64_t* words, int64_t n, const int64_t* starts, const int64_t* sizes,
                      int64_t nalloc) const {
    const size_t len = 2 + 2 * n + 2 * nalloc;
    for (const CheckedStream& c : checked) {
      if (c.hash != hash || c.key.size() != len) continue;
      size_t k = 0;
      bool same = true;
      for_key(words, n, starts, sizes, nalloc, [&](uint64_t x) { same = same && c.key[k++] == x; });
      if (same) return true;
    }
    return false;
  }
  void remember_checked(uint64_t hash, const uint64_t* words, int64_t n, const int64_t* starts, const int64_t* sizes,
                        int64_t nalloc) {
    CheckedStream c{hash, {}};
    c.key.reserve(2 + 2 * n + 2 * nalloc);
    for_key(words, n, starts, sizes, nalloc, [&](uint64_t x) { c.key.push_back(x); });
    if (c.key.size() > kCheckedWords) return;
    checked_words += c.key.size();
    checked.push_back(std::move(c));
    while (checked.size() > kCheckedStreams || checked_words > kCheckedWords) {
      checked_words -= checked.front().key.size();
      checked.pop_front();
    }
  }

  // ------------------------------------------------------------ static checks (detection only)
  // True if diagnose.check_instruction would refuse instruction w; allocs are the live
  // allocations (start, size) sorted by start.
  bool bad(const uint64_t* w, const int64_t* starts, const int64_t* sizes, int64_t nalloc) const {
    uint64_t op = get(w, F_OPCODE);
    if (op > OP_ALU) return true;
    uint64_t mt = get(w, F_MEMORY_TYPE);
    int st = stage_of(w);
    if (op == OP_LOAD && st < 0) return true;
    uint64_t x = get(w, F_X_SIZE);
    if (op == OP_STORE && x && mt != MEM_OUT) return true;
    if (op == OP_STORE && mt > MEM_OUT) return true;
    const FieldId flags[kFlags] = {F_POP_PREV, F_POP_NEXT, F_PUSH_PREV, F_PUSH_NEXT};
    for (int f = 0; f < kFlags; ++f)
      if (get(w, flags[f]) && p.queue_of[st][f] < 0) return true;
    if (op == OP_ALU) {
      uint64_t a = get(w, F_ALU_OPCODE);
      const bool base_op = a == ALU_MIN || a == ALU_MAX || a == ALU_ADD || a == ALU_SHR;
      if (!base_op && !(a == ALU_MUL && p.alu_mul)) return true;
    }
    if (op == OP_GEMM && static_cast<int64_t>(get(w, F_UOP_END)) > p.uop_depth) return true;
    if (op == OP_ALU && static_cast<int64_t>(get(w, F_ALU_UOP_END)) > p.uop_depth) return true;
    if ((op == OP_LOAD || op == OP_STORE) && x) {
      uint64_t y = get(w, F_Y_SIZE), rows, cols;
      if (op == OP_STORE) {
        if (get(w, F_Y_PAD_0) || get(w, F_Y_PAD_1) || get(w, F_X_PAD_0) || get(w, F_X_PAD_1)) return true;
        rows = y;
        cols = x;
      } else {
        rows = get(w, F_Y_PAD_0) + y + get(w, F_Y_PAD_1);
        cols = get(w, F_X_PAD_0) + x + get(w, F_X_PAD_1);
      }
      if (static_cast<int64_t>(get(w, F_SRAM_BASE) + rows * cols) > depth_of(mt)) return true;
      if (y) {
        int64_t eb = elem_bytes_of(mt);
        int64_t span = std::max<int64_t>(x, (y - 1) * get(w, F_X_STRIDE) + x) * eb;
        int64_t phys = static_cast<int64_t>(get(w, F_DRAM_BASE)) * eb;
        if (!inside_allocation(phys, span, starts, sizes, nalloc)) return true;
      }
    }
    return false;
  }

  int64_t depth_of(uint64_t mt) const {
    switch (mt) {
      case MEM_UOP: return p.uop_depth;
      case MEM_WGT: return p.wgt_depth;
      case MEM_INP: return p.inp_depth;
      default: return p.acc_depth;   // ACC and OUT
    }
  }

  // ------------------------------------------------------------ LOAD and STORE
  uint8_t* sram_bytes(uint64_t mt) const {
    switch (mt) {
      case MEM_UOP: return reinterpret_cast<uint8_t*>(uop);
      case MEM_WGT: return reinterpret_cast<uint8_t*>(wgt);
      case MEM_INP: return reinterpret_cast<uint8_t*>(inp);
      case MEM_ACC: return reinterpret_cast<uint8_t*>(acc);
      default: return reinterpret_cast<uint8_t*>(out);
    }
  }

  uint8_t* dram_at(uint64_t byte, uint64_t nbytes) const {
    if (byte + nbytes > dram_bytes || byte + nbytes < byte) throw Internal{};
    return dram + byte;
  }

  void load(const uint64_t* w) {
    uint64_t x = get(w, F_X_SIZE), y = get(w, F_Y_SIZE), mt = get(w, F_MEMORY_TYPE);
    if (x == 0) return;   // a NOP
    if (mt == MEM_ACC_8BIT) return load_acc8(w);
    int64_t eb = p.elem_bytes[mt];
    CounterId counter = mt == MEM_UOP ? C_UOP : mt == MEM_WGT ? C_WGT : mt == MEM_INP ? C_INP : C_ACC;
    count(counter, static_cast<int64_t>(x * y) * eb);
    uint64_t xp0 = get(w, F_X_PAD_0), xp1 = get(w, F_X_PAD_1), yp0 = get(w, F_Y_PAD_0), yp1 = get(w, F_Y_PAD_1);
    uint64_t rows = yp0 + y + yp1, cols = xp0 + x + xp1, base = get(w, F_SRAM_BASE);
    if (static_cast<int64_t>(base + rows * cols) > depth_of(mt)) throw Internal{};
    uint8_t* block = sram_bytes(mt) + base * eb;
    if (xp0 || xp1 || yp0 || yp1) std::memset(block, 0, rows * cols * eb);
    if (mt == MEM_WGT)   // the rearranged copies of these tiles are stale now
      std::fill(wgt_pairs_stamp.begin() + base, wgt_pairs_stamp.begin() + base + rows * cols, 0);
    uint64_t start = get(w, F_DRAM_BASE), stride = get(w, F_X_STRIDE);
    for (uint64_t r = 0; r < y; ++r)
      std::memcpy(block + ((yp0 + r) * cols + xp0) * eb, dram_at((start + r * stride) * eb, x * eb), x * eb);
    if (mt == MEM_INP) widen_inp(static_cast<int64_t>(base), static_cast<int64_t>(rows * cols));
  }

  // ACC_8BIT (extension acc_8bit): DRAM elements of acc_lanes int8 values, each sign-extended into its
  // accumulator lane; pads zero the accumulators; OUT is left alone. acc_load_nbytes counts the bytes
  // read from DRAM.
  void load_acc8(const uint64_t* w) {
    uint64_t x = get(w, F_X_SIZE), y = get(w, F_Y_SIZE);
    const int64_t lanes = acc_lanes(), eb = p.acc8_elem_bytes;
    count(C_ACC, static_cast<int64_t>(x * y) * eb);
    uint64_t xp0 = get(w, F_X_PAD_0), xp1 = get(w, F_X_PAD_1), yp0 = get(w, F_Y_PAD_0), yp1 = get(w, F_Y_PAD_1);
    uint64_t rows = yp0 + y + yp1, cols = xp0 + x + xp1, base = get(w, F_SRAM_BASE);
    if (static_cast<int64_t>(base + rows * cols) > p.acc_depth) throw Internal{};
    int32_t* block = acc + base * lanes;
    if (xp0 || xp1 || yp0 || yp1) std::fill_n(block, rows * cols * lanes, 0);
    uint64_t start = get(w, F_DRAM_BASE), stride = get(w, F_X_STRIDE);
    for (uint64_t r = 0; r < y; ++r) {
      const int8_t* from = reinterpret_cast<const int8_t*>(dram_at((start + r * stride) * eb, x * eb));
      int32_t* to = block + ((yp0 + r) * cols + xp0) * lanes;
      for (uint64_t j = 0; j < x * lanes; ++j) to[j] = from[j];
    }
  }

  // inp16 rows [first, first + n) from INP (only the AVX2 kernel reads them).
  void widen_inp(int64_t first, int64_t n) {
#if defined(__AVX2__)
    if (!avx2_shape(p)) return;
    const int64_t lanes = inp_lanes();   // a multiple of 16
    const int8_t* from = inp + first * lanes;
    int16_t* to = inp16.data() + first * lanes;
    for (int64_t j = 0; j < n * lanes; j += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(to + j),
                          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(from + j))));
#else
    (void)first;
    (void)n;
#endif
  }

  void store(const uint64_t* w) {
    uint64_t x = get(w, F_X_SIZE), y = get(w, F_Y_SIZE);
    if (x == 0 || y == 0) return;
    int64_t eb = p.elem_bytes[MEM_OUT];
    count(C_OUT, static_cast<int64_t>(x * y) * eb);
    uint64_t base = get(w, F_SRAM_BASE), start = get(w, F_DRAM_BASE), stride = get(w, F_X_STRIDE);
    if (static_cast<int64_t>(base + x * y) > p.acc_depth) throw Internal{};
    const uint8_t* src = reinterpret_cast<const uint8_t*>(out) + base * eb;
    for (uint64_t r = 0; r < y; ++r)   // rows in order, as the hardware writes them
      std::memcpy(dram_at((start + r * stride) * eb, x * eb), src + r * x * eb, x * eb);
  }

  // ------------------------------------------------------------ GEMM and ALU loops
  struct Loops {
    int64_t nuops, iter_out, iter_in;
    int64_t dst_out, dst_in, src_out, src_in, wgt_out, wgt_in;
    bool empty() const { return nuops <= 0 || iter_out == 0 || iter_in == 0; }
  };

  Loops loops(const uint64_t* w, bool gemm) {
    auto f = [&](FieldId g, FieldId a) { return static_cast<int64_t>(get(w, gemm ? g : a)); };
    int64_t bgn = f(F_UOP_BGN, F_ALU_UOP_BGN), end = f(F_UOP_END, F_ALU_UOP_END);
    Loops l{end - bgn, f(F_ITER_OUT, F_ALU_ITER_OUT), f(F_ITER_IN, F_ALU_ITER_IN),
            f(F_DST_FACTOR_OUT, F_ALU_DST_FACTOR_OUT), f(F_DST_FACTOR_IN, F_ALU_DST_FACTOR_IN),
            f(F_SRC_FACTOR_OUT, F_ALU_SRC_FACTOR_OUT), f(F_SRC_FACTOR_IN, F_ALU_SRC_FACTOR_IN),
            gemm ? f(F_WGT_FACTOR_OUT, F_WGT_FACTOR_OUT) : 0, gemm ? f(F_WGT_FACTOR_IN, F_WGT_FACTOR_IN) : 0};
    if (l.empty()) return l;
    if (end > p.uop_depth) throw Internal{};
    u_dst.resize(l.nuops);
    u_src.resize(l.nuops);
    u_wgt.resize(l.nuops);
    tiles.resize(l.nuops);
    for (int64_t k = 0; k < l.nuops; ++k) {
      uint32_t u = uop[bgn + k];
      u_dst[k] = uop_field(u, F_UOP_DST);
      u_src[k] = uop_field(u, F_UOP_SRC);
      u_wgt[k] = uop_field(u, F_UOP_WGT);
    }
    return l;
  }

  // The largest index a uop field reaches over the loops (factors are unsigned).
  int64_t top(const std::vector<uint32_t>& base, const Loops& l, int64_t f_out, int64_t f_in) const {
    int64_t m = *std::max_element(base.begin(), base.begin() + l.nuops);
    return m + (l.iter_out - 1) * f_out + (l.iter_in - 1) * f_in;
  }

  // Returns false and fills the report if an index passes its buffer.
  bool within(int64_t t, int64_t depth, SramWhat what, int64_t* report) const {
    if (t < depth) return true;
    report[1] = what;
    report[2] = t;
    return false;
  }

  // The uops of a GEMM, grouped by destination row: a GEMM only adds into the accumulators and
  // 32-bit wrap-around addition does not depend on the order, so each group adds all its products
  // into one accumulator row held in registers, and writes the row (and its OUT row) once.
  void group_by_dst(const Loops& l) {
    order.resize(l.nuops);
    for (int64_t k = 0; k < l.nuops; ++k) order[k] = static_cast<uint32_t>(k);
    if (!std::is_sorted(u_dst.begin(), u_dst.begin() + l.nuops))   // usually they come sorted
      std::stable_sort(order.begin(), order.end(), [this](uint32_t x, uint32_t y) { return u_dst[x] < u_dst[y]; });
    group_end.clear();
    for (int64_t k = 1; k <= l.nuops; ++k)
      if (k == l.nuops || u_dst[order[k]] != u_dst[order[k - 1]]) group_end.push_back(static_cast<uint32_t>(k));
    src_off.resize(l.nuops);
    for (int64_t j = 0; j < l.nuops; ++j) src_off[j] = u_src[order[j]] * inp_lanes();
  }

  // OUT = the low 8 bits of an accumulator row. (Local restrict pointers: an int8 store may alias
  // anything, which would make the compiler reload every member after each one.)
  void write_out(int64_t row) const {
    const int64_t lanes = acc_lanes();
    const int32_t* __restrict a = acc + row * lanes;
    int8_t* __restrict q = out + row * lanes;
    for (int64_t j = 0; j < lanes; ++j) q[j] = static_cast<int8_t>(a[j]);
  }

  // acc[b][o] += sum over the group's uops of sum_k inp[b][k] * wgt[o][k]. The plain loop: any config.
  void gemm_group_generic(int32_t* a, const int8_t* x0, const int8_t* w0, const uint32_t* ks, int64_t n) const {
    const int64_t bi = p.block_in, bo = p.block_out;
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t o = 0; o < bo; ++o) {
        uint32_t sum = static_cast<uint32_t>(a[b * bo + o]);
        for (int64_t u = 0; u < n; ++u) {
          const int8_t* x = x0 + u_src[ks[u]] * p.batch * bi + b * bi;
          const int8_t* m = w0 + u_wgt[ks[u]] * bo * bi + o * bi;
          int32_t dot = 0;   // |dot| <= block_in * 2^14: no overflow for any legal block size
          for (int64_t k = 0; k < bi; ++k) dot += int32_t(x[k]) * int32_t(m[k]);
          sum += static_cast<uint32_t>(dot);
        }
        a[b * bo + o] = static_cast<int32_t>(sum);
      }
  }

#if defined(__AVX2__)
  // The same for 16x16 blocks with AVX2: pairs of 16-bit inputs (read from inp16, INP widened)
  // times pairs of weights (_mm256_madd_epi16), 8 outputs per register; input pairs that are zero
  // in every row an instruction reads are skipped (the zero-padded channels of a 3-channel image).
  // Weight tiles are used rearranged as pairs[k/2][o][k%2], made when a tile is first used in a
  // run and again after a WGT load overwrites it.
  static bool avx2_shape(const Params& p) { return p.block_in == 16 && p.block_out == 16; }

  const int16_t* pairs_of(int64_t t) {
    int16_t* dst = wgt_pairs.data() + t * 256;
    if (wgt_pairs_stamp[t] != pairs_stamp) {
      // Row o sign-extended is 8 dwords, dword kp = pair kp of row o; pairs[kp] lists the dwords
      // of column kp: two 8x8 dword transposes (rows 0-7 and 8-15).
      const int8_t* m = wgt + t * 256;
      for (int half = 0; half < 2; ++half) {
        __m256i r[8], u[8];
        for (int o = 0; o < 8; ++o)
          r[o] = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(m + (half * 8 + o) * 16)));
        for (int g = 0; g < 8; g += 4) {   // rows g..g+3: u[g + c] = column c (and c + 4) of them
          const __m256i t0 = _mm256_unpacklo_epi32(r[g], r[g + 1]), t1 = _mm256_unpackhi_epi32(r[g], r[g + 1]);
          const __m256i t2 = _mm256_unpacklo_epi32(r[g + 2], r[g + 3]), t3 = _mm256_unpackhi_epi32(r[g + 2], r[g + 3]);
          u[g] = _mm256_unpacklo_epi64(t0, t2);
          u[g + 1] = _mm256_unpackhi_epi64(t0, t2);
          u[g + 2] = _mm256_unpacklo_epi64(t1, t3);
          u[g + 3] = _mm256_unpackhi_epi64(t1, t3);
        }
        for (int c = 0; c < 4; ++c) {
          __m256i* col = reinterpret_cast<__m256i*>(dst + half * 16);
          _mm256_storeu_si256(col + c * 2, _mm256_permute2x128_si256(u[c], u[c + 4], 0x20));         // pair c
          _mm256_storeu_si256(col + (c + 4) * 2, _mm256_permute2x128_si256(u[c], u[c + 4], 0x31));   // pair c + 4
        }
      }
      bool diag = true;
      for (int o = 0; o < 16; ++o) {
        wgt_diag[t * 16 + o] = m[o * 16 + o];
        for (int k = 0; k < 16; ++k) diag = diag && (k == o || m[o * 16 + k] == 0);
      }
      wgt_is_diag[t] = diag;
      wgt_pairs_stamp[t] = pairs_stamp;
    }
    return dst;
  }

  // The R accumulator rows a, a + a_step, ... into registers (8 lanes in lo, 8 in hi), and back
  // with their OUT rows q, q + a_step, ...: the two ends of both GEMM kernels.
  template <int R>
  static void load_rows(__m256i* lo, __m256i* hi, const int32_t* a, int64_t a_step) {
    for (int r = 0; r < R; ++r) {
      lo[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + r * a_step));
      hi[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + r * a_step + 8));
    }
  }
  template <int R>
  static void store_rows(const __m256i* lo, const __m256i* hi, int32_t* a, int8_t* q, int64_t a_step) {
    for (int r = 0; r < R; ++r) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(a + r * a_step), lo[r]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(a + r * a_step + 8), hi[r]);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + r * a_step), low_bytes(lo[r], hi[r]));
    }
  }

  // lo[r], hi[r] += rearranged tile w times the inputs of row r (xs[r]: pairs 0-3 and 4-7 of the row,
  // each in both 128-bit halves) for the R rows of a kernel: each weight register serves R rows
  // (register blocking), which halves the loads per multiply or better. The empty asm statements
  // keep the accumulators in registers: without them the compiler reassociates the sums and spills
  // every partial product. (A macro: written as a function taking the register arrays, the
  // kernels measured 3-10% slower on 1x1 layers.)
#define VTA_PAIR(kp, imm)                                                                                \
  {                                                                                                      \
    const __m256i wl = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + (kp) * 32));              \
    const __m256i wh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + (kp) * 32 + 16));         \
    for (int r = 0; r < R; ++r) {   /* pair kp of row r in every 32-bit lane */                          \
      const __m256i xx = _mm256_shuffle_epi32(xs[r][(kp) / 4], imm);                                     \
      lo[r] = _mm256_add_epi32(lo[r], _mm256_madd_epi16(xx, wl));                                        \
      hi[r] = _mm256_add_epi32(hi[r], _mm256_madd_epi16(xx, wh));                                        \
    }                                                                                                    \
    for (int r = 0; r < R; ++r) __asm__("" : "+x"(lo[r]), "+x"(hi[r]));                                  \
  }
#define VTA_ADD_TILE                                                                                     \
  VTA_PAIR(0, 0x00) VTA_PAIR(1, 0x55) VTA_PAIR(2, 0xAA) VTA_PAIR(3, 0xFF)                                \
  VTA_PAIR(4, 0x00) VTA_PAIR(5, 0x55) VTA_PAIR(6, 0xAA) VTA_PAIR(7, 0xFF)

  // R accumulator rows (a, a + a_step, ...; their inputs at x, x + x_step, ... in inp16) that run
  // the same uops with the same tiles. off[u] / t[u]: uop u's input row offset and rearranged tile.
  template <int R>
  void gemm_rows_avx2(int32_t* a, int8_t* q, int64_t a_step, const int16_t* x, int64_t x_step,
                      const int64_t* off, const int16_t* const* t, int64_t n) const {
    __m256i lo[R], hi[R];
    load_rows<R>(lo, hi, a, a_step);
    for (int64_t u = 0; u < n; ++u) {
      const int16_t* w = t[u];
      __m256i xs[R][2];   // pairs 0-3 (xs[r][0]) and 4-7 (xs[r][1]) of row r, in both 128-bit halves:
      for (int r = 0; r < R; ++r)   // a broadcast load, so a pair needs one in-lane shuffle
        for (int h = 0; h < 2; ++h)
          xs[r][h] = _mm256_broadcastsi128_si256(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + r * x_step + off[u] + 8 * h)));
      VTA_ADD_TILE
    }
    store_rows<R>(lo, hi, a, q, a_step);
  }

  // R accumulator rows anywhere (a[r]; inputs x[r] in inp16) that add one tile w each: the rows of
  // a 1x1 convolution, whose uops each write a row of their own (gemm_single_uops).
  template <int R>
  void gemm_one_uop_avx2(int32_t* const* a, const int16_t* const* x, const int16_t* w) const {
    __m256i lo[R], hi[R], xs[R][2];
    for (int r = 0; r < R; ++r) {
      lo[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[r]));
      hi[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[r] + 8));
      for (int h = 0; h < 2; ++h)
        xs[r][h] = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[r] + 8 * h)));
    }
    VTA_ADD_TILE
    int8_t* const out_rows = out;   // a local: an int8 store would make the compiler reload members
    for (int r = 0; r < R; ++r) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(a[r]), lo[r]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(a[r] + 8), hi[r]);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out_rows + (a[r] - acc)), low_bytes(lo[r], hi[r]));
    }
  }
#undef VTA_ADD_TILE
#undef VTA_PAIR

  // The input pairs (lanes 2kp, 2kp+1 of every batch row) that are not zero in some INP row the GEMM
  // may read (rows min(src) .. the largest src index): the others add nothing, so the kernel skips
  // them exactly. A 3-channel image padded to 16 channels has 2 of 8 pairs active.
  void find_active_pairs(const Loops& l) {
    const int64_t first = *std::min_element(u_src.begin(), u_src.begin() + l.nuops);
    const int64_t last = top(u_src, l, l.src_out, l.src_in);   // checked against the INP depth
    const int64_t row_bytes = inp_lanes();
    const int8_t* x = inp + first * row_bytes;
    const int8_t* const end = inp + (last + 1) * row_bytes;
    auto fold = [](__m256i v) { return _mm_or_si128(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)); };
    __m256i any8 = _mm256_setzero_si256();   // 8 rows of 16 bytes at a time, until every pair is on
    bool all_on = false;
    for (; x + 128 <= end && !all_on; x += 128) {
      const __m256i* v = reinterpret_cast<const __m256i*>(x);
      const __m256i rows0to3 = _mm256_or_si256(_mm256_loadu_si256(v), _mm256_loadu_si256(v + 1));
      const __m256i rows4to7 = _mm256_or_si256(_mm256_loadu_si256(v + 2), _mm256_loadu_si256(v + 3));
      any8 = _mm256_or_si256(any8, _mm256_or_si256(rows0to3, rows4to7));
      all_on = _mm_movemask_epi8(_mm_cmpeq_epi16(fold(any8), _mm_setzero_si128())) == 0;
    }
    __m128i any = fold(any8);
    for (; x < end && !all_on; x += 16) any = _mm_or_si128(any, _mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
    // pair kp is 16-bit element kp: its two mask bits are set when both bytes are zero
    const uint32_t zero = _mm_movemask_epi8(_mm_cmpeq_epi16(any, _mm_setzero_si128()));
    num_active = 0;
    for (int kp = 0; kp < 8; ++kp)
      if ((zero >> (2 * kp) & 3) != 3) active_pairs[num_active++] = kp;
  }

  // The same over the NA active pairs only (used when some pair is zero in every row).
  template <int R, int NA>
  void gemm_rows_avx2_sparse(int32_t* a, int8_t* q, int64_t a_step, const int16_t* x, int64_t x_step,
                             const int64_t* off, const int16_t* const* t, int64_t n) const {
    __m256i lo[R], hi[R];
    load_rows<R>(lo, hi, a, a_step);
    for (int64_t u = 0; u < n; ++u) {
      const int16_t* w = t[u];
      const int16_t* xu = x + off[u];   // widened: a pair is one dword
      for (int m = 0; m < NA; ++m) {
        const int kp = active_pairs[m];
        const __m256i* wp = reinterpret_cast<const __m256i*>(w + kp * 32);
        const __m256i wl = _mm256_loadu_si256(wp), wh = _mm256_loadu_si256(wp + 1);
        for (int r = 0; r < R; ++r) {
          int32_t pair;   // elements 2kp, 2kp+1 of row r
          std::memcpy(&pair, xu + r * x_step + 2 * kp, 4);
          const __m256i xx = _mm256_set1_epi32(pair);   // in every 32-bit lane
          lo[r] = _mm256_add_epi32(lo[r], _mm256_madd_epi16(xx, wl));
          hi[r] = _mm256_add_epi32(hi[r], _mm256_madd_epi16(xx, wh));
        }
        for (int r = 0; r < R; ++r) __asm__("" : "+x"(lo[r]), "+x"(hi[r]));
      }
    }
    store_rows<R>(lo, hi, a, q, a_step);
  }

  // `rows` accumulator rows (steps a_step, x_step) of one batch element, each adding the n uops
  // off/t, in blocks of kBlockRows. NA: the number of active input pairs (8: the dense kernel).
  template <int NA>
  void gemm_rows(int32_t* a, int8_t* q, int64_t a_step, const int16_t* x, int64_t x_step, int64_t rows,
                 const int64_t* off, const int16_t* const* t, int64_t n) const {
    int64_t i = 0;
    auto run = [&](auto block) {
      constexpr int R = decltype(block)::value;
      if constexpr (NA == 8)
        gemm_rows_avx2<R>(a + i * a_step, q + i * a_step, a_step, x + i * x_step, x_step, off, t, n);
      else
        gemm_rows_avx2_sparse<R, NA>(a + i * a_step, q + i * a_step, a_step, x + i * x_step, x_step, off, t, n);
      i += R;
    };
    for (; i + kBlockRows <= rows;) run(std::integral_constant<int, kBlockRows>{});
    switch (rows - i) {   // the rest in one block
      case 3: run(std::integral_constant<int, 3>{}); break;
      case 2: run(std::integral_constant<int, 2>{}); break;
      case 1: run(std::integral_constant<int, 1>{}); break;
      default: break;
    }
  }

  // The same where every tile is diagonal (a depthwise layer's: one channel per group), d[u] the
  // diagonals: each output lane adds its input lane times its weight, 16 products per multiply
  // (int8 x int8 fits 16 bits exactly), widened to 32 bits before they add.
  void gemm_rows_diag(int32_t* a, int8_t* q, int64_t a_step, const int16_t* x, int64_t x_step, int64_t rows,
                      const int64_t* off, const int16_t* const* d, int64_t n) const {
    for (int64_t r = 0; r < rows; ++r) {
      int32_t* const ar = a + r * a_step;
      const int16_t* const xr = x + r * x_step;
      __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ar));
      __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ar + 8));
      for (int64_t u = 0; u < n; ++u) {
        const __m256i prod = _mm256_mullo_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr + off[u])),
                                                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(d[u])));
        lo = _mm256_add_epi32(lo, _mm256_cvtepi16_epi32(_mm256_castsi256_si128(prod)));
        hi = _mm256_add_epi32(hi, _mm256_cvtepi16_epi32(_mm256_extracti128_si256(prod, 1)));
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(ar), lo);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(ar + 8), hi);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + r * a_step), low_bytes(lo, hi));
    }
  }

  // The low byte of each of the 16 int32 lanes of (lo, hi), in order: the OUT row. Each 128-bit
  // half gathers its low bytes: dword 0 from lo, dword 1 from hi; then dwords 0, 4, 1, 5 in order.
  static __m128i low_bytes(__m256i lo, __m256i hi) {
    const __m256i from_lo = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,   //
                                             0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m256i from_hi = _mm256_setr_epi8(-1, -1, -1, -1, 0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1,   //
                                             -1, -1, -1, -1, 0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m256i both = _mm256_or_si256(_mm256_shuffle_epi8(lo, from_lo), _mm256_shuffle_epi8(hi, from_hi));
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 0, 0, 0, 0);
    return _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(both, order));
  }
#endif

  // The uops of a GEMM or ALU loop in program order up to the first one with an index past its
  // buffer, which fills the report: the core runs (and counts) the uops before it, then stops.
  // Only for loops whose largest index passes a buffer, so the plain code, one uop at a time.
  Status run_until_bad(const uint64_t* w, const Loops& l, bool is_gemm, int64_t* report) {
    const bool reset = is_gemm && get(w, F_RESET);
    const bool use_imm = !is_gemm && get(w, F_USE_IMM);
    const int32_t imm = static_cast<int32_t>(get_signed(w, F_IMM));
    const uint64_t opcode = is_gemm ? 0 : get(w, F_ALU_OPCODE);
    const int64_t lanes = acc_lanes();
    for (int64_t o = 0; o < l.iter_out; ++o)
      for (int64_t i = 0; i < l.iter_in; ++i)
        for (int64_t k = 0; k < l.nuops; ++k) {
          const int64_t d = o * l.dst_out + i * l.dst_in + u_dst[k];
          const int64_t s = o * l.src_out + i * l.src_in + u_src[k];
          const int64_t g = o * l.wgt_out + i * l.wgt_in + u_wgt[k];
          // the core's order: dst, then src and wgt where the operation reads them
          const bool ok = within(d, p.acc_depth, is_gemm ? GEMM_DST : ALU_DST, report) &&
                          (is_gemm ? reset || (within(s, p.inp_depth, GEMM_SRC, report) &&
                                               within(g, p.wgt_depth, GEMM_WGT, report))
                                   : use_imm || within(s, p.acc_depth, ALU_SRC, report));
          if (!ok) return ST_SRAM_INDEX;
          int32_t* a = acc + d * lanes;
          if (reset) {
            std::memset(a, 0, lanes * sizeof(int32_t));
          } else if (is_gemm) {
            const uint32_t one = static_cast<uint32_t>(k);
            gemm_group_generic(a, inp + (s - u_src[k]) * inp_lanes(), wgt + (g - u_wgt[k]) * wgt_lanes(), &one, 1);
            write_out(d);
            count(C_GEMM, 1);
          } else {
            auto row = [&](auto op) {
              use_imm ? alu_row<true>(a, out + d * lanes, nullptr, lanes, imm, op)
                      : alu_row<false>(a, out + d * lanes, acc + s * lanes, lanes, imm, op);
            };
            switch (opcode) {
              case ALU_MIN: row(AluMin{}); break;
              case ALU_MAX: row(AluMax{}); break;
              case ALU_ADD: row(AluAdd{}); break;
              default: row(AluShr{static_cast<int32_t>(p.shift_bits)});
            }
            count(C_ALU, 1);
          }
          tick(1);
        }
    return ST_INTERNAL;   // unreachable: the caller saw an index past a buffer
  }

  Status gemm(const uint64_t* w, int64_t* report) {
    Loops l = loops(w, true);
    if (l.empty()) return ST_OK;
    const bool reset = get(w, F_RESET) != 0;
    if (top(u_dst, l, l.dst_out, l.dst_in) >= p.acc_depth ||
        (!reset && (top(u_src, l, l.src_out, l.src_in) >= p.inp_depth ||
                    top(u_wgt, l, l.wgt_out, l.wgt_in) >= p.wgt_depth)))
      return run_until_bad(w, l, true, report);
    const int64_t lanes = acc_lanes();
    if (reset) {   // zero the accumulators; OUT keeps its value
      lanes == 16 ? reset_rows<16>(l) : reset_rows<0>(l);
      return ST_OK;
    }
    count(C_GEMM, l.nuops * l.iter_out * l.iter_in);
#if defined(__AVX2__)
    const bool fast = !generic_gemm && avx2_shape(p);
    if (fast) {
      find_active_pairs(l);
      fold_accumulating_loop(l);
    }
#else
    const bool fast = false;
#endif
    group_by_dst(l);
    const bool single = fast && single_uop_rows(l);
    for (int64_t o = 0; o < l.iter_out; ++o) {
      if (l.wgt_in == 0) {   // the tiles stay the same for all i: each group runs over i with its tiles hot
        if (fast && (o == 0 || l.wgt_out)) set_tiles(l, o * l.wgt_out);
        if (single) {
          p.batch == 1 ? gemm_single_uops<1>(l, o) : gemm_single_uops<0>(l, o);
          continue;
        }
        uint32_t begin = 0;
        for (uint32_t end : group_end) {
          gemm_group(l, fast, o, 0, l.iter_in, begin, end);   // ticks the clock
          begin = end;
        }
      } else {
        for (int64_t i = 0; i < l.iter_in; ++i) {
          if (fast) set_tiles(l, o * l.wgt_out + i * l.wgt_in);
          uint32_t begin = 0;
          for (uint32_t end : group_end) {
            gemm_group(l, fast, o, i, 1, begin, end);
            begin = end;
          }
        }
      }
    }
    return ST_OK;
  }

  // A GEMM whose uops each write a row of their own and share one tile (a 1x1 convolution) runs
  // the rows of an outer iteration kBlockRows at a time whichever uop and inner iteration they
  // come from, rather than group by group (a group of one uop has only iter_in rows). Needs those
  // rows distinct: the uops' rows span less than dst_in.
  bool single_uop_rows(const Loops& l) const {
    if (num_active != 8 || l.wgt_in != 0 || static_cast<int64_t>(group_end.size()) != l.nuops) return false;
    for (int64_t k = 1; k < l.nuops; ++k)
      if (u_wgt[k] != u_wgt[0]) return false;
    const auto [first, last] = std::minmax_element(u_dst.begin(), u_dst.begin() + l.nuops);
    return l.iter_in == 1 || l.dst_in > static_cast<int64_t>(*last - *first);
  }
  // kBatch: the batch when known at compile time (1, the usual one), else 0.
  template <int64_t kBatch>
  void gemm_single_uops(const Loops& l, int64_t o) {
#if defined(__AVX2__)
    constexpr int R = kBlockRows;
    int32_t* a[R];
    const int16_t* x[R];
    int n = 0;
    // locals: the kernel call would make the compiler reload members
    const int16_t* const w = tiles[0];
    const int64_t batch = kBatch ? kBatch : p.batch, lanes = 16 * batch, il = lanes, nuops = l.nuops;
    int32_t* const acc_rows = acc;
    const int16_t* const inp_rows = inp16.data();
    const uint32_t* const dst = u_dst.data();
    const uint32_t* const ord = order.data();
    const int64_t* const src = src_off.data();
    for (int64_t i = 0; i < l.iter_in; ++i) {
      int32_t* const a0 = acc_rows + (o * l.dst_out + i * l.dst_in) * lanes;
      const int16_t* const x0 = inp_rows + (o * l.src_out + i * l.src_in) * il;
      for (int64_t j = 0; j < nuops; ++j)
        for (int64_t b = 0; b < batch; ++b) {   // a batch element is 16 lanes of its own
          a[n] = a0 + dst[ord[j]] * lanes + b * 16;
          x[n] = x0 + src[j] + b * 16;
          if (++n == R) {
            gemm_one_uop_avx2<R>(a, x, w);
            n = 0;
          }
        }
      tick(nuops);
    }
    for (int r = 0; r < n; ++r) gemm_one_uop_avx2<1>(a + r, x + r, w);
#else
    (void)l;
    (void)o;
#endif
  }

  // A GEMM with the reset flag zeroes its destination rows. kLanes: the row width when known at
  // compile time (16: two stores, where a memset call per row cost more than the zeroing).
  template <int64_t kLanes>
  void reset_rows(const Loops& l) {
    const int64_t lanes = kLanes ? kLanes : acc_lanes();
    int32_t* const rows = acc;
    for (int64_t o = 0; o < l.iter_out; ++o)
      for (int64_t i = 0; i < l.iter_in; ++i) {
        const int64_t d0 = o * l.dst_out + i * l.dst_in;
        for (int64_t k = 0; k < l.nuops; ++k) std::fill_n(rows + (d0 + u_dst[k]) * lanes, lanes, 0);
        tick(l.nuops);
      }
  }

  // A loop that only accumulates (its dst factor is 0: over input-channel blocks or kernel rows,
  // say) becomes more uops of one iteration, and the other loop is made the inner one, so that
  // each accumulator row is loaded and stored once per block of rows instead of once per
  // iteration of that loop. Exact: a GEMM only adds into ACC, in any order. (Bounded by
  // kFoldUops: the uop arrays stay small.)
  void fold_accumulating_loop(Loops& l) {
    const bool outer = l.iter_out > 1 && l.dst_out == 0 && l.wgt_in == 0;   // rows: the inner loop
    const bool inner = !outer && l.iter_in > 1 && l.dst_in == 0;          // rows: the outer loop
    if (!outer && !inner) return;
    const int64_t n = l.nuops, iters = outer ? l.iter_out : l.iter_in;
    if (n * iters > kFoldUops) return;
    const int64_t src_f = outer ? l.src_out : l.src_in, wgt_f = outer ? l.wgt_out : l.wgt_in;
    u_dst.resize(n * iters);
    u_src.resize(n * iters);
    u_wgt.resize(n * iters);
    tiles.resize(n * iters);
    for (int64_t it = iters - 1; it > 0; --it)   // iteration 0 is the uops as they are
      for (int64_t k = 0; k < n; ++k) {
        u_dst[it * n + k] = u_dst[k];
        u_src[it * n + k] = static_cast<uint32_t>(u_src[k] + it * src_f);
        u_wgt[it * n + k] = static_cast<uint32_t>(u_wgt[k] + it * wgt_f);
      }
    l.nuops = n * iters;
    if (inner) {   // the outer loop becomes the inner one
      l.iter_in = l.iter_out;
      l.dst_in = l.dst_out;
      l.src_in = l.src_out;
      l.wgt_in = l.wgt_out;
    }
    l.iter_out = 1;
    l.dst_out = l.src_out = l.wgt_out = 0;
  }

  void set_tiles(const Loops& l, int64_t w0) {
#if defined(__AVX2__)
    all_diag = true;
    diags.resize(l.nuops);
    for (int64_t j = 0; j < l.nuops; ++j) {
      const int64_t t = w0 + u_wgt[order[j]];
      tiles[j] = pairs_of(t);
      diags[j] = wgt_diag.data() + t * 16;
      all_diag = all_diag && wgt_is_diag[t];
    }
#else
    (void)l;
    (void)w0;
#endif
  }

  // The group of uops order[begin, end) at iterations (o, i) for i in [i0, i0 + n).
  void gemm_group(const Loops& l, bool fast, int64_t o, int64_t i0, int64_t n, uint32_t begin, uint32_t end) {
    const int64_t lanes = acc_lanes(), il = inp_lanes(), wl = wgt_lanes();
    const uint32_t* ks = &order[begin];
    const int64_t count = end - begin;
    int64_t row = o * l.dst_out + i0 * l.dst_in + u_dst[ks[0]];
    const int8_t* x0 = inp + (o * l.src_out + i0 * l.src_in) * il;
#if defined(__AVX2__)
    if (fast) {
      // rows of different i are different accumulators unless dst_in is 0: then one after another;
      // chunks of kChunkRows rows, so that the clock is looked at inside long groups too
      const int64_t chunk = l.dst_in ? kChunkRows : 1;
      for (int64_t i = 0; i < n; i += chunk) {
        const int64_t blocked = std::min(chunk, n - i);
        for (int64_t b = 0; b < p.batch; ++b) {
          int32_t* a = acc + (row + i * l.dst_in) * lanes + b * 16;
          int8_t* q = out + (row + i * l.dst_in) * lanes + b * 16;
          const int16_t* x = inp16.data() + (x0 - inp) + i * l.src_in * il + b * 16;
          const int64_t a_step = l.dst_in * lanes, x_step = l.src_in * il;
          const int64_t* off = &src_off[begin];
          const int16_t* const* t = &tiles[begin];
          if (all_diag) {
            gemm_rows_diag(a, q, a_step, x, x_step, blocked, off, &diags[begin], count);
            continue;
          }
          switch (num_active) {   // 0: every input pair is zero, the sums stay; OUT is still written
            case 0:
            case 1: gemm_rows<1>(a, q, a_step, x, x_step, blocked, off, t, num_active ? count : 0); break;
            case 2: gemm_rows<2>(a, q, a_step, x, x_step, blocked, off, t, count); break;
            case 3: gemm_rows<3>(a, q, a_step, x, x_step, blocked, off, t, count); break;
            case 4: gemm_rows<4>(a, q, a_step, x, x_step, blocked, off, t, count); break;
            case 5: gemm_rows<5>(a, q, a_step, x, x_step, blocked, off, t, count); break;
            case 6: gemm_rows<6>(a, q, a_step, x, x_step, blocked, off, t, count); break;
            case 7: gemm_rows<7>(a, q, a_step, x, x_step, blocked, off, t, count); break;
            default: gemm_rows<8>(a, q, a_step, x, x_step, blocked, off, t, count);
          }
        }
        tick(count * blocked);
      }
      return;
    }
#else
    (void)fast;
#endif
    for (int64_t i = 0; i < n; ++i, row += l.dst_in, x0 += l.src_in * il) {
      gemm_group_generic(acc + row * lanes, x0, wgt + (o * l.wgt_out + (i0 + i) * l.wgt_in) * wl, ks, count);
      write_out(row);
      tick(count);
    }
  }

  // The ALU works on 32-bit lanes: both operands are 32-bit values (an immediate has 16 bits), so
  // MIN and MAX are exact and ADD wraps around like the accumulator.
  // SHR by the low shift_bits of the operand read as a signed number; a negative amount shifts left.
  static int32_t shift(int32_t lhs, int32_t amount) {
    if (amount >= 0) return lhs >> std::min(amount, 31);   // 31 and more: the sign
    if (amount <= -32) return 0;
    return static_cast<int32_t>(static_cast<uint32_t>(lhs) << -amount);
  }

  // The four ALU operations, lane by lane; with AVX2 also 8 lanes at a time.
  struct AluMin {
    int32_t operator()(int32_t a, int32_t b) const { return a < b ? a : b; }
#if defined(__AVX2__)
    __m256i operator()(__m256i a, __m256i b) const { return _mm256_min_epi32(a, b); }
#endif
  };
  struct AluMax {
    int32_t operator()(int32_t a, int32_t b) const { return a > b ? a : b; }
#if defined(__AVX2__)
    __m256i operator()(__m256i a, __m256i b) const { return _mm256_max_epi32(a, b); }
#endif
  };
  struct AluAdd {
    int32_t operator()(int32_t a, int32_t b) const {
      return static_cast<int32_t>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));
    }
#if defined(__AVX2__)
    __m256i operator()(__m256i a, __m256i b) const { return _mm256_add_epi32(a, b); }
#endif
  };
  struct AluShr {
    int32_t shift_bits;
    // the low shift_bits of b, read as a signed number
    static int32_t amount(int32_t b, int32_t shift_bits) {
      const int32_t half = int32_t{1} << (shift_bits - 1);
      return ((b & ((int32_t{1} << shift_bits) - 1)) ^ half) - half;
    }
    int32_t operator()(int32_t a, int32_t b) const { return shift(a, amount(b, shift_bits)); }
#if defined(__AVX2__)
    __m256i operator()(__m256i a, __m256i b) const {
      const __m256i half = _mm256_set1_epi32(1 << (shift_bits - 1));
      const __m256i amount = _mm256_sub_epi32(
          _mm256_xor_si256(_mm256_and_si256(b, _mm256_set1_epi32((1 << shift_bits) - 1)), half), half);
      const __m256i right = _mm256_srav_epi32(a, amount);   // a count of 32 or more gives the sign
      const __m256i left = _mm256_sllv_epi32(a, _mm256_sub_epi32(_mm256_setzero_si256(), amount));   // >= 32: 0
      return _mm256_blendv_epi8(right, left, _mm256_cmpgt_epi32(_mm256_setzero_si256(), amount));
    }
#endif
  };

  // MUL (extension alu_mul): the low 16 bits of both operands, signed, multiplied: an exact int32.
  struct AluMul {
    int32_t operator()(int32_t a, int32_t b) const {
      return int32_t{static_cast<int16_t>(a)} * int32_t{static_cast<int16_t>(b)};
    }
#if defined(__AVX2__)
    __m256i operator()(__m256i a, __m256i b) const {   // pairs (a.low, a.high) x (b.low, 0): a.low * b.low
      return _mm256_madd_epi16(a, _mm256_and_si256(b, _mm256_set1_epi32(0xFFFF)));
    }
#endif
  };

  // acc[dst] = op(acc[dst], operand) lane by lane for one row; operand is the immediate (kImm) or
  // the row s. OUT gets the low 8 bits. Lane j of s is read before lane j of a is written.
  template <bool kImm, typename Op>
  static void alu_row(int32_t* a, int8_t* q, const int32_t* s, int64_t lanes, int32_t imm, Op op) {
    int64_t j = 0;
#if defined(__AVX2__)
    for (; j + 16 <= lanes; j += 16) {   // both operands are read before the row is written
      const __m256i* av = reinterpret_cast<const __m256i*>(a + j);
      __m256i b_lo, b_hi;
      if (kImm) {
        b_lo = b_hi = _mm256_set1_epi32(imm);
      } else {
        b_lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + j));
        b_hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + j + 8));
      }
      __m256i lo = op(_mm256_loadu_si256(av), b_lo), hi = op(_mm256_loadu_si256(av + 1), b_hi);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(a + j), lo);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(a + j + 8), hi);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + j), low_bytes(lo, hi));
    }
#endif
    for (; j < lanes; ++j) {
      a[j] = op(a[j], kImm ? imm : s[j]);
      q[j] = static_cast<int8_t>(a[j]);
    }
  }

  // The ALU's loops, in program order (later uops see earlier results).
  // kLanes: the row width when it is known at compile time (16, the usual one), else 0.
  template <bool kImm, int64_t kLanes, typename Op>
  void alu_loops(const Loops& l, int32_t imm, Op op) {
    const int64_t lanes = kLanes ? kLanes : acc_lanes(), nuops = l.nuops;
    int32_t* const acc_rows = acc;   // locals: an int8 store would make the compiler reload members
    int8_t* const out_rows = out;
    const uint32_t* const dst = u_dst.data();
    const uint32_t* const src = u_src.data();
    int64_t pending = 0;   // uops not yet told to tick(): a local, since an int8 store may alias any member
    for (int64_t o = 0; o < l.iter_out; ++o)
      for (int64_t i = 0; i < l.iter_in; ++i) {
        const int64_t d0 = o * l.dst_out + i * l.dst_in, s0 = o * l.src_out + i * l.src_in;
        for (int64_t k = 0; k < nuops; ++k) {
          const int64_t d = d0 + dst[k];
          alu_row<kImm>(acc_rows + d * lanes, out_rows + d * lanes, kImm ? nullptr : acc_rows + (s0 + src[k]) * lanes,
                        lanes, imm, op);
        }
        if ((pending += nuops) >= kClockEvery) {
          tick(pending);
          pending = 0;
        }
      }
    tick(pending);
  }

  template <typename Op>
  void alu_loops(const Loops& l, bool use_imm, int32_t imm, Op op) {
    const bool row16 = acc_lanes() == 16;   // a row is two registers: no loop over lanes
    if (use_imm)
      row16 ? alu_loops<true, 16>(l, imm, op) : alu_loops<true, 0>(l, imm, op);
    else
      row16 ? alu_loops<false, 16>(l, imm, op) : alu_loops<false, 0>(l, imm, op);
  }

  Status alu(const uint64_t* w, int64_t* report) {
    Loops l = loops(w, false);
    if (l.empty()) return ST_OK;
    const bool use_imm = get(w, F_USE_IMM) != 0;
    if (top(u_dst, l, l.dst_out, l.dst_in) >= p.acc_depth ||
        (!use_imm && top(u_src, l, l.src_out, l.src_in) >= p.acc_depth))
      return run_until_bad(w, l, false, report);
    count(C_ALU, l.nuops * l.iter_out * l.iter_in);
    const int32_t imm = static_cast<int32_t>(get_signed(w, F_IMM));
    switch (get(w, F_ALU_OPCODE)) {
      case ALU_MIN: alu_loops(l, use_imm, imm, AluMin{}); break;
      case ALU_MAX: alu_loops(l, use_imm, imm, AluMax{}); break;
      case ALU_ADD: alu_loops(l, use_imm, imm, AluAdd{}); break;
      case ALU_MUL: alu_loops(l, use_imm, imm, AluMul{}); break;   // the checks refuse it without alu_mul
      default: alu_loops(l, use_imm, imm, AluShr{static_cast<int32_t>(p.shift_bits)});   // SHR: the checks refused
    }                                                                                     // every other opcode
    return ST_OK;
  }

  // ------------------------------------------------------------ fused epilogues
  // A layer's epilogue is a run of ALU instructions over one range of accumulator rows (ADD a
  // bias, SHR, MAX, MIN), each after the LOAD of its one-uop kernel. One after another, each pass
  // loads and stores every row and its OUT row; fused, a row is loaded once, goes through every
  // operation in registers and is stored once. Exact when the first instruction writes each row
  // of a contiguous range once and reads none of them, and the others are immediate operations
  // that write that range once each: every row sees the same operations, operands and order.
  // (The uop loads between them touch only the uop SRAM, and each instruction's uops are read
  // before the loads after it run.)
  static constexpr size_t kMaxFusedSteps = 16;

  // [lo, hi): the ACC rows ALU instruction w writes, if it writes each of them exactly once.
  bool alu_dst_range(const uint64_t* w, int64_t* lo, int64_t* hi) const {
    const int64_t bgn = static_cast<int64_t>(get(w, F_ALU_UOP_BGN));
    const int64_t n = static_cast<int64_t>(get(w, F_ALU_UOP_END)) - bgn;
    const int64_t iter_out = static_cast<int64_t>(get(w, F_ALU_ITER_OUT));
    const int64_t iter_in = static_cast<int64_t>(get(w, F_ALU_ITER_IN));
    if (n <= 0 || iter_out == 0 || iter_in == 0) return false;
    const int64_t base = uop_field(uop[bgn], F_UOP_DST);
    for (int64_t k = 1; k < n; ++k)
      if (uop_field(uop[bgn + k], F_UOP_DST) != base + k) return false;
    if (iter_in > 1 && static_cast<int64_t>(get(w, F_ALU_DST_FACTOR_IN)) != n) return false;
    if (iter_out > 1 && static_cast<int64_t>(get(w, F_ALU_DST_FACTOR_OUT)) != n * iter_in) return false;
    *lo = base;
    *hi = base + n * iter_in * iter_out;
    return true;
  }

  // Runs the ALU instruction at position h of the compute queue q together with the immediate
  // ALU instructions (and uop loads) after it that fuse with it. Returns how many entries of q
  // ran, or 0 if none fused (then nothing ran). An instruction that pops a token ends the group:
  // it may have to wait for another module.
  int64_t fused_alu(const uint64_t* words, const std::vector<int64_t>& q, size_t h) {
    const uint64_t* first = words + 2 * q[h];
    if (h + 1 >= q.size()) return 0;
    const uint64_t* next = words + 2 * q[h + 1];   // at a glance: can anything join?
    const uint64_t next_op = get(next, F_OPCODE);
    if (!(next_op == OP_ALU && get(next, F_USE_IMM)) && !(next_op == OP_LOAD && get(next, F_MEMORY_TYPE) == MEM_UOP))
      return 0;
    int64_t lo, hi;
    if (!alu_dst_range(first, &lo, &hi) || hi > p.acc_depth) return 0;
    const Loops l = loops(first, false);   // its uops, read before the loads after it
    const bool use_imm = get(first, F_USE_IMM) != 0;
    if (!use_imm) {
      const int64_t src_lo = *std::min_element(u_src.begin(), u_src.begin() + l.nuops);
      const int64_t src_top = top(u_src, l, l.src_out, l.src_in);
      if (src_top >= p.acc_depth || (src_top >= lo && src_lo < hi)) return 0;
    }
    fused_steps.clear();
    size_t taken = h + 1;   // entries [h, taken) have run (or run below)
    for (size_t j = h + 1; j < q.size() && fused_steps.size() < kMaxFusedSteps; ++j) {
      const uint64_t* w = words + 2 * q[j];
      if (get(w, F_POP_PREV) || get(w, F_POP_NEXT)) break;
      const uint64_t op = get(w, F_OPCODE);
      if (op == OP_LOAD && get(w, F_MEMORY_TYPE) == MEM_UOP) continue;   // runs if an ALU after it joins
      if (op != OP_ALU || !get(w, F_USE_IMM)) break;
      if (get(w, F_ALU_OPCODE) == ALU_MUL) break;   // MUL has no fused stage: it starts a group of its own
      for (; taken < j; ++taken) load(words + 2 * q[taken]);   // its uop loads, in order
      int64_t lo_j, hi_j;
      if (!alu_dst_range(w, &lo_j, &hi_j) || lo_j != lo || hi_j != hi) break;   // it runs by itself
      fused_steps.emplace_back(get(w, F_ALU_OPCODE), static_cast<int32_t>(get_signed(w, F_IMM)));
      taken = j + 1;
    }
    count(C_ALU, (hi - lo) * static_cast<int64_t>(1 + fused_steps.size()));
    const int32_t imm = static_cast<int32_t>(get_signed(first, F_IMM));
    const uint64_t opcode = get(first, F_ALU_OPCODE);
    use_imm ? fused_loops<true>(l, opcode, imm) : fused_loops<false>(l, opcode, imm);
    fused_groups += !fused_steps.empty();
    return static_cast<int64_t>(taken - h);
  }

  int32_t alu_op(uint64_t opcode, int32_t a, int32_t b) const {
    switch (opcode) {
      case ALU_MIN: return AluMin{}(a, b);
      case ALU_MAX: return AluMax{}(a, b);
      case ALU_ADD: return AluAdd{}(a, b);
      case ALU_MUL: return AluMul{}(a, b);
      default: return AluShr{static_cast<int32_t>(p.shift_bits)}(a, b);
    }
  }

  // The first instruction's loops; each row goes through its operation (immediate or source row)
  // and then every step of fused_steps.
  template <bool kImm>
  void fused_loops(const Loops& l, uint64_t opcode, int32_t imm) {
#if defined(__AVX2__)
    if (acc_lanes() % 16 == 0) {
      switch (opcode) {
        case ALU_MIN: return fused_loops_avx2<kImm>(l, imm, AluMin{});
        case ALU_MAX: return fused_loops_avx2<kImm>(l, imm, AluMax{});
        case ALU_ADD: return fused_loops_avx2<kImm>(l, imm, AluAdd{});
        case ALU_MUL: return fused_loops_avx2<kImm>(l, imm, AluMul{});
        default: return fused_loops_avx2<kImm>(l, imm, AluShr{static_cast<int32_t>(p.shift_bits)});
      }
    }
#endif
    const int64_t lanes = acc_lanes();
    for (int64_t o = 0; o < l.iter_out; ++o)
      for (int64_t i = 0; i < l.iter_in; ++i)
        for (int64_t k = 0; k < l.nuops; ++k) {
          const int64_t d = o * l.dst_out + i * l.dst_in + u_dst[k];
          const int32_t* s = kImm ? nullptr : acc + (o * l.src_out + i * l.src_in + u_src[k]) * lanes;
          for (int64_t j = 0; j < lanes; ++j) {
            int32_t v = alu_op(opcode, acc[d * lanes + j], kImm ? imm : s[j]);
            for (const auto& step : fused_steps) v = alu_op(step.first, v, step.second);
            acc[d * lanes + j] = v;
            out[d * lanes + j] = static_cast<int8_t>(v);
          }
        }
    tick(l.nuops * l.iter_out * l.iter_in * static_cast<int64_t>(1 + fused_steps.size()));
  }

#if defined(__AVX2__)
  // The steps as few branch-free stages: a stage adds, shifts left, shifts right (arithmetic),
  // takes the max and then the min, each with a neutral value where unused. Consecutive steps
  // share a stage while they come in that order: SHR, MAX, MIN is one stage.
  struct Stage {
    __m256i add, max, min;
    __m128i left, right;   // counts of 32 or more give 0 / the sign, as AluShr
  };
  int fused_stages(Stage* stages) const {
    int n = 0, last = 5;   // the slot the current stage used last (5: start a new stage)
    for (const auto& [opcode, v] : fused_steps) {
      int slot;
      int32_t amount = 0;
      if (opcode == ALU_SHR) {
        amount = AluShr::amount(v, static_cast<int32_t>(p.shift_bits));
        slot = amount < 0 ? 1 : 2;
      } else {
        slot = opcode == ALU_ADD ? 0 : opcode == ALU_MAX ? 3 : 4;
      }
      if (slot <= last) {
        stages[n++] = {_mm256_setzero_si256(), _mm256_set1_epi32(INT32_MIN), _mm256_set1_epi32(INT32_MAX),
                       _mm_setzero_si128(), _mm_setzero_si128()};
      }
      Stage& st = stages[n - 1];
      switch (slot) {
        case 0: st.add = _mm256_set1_epi32(v); break;
        case 1: st.left = _mm_cvtsi32_si128(std::min(-amount, 32)); break;
        case 2: st.right = _mm_cvtsi32_si128(std::min(amount, 32)); break;
        case 3: st.max = _mm256_set1_epi32(v); break;
        default: st.min = _mm256_set1_epi32(v);
      }
      last = slot;
    }
    return n;
  }
  static __m256i staged(__m256i x, const Stage& st) {
    x = _mm256_sra_epi32(_mm256_sll_epi32(_mm256_add_epi32(x, st.add), st.left), st.right);
    return _mm256_min_epi32(_mm256_max_epi32(x, st.max), st.min);
  }

  // Rows of a multiple of 16 lanes: the first instruction's operation (Op, on an immediate or a
  // source row), then the stages, in registers.
  template <bool kImm, typename Op>
  void fused_loops_avx2(const Loops& l, int32_t imm, Op op) {
    Stage stages[kMaxFusedSteps];
    const int nstages = fused_stages(stages);
    if (nstages == 1) return fused_loops_avx2<kImm, 1>(l, imm, op, stages, 1);   // the usual: kept in registers
    fused_loops_avx2<kImm, 0>(l, imm, op, stages, nstages);
  }
  template <bool kImm, int kStages, typename Op>
  void fused_loops_avx2(const Loops& l, int32_t imm, Op op, const Stage* stages, int nstages) {
    if (kStages) nstages = kStages;
    const int64_t lanes = acc_lanes();
    int32_t* const acc_rows = acc;   // locals: an int8 store would make the compiler reload members
    int8_t* const out_rows = out;
    const __m256i imm_v = _mm256_set1_epi32(imm);
    for (int64_t o = 0; o < l.iter_out; ++o)
      for (int64_t i = 0; i < l.iter_in; ++i)
        for (int64_t k = 0; k < l.nuops; ++k) {
          const int64_t d = (o * l.dst_out + i * l.dst_in + u_dst[k]) * lanes;
          const int64_t src = (o * l.src_out + i * l.src_in + u_src[k]) * lanes;
          for (int64_t j = 0; j < lanes; j += 16) {
            int32_t* a = acc_rows + d + j;
            __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a));
            __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 8));
            if (kImm) {
              lo = op(lo, imm_v);
              hi = op(hi, imm_v);
            } else {
              const int32_t* s = acc_rows + src + j;
              lo = op(lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
              hi = op(hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 8)));
            }
            for (int t = 0; t < nstages; ++t) {
              lo = staged(lo, stages[t]);
              hi = staged(hi, stages[t]);
            }
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(a), lo);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(a + 8), hi);
            _mm_storeu_si128(reinterpret_cast<__m128i*>(out_rows + d + j), low_bytes(lo, hi));
          }
        }
    tick(l.nuops * l.iter_out * l.iter_in * static_cast<int64_t>(1 + fused_steps.size()));
  }
#endif

  Status exec(const uint64_t* w, int64_t* report) {
    switch (get(w, F_OPCODE)) {
      case OP_LOAD: load(w); return ST_OK;
      case OP_STORE: store(w); return ST_OK;
      case OP_GEMM: return gemm(w, report);
      case OP_ALU: return alu(w, report);
      default: return ST_OK;   // FINISH
    }
  }

  // Before a run (or a lone instruction): the clock starts, and Python may have written the SRAMs.
  void begin(double timeout_s) {
    next_stamp(pairs_stamp, wgt_pairs_stamp);
    widen_inp(0, p.inp_depth);
    has_deadline = timeout_s >= 0;
    if (has_deadline)
      deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
    until_clock = kClockEvery;
  }

  // ------------------------------------------------------------ the three modules
  // The load module runs as far as its tokens allow, then compute, then store, round and round
  // until a round in which nothing runs. As in the core, fetch dispatches nothing after the first
  // FINISH, and FINISH stops compute only: load and store go on with what they were given. The
  // run then ends: ST_OK if FINISH ran (the caller checks that nothing is left, as the core's
  // supervisor does), else a deadlock.
  Status run(const uint64_t* words, int64_t n, int64_t* report) {
    std::vector<int64_t> queue[kStages];
    size_t dispatched[kStages] = {0, 0, 0};   // queue entries up to the first FINISH
    bool before_finish = true;
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t* w = words + 2 * i;
      int s = stage_of(w);
      if (s < 0 && before_finish) {   // fsim_check refuses such streams
        report[0] = i;
        return ST_INTERNAL;
      }
      if (s < 0) continue;   // after FINISH: never dispatched, never checked
      queue[s].push_back(i);
      if (before_finish) dispatched[s] = queue[s].size();
      before_finish = before_finish && get(w, F_OPCODE) != OP_FINISH;
    }
    bool finished = false;
    size_t head[kStages] = {0, 0, 0};
    int64_t tokens[kQueues] = {0, 0, 0, 0};
    const FieldId flags[kFlags] = {F_POP_PREV, F_POP_NEXT, F_PUSH_PREV, F_PUSH_NEXT};
    auto fill = [&](int64_t current) {
      report[0] = current;
      for (int s = 0; s < kStages; ++s) report[3 + s] = head[s] < queue[s].size() ? queue[s][head[s]] : n;
      for (int q = 0; q < kQueues; ++q) report[6 + q] = tokens[q];
    };
    Status st = ST_OK;
    int64_t current = -1;
    try {
      for (;;) {
        bool progressed = false;
        for (int s = 0; s < kStages; ++s) {
          while (head[s] < dispatched[s]) {
            current = queue[s][head[s]];
            const uint64_t* w = words + 2 * current;
            bool ready = true;
            for (int f = 0; f < 2; ++f)
              if (get(w, flags[f]) && tokens[p.queue_of[s][f]] == 0) ready = false;
            if (!ready) break;
            for (int f = 0; f < 2; ++f)
              if (get(w, flags[f])) --tokens[p.queue_of[s][f]];
            int64_t ran = get(w, F_OPCODE) == OP_ALU && fuse ? fused_alu(words, queue[s], head[s]) : 0;
            if (ran == 0) {
              st = exec(w, report);
              if (st != ST_OK) {   // nothing retired: report the instruction as the current one
                for (int f = 0; f < 2; ++f)
                  if (get(w, flags[f])) ++tokens[p.queue_of[s][f]];
                fill(current);
                return st;
              }
              ran = 1;
            }
            for (int64_t j = 0; j < ran; ++j) {   // the pushes of every instruction that ran
              const uint64_t* done = words + 2 * queue[s][head[s] + j];
              for (int f = 2; f < 4; ++f)
                if (get(done, flags[f])) ++tokens[p.queue_of[s][f]];
            }
            head[s] += ran;
            progressed = true;
            finished = finished || get(w, F_OPCODE) == OP_FINISH;
            if (has_deadline && Clock::now() > deadline) {
              fill(current);
              return ST_TIMEOUT;
            }
          }
        }
        if (!progressed) {
          fill(-1);
          return finished ? ST_OK : ST_DEADLOCK;
        }
      }
    } catch (const Timeout&) {   // inside instruction `current`, which stays current
      fill(current);
      return ST_TIMEOUT;
    } catch (const Internal&) {
      fill(current);
      return ST_INTERNAL;
    }
  }
};

}  // namespace

extern "C" {

void* fsim_create(const int64_t* params, int64_t nparams) {
  // params: NUM_FIELDS x (word, shift, width, signed), then the scalars of Params in order.
  const int64_t want = NUM_FIELDS * 4 + 3 + 4 + 5 + 1 + NUM_COUNTERS + kStages * kFlags + 3;
  if (nparams != want) return nullptr;
  auto* e = new Engine();
  Params& p = e->p;
  const int64_t* v = params;
  for (int f = 0; f < NUM_FIELDS; ++f, v += 4)
    p.field[f] = Field{static_cast<int>(v[0]), static_cast<int>(v[1]), static_cast<int>(v[2]), static_cast<int>(v[3])};
  p.batch = *v++;
  p.block_in = *v++;
  p.block_out = *v++;
  p.inp_depth = *v++;
  p.wgt_depth = *v++;
  p.acc_depth = *v++;
  p.uop_depth = *v++;
  for (int m = 0; m < 5; ++m) p.elem_bytes[m] = *v++;
  p.shift_bits = *v++;
  for (int c = 0; c < NUM_COUNTERS; ++c) p.counter_slot[c] = *v++;
  for (int s = 0; s < kStages; ++s)
    for (int f = 0; f < kFlags; ++f) p.queue_of[s][f] = *v++;
  p.alu_mul = *v++;
  p.acc_8bit = *v++;
  p.acc8_elem_bytes = *v++;
  e->wgt_pairs.assign(static_cast<size_t>(p.wgt_depth) * p.block_out * p.block_in, 0);
  e->wgt_pairs_stamp.assign(p.wgt_depth, 0);
  e->wgt_diag.assign(static_cast<size_t>(p.wgt_depth) * p.block_out, 0);
  e->wgt_is_diag.assign(p.wgt_depth, 0);
  e->inp16.assign(static_cast<size_t>(p.inp_depth) * p.batch * p.block_in, 0);
  return e;
}

void fsim_destroy(void* e) { delete static_cast<Engine*>(e); }

void fsim_bind(void* h, int8_t* inp, int8_t* wgt, int32_t* acc, int8_t* out, uint32_t* uop, uint8_t* dram,
               uint64_t dram_bytes, int64_t* counters) {
  auto* e = static_cast<Engine*>(h);
  e->inp = inp;
  e->wgt = wgt;
  e->acc = acc;
  e->out = out;
  e->uop = uop;
  e->dram = dram;
  e->dram_bytes = dram_bytes;
  e->counters = counters;
}

void fsim_use_generic_gemm(void* h, int32_t on) { static_cast<Engine*>(h)->generic_gemm = on != 0; }
void fsim_fuse_alu(void* h, int32_t on) { static_cast<Engine*>(h)->fuse = on != 0; }
int64_t fsim_fused_groups(void* h) { return static_cast<Engine*>(h)->fused_groups; }

// 1 if the AVX2 GEMM kernel was compiled in and applies to this config.
int32_t fsim_has_fast_gemm(void* h) {
#if defined(__AVX2__)
  return Engine::avx2_shape(static_cast<Engine*>(h)->p) ? 1 : 0;
#else
  (void)h;
  return 0;
#endif
}

// Index of the first instruction diagnose.check_instruction refuses; n if all pass but there is
// no FINISH; -1 if the stream is fine.
int64_t fsim_check(void* h, const uint64_t* words, int64_t n, const int64_t* starts, const int64_t* sizes,
                   int64_t nalloc) {
  auto* e = static_cast<Engine*>(h);
  const uint64_t hash = Engine::key_hash(words, n, starts, sizes, nalloc);
  if (e->checked_before(hash, words, n, starts, sizes, nalloc)) return -1;
  bool finish = false;
  for (int64_t i = 0; i < n && !finish; ++i) {   // nothing after the first FINISH is dispatched
    const uint64_t* w = words + 2 * i;
    if (e->bad(w, starts, sizes, nalloc)) return i;
    finish = e->get(w, F_OPCODE) == OP_FINISH;
  }
  if (!finish) return n;
  e->remember_checked(hash, words, n, starts, sizes, nalloc);
  return -1;
}

// Run a checked stream until no module can go on. Returns a Status; report as described above.
int32_t fsim_run(void* h, const uint64_t* words, int64_t n, double timeout_s, int64_t* report) {
  auto* e = static_cast<Engine*>(h);
  e->begin(timeout_s);
  return e->run(words, n, report);
}

// Execute one checked instruction (for schedulers written in Python, such as the tests' racy fsim).
int32_t fsim_exec_one(void* h, const uint64_t* word, double timeout_s, int64_t* report) {
  auto* e = static_cast<Engine*>(h);
  e->begin(timeout_s);
  try {
    return e->exec(word, report);
  } catch (const Timeout&) {
    return ST_TIMEOUT;
  } catch (const Internal&) {
    return ST_INTERNAL;
  }
}

// The runtime's whole hand-over of one stream in one call (FsimDevice.run_stream): write the uop
// kernels (if any) and the stream into DRAM, check the stream, run it, and tell whether it ended
// cleanly. The stream is read from `stream` (the caller's copy, as fsim_run reads its copy), not
// from DRAM, which a STORE may overwrite. A refusal before anything is written or run returns
// ST_WRITE_REFUSED or ST_CHECK_REFUSED, after which the caller's two-step path (write, run) words
// the error; ST_UNBALANCED: the run ended without every module done, every token taken and a FINISH last.
constexpr int32_t ST_WRITE_REFUSED = 5, ST_CHECK_REFUSED = 6, ST_UNBALANCED = 7;

int32_t fsim_stream(void* h, const uint64_t* stream, int64_t n, int64_t insn_phys, const uint8_t* uops,
                    int64_t uop_bytes, int64_t uop_phys, const int64_t* starts, const int64_t* sizes, int64_t nalloc,
                    double timeout_s, int64_t* report) {
  auto* e = static_cast<Engine*>(h);
  if (n <= 0 || !inside_allocation(insn_phys, 16 * n, starts, sizes, nalloc) ||
      (uop_bytes && !inside_allocation(uop_phys, uop_bytes, starts, sizes, nalloc)))
    return ST_WRITE_REFUSED;
  if (uop_bytes) std::memcpy(e->dram + uop_phys, uops, static_cast<size_t>(uop_bytes));
  std::memcpy(e->dram + insn_phys, stream, static_cast<size_t>(16 * n));
  if (fsim_check(h, stream, n, starts, sizes, nalloc) >= 0) return ST_CHECK_REFUSED;
  const int32_t st = fsim_run(h, stream, n, timeout_s, report);
  if (st != ST_OK) return st;
  for (int s = 0; s < kStages; ++s)
    if (report[3 + s] != n) return ST_UNBALANCED;
  for (int q = 0; q < kQueues; ++q)
    if (report[6 + q] != 0) return ST_UNBALANCED;
  return e->get(stream + 2 * (n - 1), F_OPCODE) == OP_FINISH ? ST_OK : ST_UNBALANCED;
}

}  // extern "C"
