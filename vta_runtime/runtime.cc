// The VTA runtime's core (spec 4.2-4.4): instruction streams with their dependency tokens, uop
// kernels with their cache and the UOP SRAM residency, automatic flushes, and the TVM global
// functions (vta.runtime.*) that compiled code calls once per instruction.
//
// Built on first use by vta_runtime/native.py and loaded into the process; vta_runtime.CommandQueue
// and vta_runtime.InsnQueue are its Python face. It holds no ISA tables: the instruction formats
// (field names, positions, widths), the token-queue table and the buffer geometry come from
// vta_hw.spec when a queue is created, and opcode / memory type / ALU opcode numbers are -D
// defines made from vta_hw.spec's enums. Devices stay in Python: a queue calls back into Python
// to run a finished stream (and to allocate its uop staging buffer, find the device's host
// window, and print debug dumps), once per stream, not per instruction.
//
// Errors are thrown as RuntimeUsageError (registered with tvm_ffi by vta_runtime.native) with the
// same words as before this file existed.
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/map.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>
#include <tvm/ffi/string.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#ifndef OP_LOAD
#error "compile with the -D enum values from vta_hw.spec (vta_runtime/native.py does this)"
#endif

namespace vta_rt {
namespace ffi = tvm::ffi;

#define VTA_THROW(msg)                                   \
  do {                                                   \
    std::ostringstream os_;                              \
    os_ << msg;                                          \
    TVM_FFI_THROW(RuntimeUsageError) << os_.str();       \
  } while (0)

// ------------------------------------------------------------------ fields and formats
// Every instruction field name of the ISA (vta_hw.spec.isa); positions come from Python.
#define VTA_FIELDS(X)                                                                                        \
  X(opcode) X(pop_prev_dep) X(pop_next_dep) X(push_prev_dep) X(push_next_dep) X(memory_type) X(sram_base)   \
  X(dram_base) X(y_size) X(x_size) X(x_stride) X(y_pad_0) X(y_pad_1) X(x_pad_0) X(x_pad_1) X(reset_reg)     \
  X(uop_bgn) X(uop_end) X(iter_out) X(iter_in) X(dst_factor_out) X(dst_factor_in) X(src_factor_out)         \
  X(src_factor_in) X(wgt_factor_out) X(wgt_factor_in) X(alu_opcode) X(use_imm) X(imm)
#define VTA_ENUM(name) F_##name,
enum FieldId { VTA_FIELDS(VTA_ENUM) NUM_FIELDS };
#undef VTA_ENUM
#define VTA_NAME(name) #name,
const char* const kFieldNames[] = {VTA_FIELDS(VTA_NAME)};
#undef VTA_NAME

int field_id(const std::string& name) {
  for (int i = 0; i < NUM_FIELDS; ++i)
    if (name == kFieldNames[i]) return i;
  return -1;
}

// The uop format's fields, as indices into a kernel's (dst, src, wgt) triple.
int uop_field_id(const std::string& name) {
  if (name == "dst_idx") return 0;
  if (name == "src_idx") return 1;
  if (name == "wgt_idx") return 2;
  return -1;
}

// An instruction under construction: a value per field (0 when the format has no such field).
struct Insn {
  int64_t v[NUM_FIELDS] = {};
  int64_t& operator[](FieldId f) { return v[f]; }
  int64_t operator[](FieldId f) const { return v[f]; }
};

struct FieldPos {
  int id;                 // FieldId, or a uop field index for the uop format
  std::string name;
  int lsb, width;
  bool is_signed;
  int64_t min() const { return is_signed ? -(int64_t{1} << (width - 1)) : 0; }
  int64_t max() const { return is_signed ? (int64_t{1} << (width - 1)) - 1 : (int64_t{1} << width) - 1; }
};

struct Format {
  std::string name;
  std::vector<FieldPos> fields;
  // Packs values (by field id) into 128 bits; on a value that does not fit, the message of
  // vta_hw.spec's IsaEncodeError in *error and false.
  bool encode(const int64_t* values, uint64_t* words, std::string* error) const {
    words[0] = words[1] = 0;
    for (const FieldPos& f : fields) {
      int64_t v = values[f.id];
      if (v == 0) continue;   // fits every field and sets no bit (most fields of an instruction)
      if (v < f.min() || v > f.max()) {
        std::ostringstream os;
        os << name << " field " << f.name << "=" << v << " does not fit its " << f.width << " bits (range "
           << f.min() << ".." << f.max() << ")";
        *error = os.str();
        return false;
      }
      uint64_t u = static_cast<uint64_t>(v) & ((f.width >= 64) ? ~0ull : ((1ull << f.width) - 1));
      words[f.lsb / 64] |= u << (f.lsb % 64);
    }
    return true;
  }
};

// "memory:opcode,0,3,0;pop_prev_dep,3,1,0;...|GEMM:...": the formats as vta_runtime/native.py writes them.
std::map<std::string, Format> parse_formats(const std::string& spec, bool uop_names) {
  std::map<std::string, Format> out;
  std::stringstream all(spec);
  std::string part;
  while (std::getline(all, part, '|')) {
    auto colon = part.find(':');
    Format fmt;
    fmt.name = part.substr(0, colon);
    std::stringstream fields(part.substr(colon + 1));
    std::string item;
    while (std::getline(fields, item, ';')) {
      std::stringstream cells(item);
      std::string name, lsb, width, sgn;
      std::getline(cells, name, ',');
      std::getline(cells, lsb, ',');
      std::getline(cells, width, ',');
      std::getline(cells, sgn, ',');
      int id = uop_names && fmt.name == "uop" ? uop_field_id(name) : field_id(name);
      if (id < 0) TVM_FFI_THROW(ValueError) << "VTA runtime: unknown instruction field " << name;
      fmt.fields.push_back(FieldPos{id, name, std::stoi(lsb), std::stoi(width), sgn == "1"});
    }
    out[fmt.name] = fmt;
  }
  return out;
}

// Stages are the API's queue ids (vta_hw.spec.Stage): 1 load, 2 compute, 3 store.
constexpr int LOAD = 1, COMPUTE = 2, STORE = 3;
constexpr int kQueues = 4;   // vta_hw.spec.TOKEN_QUEUES order
const FieldId kFlags[4] = {F_pop_prev_dep, F_pop_next_dep, F_push_prev_dep, F_push_next_dep};

// What vta_hw.spec says about formats, stages and tokens, passed once per queue.
struct Spec {
  Format mem, gemm, alu, uop;
  int queue_of[4][4];          // [stage][flag index] -> token queue, -1 if the stage has no such flag
  int queue_from[kQueues], queue_to[kQueues];
  std::vector<std::string> queue_names;   // l2g, g2l, g2s, s2g
  std::vector<std::string> alu_names;     // by ALU opcode value
  std::vector<int64_t> supported_alu;     // the legal ALU opcodes and LOAD memory types (ISA extensions
  std::vector<int64_t> loadable;          // included when the config enables them)
  // why an ALU opcode / memory type (by value) that an ISA extension defines is refused; "" otherwise
  std::vector<std::string> alu_refusal, load_refusal;

  bool alu_ok(int64_t op) const {
    return std::find(supported_alu.begin(), supported_alu.end(), op) != supported_alu.end();
  }
  bool load_ok(int64_t mt) const { return std::find(loadable.begin(), loadable.end(), mt) != loadable.end(); }
  static std::string refusal(const std::vector<std::string>& why, int64_t v) {
    return v >= 0 && v < static_cast<int64_t>(why.size()) ? why[v] : std::string();
  }

  const Format& format_of(int64_t opcode) const {
    if (opcode == OP_LOAD || opcode == OP_STORE) return mem;
    if (opcode == OP_ALU) return alu;
    return gemm;   // GEMM and FINISH
  }
  static int stage_of(int64_t opcode, int64_t memory_type) {
    if (opcode == OP_GEMM || opcode == OP_ALU || opcode == OP_FINISH) return COMPUTE;
    if (opcode == OP_STORE) return STORE;
    if (opcode == OP_LOAD) {
      if (memory_type == MEM_INP || memory_type == MEM_WGT) return LOAD;
      if (memory_type == MEM_UOP || memory_type == MEM_ACC || memory_type == MEM_ACC_8BIT) return COMPUTE;
    }
    return 0;
  }
  int queue_between(int from, int to) const {
    for (int q = 0; q < kQueues; ++q)
      if (queue_from[q] == from && queue_to[q] == to) return q;
    return -1;
  }
};

// ------------------------------------------------------------------ the instruction queue
// Instructions stay field values until the stream is encoded, because dependency pushes are
// merged into the last instruction after it was created.
class InsnQueue {
 public:
  explicit InsnQueue(std::shared_ptr<const Spec> spec) : spec_(std::move(spec)) { reset(); }

  std::vector<Insn> insns;
  int pending_pop_prev[4], pending_pop_next[4];   // by stage
  int64_t balance[kQueues];                         // pushes minus pops of committed instructions

  const Spec& spec() const { return *spec_; }
  size_t size() const { return insns.size(); }

  void reset() {
    insns.clear();
    for (int s = 0; s < 4; ++s) pending_pop_prev[s] = pending_pop_next[s] = 0;
    for (int64_t& b : balance) b = 0;
  }

  static int stage(const Insn& i) { return Spec::stage_of(i[F_opcode], i[F_memory_type]); }

  // Stage for merging a push: a LOAD NOP (x_size 0) and FINISH count as no stage (the original's rule).
  static int push_stage(const Insn& i) {
    if (i[F_opcode] == OP_LOAD && i[F_x_size] == 0) return 0;
    if (i[F_opcode] == OP_FINISH) return 0;
    return stage(i);
  }

  void account(const Insn& i) {
    int st = stage(i);
    if (st == 0) return;
    for (int f = 0; f < 4; ++f) {
      int q = spec_->queue_of[st][f];
      if (i[kFlags[f]] && q >= 0) balance[q] += f >= 2 ? 1 : -1;
    }
  }

  // Append an instruction for `stage`; it takes over the stage's pending pops.
  Insn& create(int st, Insn insn) {
    insn[F_pop_prev_dep] = pending_pop_prev[st];
    insn[F_pop_next_dep] = pending_pop_next[st];
    insn[F_push_prev_dep] = 0;
    insn[F_push_next_dep] = 0;
    pending_pop_prev[st] = pending_pop_next[st] = 0;
    insns.push_back(insn);
    account(insns.back());
    return insns.back();
  }

  void mem(int64_t opcode, int64_t memory_type, int64_t sram_base, int64_t dram_base, int64_t y_size,
           int64_t x_size, int64_t x_stride, int64_t y_pad_0, int64_t y_pad_1, int64_t x_pad_0, int64_t x_pad_1) {
    Insn i;
    i[F_opcode] = opcode;
    i[F_memory_type] = memory_type;
    i[F_sram_base] = sram_base;
    i[F_dram_base] = dram_base;
    i[F_y_size] = y_size;
    i[F_x_size] = x_size;
    i[F_x_stride] = x_stride;
    i[F_y_pad_0] = y_pad_0;
    i[F_y_pad_1] = y_pad_1;
    i[F_x_pad_0] = x_pad_0;
    i[F_x_pad_1] = x_pad_1;
    create(Spec::stage_of(opcode, memory_type), i);
  }

  void noop(int st, int push_prev, int push_next, int pop_prev, int pop_next) {
    Insn i;
    if (st == LOAD) {
      i[F_opcode] = OP_LOAD;
      i[F_memory_type] = MEM_INP;
    } else if (st == COMPUTE) {
      i[F_opcode] = OP_LOAD;
      i[F_memory_type] = MEM_UOP;
    } else {
      i[F_opcode] = OP_STORE;
      i[F_memory_type] = MEM_UOP;
    }
    i[F_pop_prev_dep] = pop_prev;
    i[F_pop_next_dep] = pop_next;
    i[F_push_prev_dep] = push_prev;
    i[F_push_next_dep] = push_next;
    insns.push_back(i);
    account(insns.back());
  }

  void commit_pending_pop(int st) {
    if (pending_pop_prev[st] || pending_pop_next[st]) {
      noop(st, 0, 0, pending_pop_prev[st], pending_pop_next[st]);
      pending_pop_prev[st] = pending_pop_next[st] = 0;
    }
  }

  int checked_queue(int from, int to) const {
    int q = (from >= LOAD && from <= STORE && to >= LOAD && to <= STORE) ? spec_->queue_between(from, to) : -1;
    if (q < 0) TVM_FFI_THROW(ValueError) << "there is no dependency queue from stage " << from << " to stage " << to;
    return q;
  }

  // The next instruction of `to` waits for a token from `from`.
  void dep_pop(int from, int to) {
    checked_queue(from, to);
    int* pending = from < to ? pending_pop_prev : pending_pop_next;
    if (pending[to]) commit_pending_pop(to);
    pending[to] = 1;
  }

  // The last instruction of `from` (or a NOP) pushes a token to `to`.
  void dep_push(int from, int to) {
    int q = checked_queue(from, to);
    commit_pending_pop(from);
    FieldId flag = from < to ? F_push_next_dep : F_push_prev_dep;
    if (!insns.empty()) {
      Insn& last = insns.back();
      if (push_stage(last) == from && !last[flag]) {
        last[flag] = 1;
        balance[q] += 1;
        return;
      }
    }
    if (from < to)
      noop(from, 0, 1, 0, 0);
    else
      noop(from, 1, 0, 0, 0);
  }

  // Make execution strictly sequential: drop NOPs and all flags, then chain every stage change.
  // Load and store have no queue between them, so a compute NOP relays that ordering.
  void rewrite_force_serial() {
    std::vector<Insn> work;
    for (const Insn& i : insns)
      if (!((i[F_opcode] == OP_LOAD || i[F_opcode] == OP_STORE) && i[F_x_size] == 0)) work.push_back(i);
    reset();
    for (Insn& i : work)
      for (FieldId f : kFlags) i[f] = 0;
    int prev = 0;
    for (Insn& i : work) {
      int now = stage(i);
      if (prev && prev != now) {
        if ((prev == LOAD && now == STORE) || (prev == STORE && now == LOAD)) {
          chain(prev, COMPUTE, nullptr, 0);
          noop(COMPUTE, 0, 0, 0, 0);
          chain(COMPUTE, now, &i, prev);
        } else {
          chain(prev, now, &i, 0);
        }
      }
      insns.push_back(i);
      prev = now;
    }
    if (prev && prev != COMPUTE) {
      chain(prev, COMPUTE, nullptr, 0);
      noop(COMPUTE, 0, 0, 0, 0);
      set_pop(insns.back(), prev, COMPUTE);
    }
    for (int64_t& b : balance) b = 0;
    for (const Insn& i : insns) account(i);
  }

  // The stream's bytes; a field that does not fit is a RuntimeUsageError naming the instruction.
  std::string encode() const {
    std::string out(insns.size() * 16, '\0');
    for (size_t k = 0; k < insns.size(); ++k) {
      uint64_t w[2];
      std::string error;
      if (!spec_->format_of(insns[k][F_opcode]).encode(insns[k].v, w, &error))
        VTA_THROW("instruction " << k << ": " << error);
      std::memcpy(&out[k * 16], w, 16);
    }
    return out;
  }

 private:
  std::shared_ptr<const Spec> spec_;

  void chain(int src, int dst, Insn* next, int relay_pop) {   // last pushes src->dst; `next` pops it
    Insn& last = insns.back();
    last[src < dst ? F_push_next_dep : F_push_prev_dep] = 1;
    if (relay_pop) set_pop(last, relay_pop, src);   // the relay NOP itself pops from the stage before it
    if (next) set_pop(*next, src, dst);
  }
  static void set_pop(Insn& i, int src, int dst) { i[src < dst ? F_pop_prev_dep : F_pop_next_dep] = 1; }
};

// ------------------------------------------------------------------ uop kernels
constexpr int MODE_GEMM = 0, MODE_ALU = 1, MAX_UOP_LOOPS = 2;

struct Kernel {
  int mode = -1;   // none yet
  int64_t reset = 0, opcode = 0, use_imm = 0, imm = 0;
  std::vector<std::array<int64_t, 3>> uops;            // dst, src, wgt
  std::vector<std::array<int64_t, 4>> loops;           // extent, dst, src, wgt factors
  int open_loops = 0;
  std::vector<uint32_t> words;
  int64_t sram_begin = 0, sram_end = 0;

  bool resident() const { return sram_end > sram_begin; }

  void loop_begin(int64_t extent, int64_t dst, int64_t src, int64_t wgt) {
    if (!uops.empty()) VTA_THROW("uop_loop_begin must come before the first uop_push of a kernel");
    if (loops.size() == MAX_UOP_LOOPS) VTA_THROW("a uop kernel has at most " << MAX_UOP_LOOPS << " loops");
    if (extent < 1) VTA_THROW("uop loop extent " << extent << " must be at least 1");
    loops.push_back({extent, dst, src, wgt});
    ++open_loops;
  }

  void loop_end() {
    if (open_loops == 0) VTA_THROW("uop_loop_end without a matching uop_loop_begin");
    --open_loops;
  }

  void push(const Spec& spec, int64_t m, int64_t r, int64_t dst, int64_t src, int64_t wgt, int64_t op, int64_t ui,
            int64_t im) {
    r = r != 0;
    ui = ui != 0;
    if (m != MODE_GEMM && m != MODE_ALU) VTA_THROW("uop_push mode " << m << " must be 0 (GEMM) or 1 (ALU)");
    if (mode < 0) {
      if (m == MODE_ALU && !spec.alu_ok(op)) {
        std::string name = op >= 0 && op < static_cast<int64_t>(spec.alu_names.size()) ? spec.alu_names[op]
                                                                                         : std::to_string(op);
        std::string why = Spec::refusal(spec.alu_refusal, op);
        std::ostringstream legal;
        for (int64_t a : spec.supported_alu) legal << (legal.tellp() > 0 ? ", " : "") << spec.alu_names[a];
        if (!why.empty()) VTA_THROW("ALU opcode " << why << " (" << legal.str() << " are)");
        VTA_THROW("ALU opcode " << name << " is not supported (" << legal.str() << " are)");
      }
      mode = static_cast<int>(m);
      reset = r;
      opcode = op;
      use_imm = ui;
      imm = im;
    } else {
      if (m != mode || r != reset)
        VTA_THROW("uop " << uops.size() << " has mode=" << m << " reset=" << r << " but the kernel has mode="
                         << mode << " reset=" << reset << ": every uop of a kernel must agree");
      if (m == MODE_ALU && (op != opcode || ui != use_imm || im != imm))
        VTA_THROW("uop " << uops.size() << " has ALU opcode=" << op << " use_imm=" << ui << " imm=" << im
                         << " but the kernel has opcode=" << opcode << " use_imm=" << use_imm << " imm=" << imm
                         << ": every uop of a kernel must agree");
    }
    uops.push_back({dst, src, m == MODE_GEMM ? wgt : 0});
  }

  void finish(const Spec& spec) {
    if (open_loops) VTA_THROW("uop kernel ends with " << open_loops << " uop loop(s) still open");
    if (uops.empty()) VTA_THROW("a uop kernel must push at least one uop");
    words.clear();
    for (size_t k = 0; k < uops.size(); ++k) {
      uint64_t w[2];
      std::string error;
      if (!spec.uop.encode(uops[k].data(), w, &error)) VTA_THROW("uop " << k << ": " << error);
      words.push_back(static_cast<uint32_t>(w[0]));
    }
  }

  // iter/factor fields: GEMM maps one loop to the outer level, ALU to the inner one (spec 4.4).
  void loop_fields(Insn& i) const {
    std::array<std::array<int64_t, 4>, MAX_UOP_LOOPS> l;
    l.fill({1, 0, 0, 0});
    const size_t at = loops.size() == 1 && mode == MODE_ALU ? 1 : 0;   // ALU: a single loop is the inner one
    for (size_t k = 0; k < loops.size(); ++k) l[at + k] = loops[k];
    i[F_iter_out] = l[0][0];
    i[F_dst_factor_out] = l[0][1];
    i[F_src_factor_out] = l[0][2];
    i[F_iter_in] = l[1][0];
    i[F_dst_factor_in] = l[1][1];
    i[F_src_factor_in] = l[1][2];
    if (mode == MODE_GEMM) {
      i[F_wgt_factor_out] = l[0][3];
      i[F_wgt_factor_in] = l[1][3];
    }
  }
};

// Where kernels sit in the UOP SRAM during one stream; placement wraps and evicts (spec 4.4).
class Residency {
 public:
  explicit Residency(int64_t depth) : depth_(depth) {}

  void reset() {
    for (Kernel* k : resident_) k->sram_begin = k->sram_end = 0;
    resident_.clear();
    end_ = 0;
  }

  // Give `k` an SRAM range; true if it must be loaded (it was not resident).
  bool place(Kernel* k) {
    if (k->resident()) return false;
    int64_t n = static_cast<int64_t>(k->uops.size());
    if (n > depth_) VTA_THROW("a uop kernel of " << n << " uops does not fit the UOP buffer (" << depth_ << " uops)");
    if (end_ + n > depth_) end_ = 0;
    int64_t begin = end_, end = end_ + n;
    auto overlapped = [&](Kernel* r) {   // evicted
      if (!(r->sram_begin < end && begin < r->sram_end)) return false;
      r->sram_begin = r->sram_end = 0;
      return true;
    };
    resident_.erase(std::remove_if(resident_.begin(), resident_.end(), overlapped), resident_.end());
    resident_.push_back(k);
    k->sram_begin = begin;
    k->sram_end = end;
    end_ = end;
    return true;
  }

  // A kernel is about to be destroyed: forget it.
  void forget(Kernel* k) { resident_.erase(std::remove(resident_.begin(), resident_.end(), k), resident_.end()); }

 private:
  int64_t depth_, end_ = 0;
  std::vector<Kernel*> resident_;
};

// ------------------------------------------------------------------ the command queue
// A kernel's cache key: (kind, id, signature). Kind 0: a compiled call site's static handle
// (id written into the handle on first use); kind 1: a Python key (the Python side numbers
// (key, signature) pairs and names them for messages); kind 2: a plain integer handle.
struct Key {
  int64_t kind, id, sig;
  bool operator==(const Key& o) const { return kind == o.kind && id == o.id && sig == o.sig; }
};
struct KeyHash {
  size_t operator()(const Key& k) const {
    return std::hash<int64_t>()(k.kind * 1000003 + k.id * 7919 + k.sig);
  }
};

constexpr int64_t DEBUG_DUMP_INSN = 1 << 1, DEBUG_DUMP_UOP = 1 << 2, DEBUG_FORCE_SERIAL = 1 << 5;
constexpr int kSyncReserve = 6;   // instructions the closing sequence of a flush may add (drain NOPs excluded)

struct Callbacks {
  ffi::Function run;          // run(stream: bytes, uops: bytes, count, timeout, debug_flags)
  ffi::Function alloc_uops;   // alloc_uops(nbytes) -> phys of the uop staging buffer
  ffi::Function window;       // window() -> [host base, size, device name]
  ffi::Function write;        // write(text): debug output
};

// ------------------------------------------------------------------ the command-stream cache
// A compiled kernel's streams, built once and replayed while its buffers do not change. The key is
// everything the host code's stream building reads: the call site (a static handle, numbered like uop
// kernel handles), every argument (buffer addresses with their sizes, scalars), the debug flags, and the
// queue's state at entry, which must be empty (no instruction, pending pop, token, uop kernel being
// recorded or staged uop), so that the uop kernels' residency in the UOP SRAM starts from nothing as it
// does after every synchronize. The configuration is the queue's own (one cache per queue); the uop
// staging buffer's address is checked at replay. Host code that does anything but call the stream
// functions is never cached (the compiler's InjectStreamCache only wraps kernels whose host code is
// nothing else). A replay hands the device the very streams a fresh build wrote.
struct StreamRun {
  ffi::Bytes stream, uops;
  int64_t count;
  double timeout;
  int64_t flags;
};

struct StreamKey {
  int64_t site, flags;
  std::vector<int64_t> args;   // (kind, value) pairs: 0 data pointer, 1 integer, 2 float bits, 3 buffer size
  bool operator==(const StreamKey& o) const { return site == o.site && flags == o.flags && args == o.args; }
};
struct StreamKeyHash {
  size_t operator()(const StreamKey& k) const {
    uint64_t h = static_cast<uint64_t>(k.site) * 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(k.flags);
    for (int64_t v : k.args) h = (h ^ static_cast<uint64_t>(v)) * 0x100000001B3ull;
    return static_cast<size_t>(h);
  }
};

struct StreamEntry {
  std::vector<StreamRun> runs;
  std::vector<std::pair<int64_t, int64_t>> buffers;   // (physical address, bytes) of the device buffers it uses
  int64_t uop_base = 0;                               // the uop staging buffer the streams load from (0: none yet)
  size_t bytes = 0;
  uint64_t used = 0;                                  // LRU clock
};

struct StreamStats {
  int64_t replays = 0, builds = 0, uncached = 0, dropped = 0, evicted = 0;
};

class Queue {
 public:
  Queue(std::shared_ptr<const Spec> spec, int64_t max_insns, int64_t uop_capacity, int64_t uop_depth,
        std::array<int64_t, 6> elem_bytes, Callbacks cb)
      : q(spec), spec_(std::move(spec)), max_insns_(max_insns), uop_capacity_(uop_capacity), residency_(uop_depth),
        elem_bytes_(elem_bytes), cb_(std::move(cb)) {}

  InsnQueue q;
  int64_t debug_flags = 0;

  // Debug flags change the stream (FORCE_SERIAL) or what building it prints (DUMP_UOP): a change while a
  // kernel's stream is being recorded makes that recording unusable.
  void set_debug(int64_t flags) {
    if (flags != debug_flags) stream_rec_.reset();
    debug_flags = flags;
  }

  // ---------------------------------------------------------------- DMA
  int64_t dram_base(int64_t phys, int64_t elem_offset, int64_t memory_type, const char* what) const {
    int64_t eb = elem_bytes_[memory_type];
    if (phys % eb) {
      std::ostringstream hex;
      hex << std::hex << phys;
      VTA_THROW(what << ": buffer address 0x" << hex.str() << " is not aligned to the " << eb << "-byte element");
    }
    return phys / eb + elem_offset;
  }

  void load_2d(int64_t phys, int64_t off, int64_t xs, int64_t ys, int64_t st, int64_t xp0, int64_t yp0,
               int64_t xp1, int64_t yp1, int64_t sram, int64_t mt) {
    if (!spec_->load_ok(mt)) {
      std::string why = Spec::refusal(spec_->load_refusal, mt);
      std::ostringstream legal;
      for (int64_t t : spec_->loadable) legal << (legal.tellp() > 0 ? ", " : "") << t;
      VTA_THROW("load_buffer_2d: memory type " << mt << " cannot be loaded"
                                               << (why.empty() ? "" : ": ") << why << "; the loadable types are "
                                               << legal.str() << " (UOP " << MEM_UOP << ", WGT " << MEM_WGT
                                               << ", INP " << MEM_INP << ", ACC " << MEM_ACC
                                               << (spec_->load_ok(MEM_ACC_8BIT) ? ", ACC_8BIT 5" : "") << ")");
    }
    reserve(1);
    q.mem(OP_LOAD, mt, sram, dram_base(phys, off, mt, "load_buffer_2d"), ys, xs, st, yp0, yp1, xp0, xp1);
  }

  void store_2d(int64_t sram, int64_t mt, int64_t phys, int64_t off, int64_t xs, int64_t ys, int64_t st) {
    if (mt != MEM_OUT)
      VTA_THROW("store_buffer_2d: only the OUT buffer (" << MEM_OUT << ") can be stored, got " << mt);
    reserve(1);
    q.mem(OP_STORE, MEM_OUT, sram, dram_base(phys, off, MEM_OUT, "store_buffer_2d"), ys, xs, st, 0, 0, 0, 0);
  }

  // Host address -> physical address, for data pointers that compiled code passes.
  int64_t host_to_phys(uint64_t addr) {
    window();
    uint64_t phys = addr - window_->base;
    if (!(addr > window_->base && phys < window_->size)) {
      std::ostringstream os;
      os << std::hex << "host address 0x" << addr << " is not device memory of the current VTA device "
         << window_->device << " (window 0x" << window_->base << "+0x" << window_->size
         << "); was the tensor allocated on another device or on the CPU?";
      VTA_THROW(os.str());
    }
    return static_cast<int64_t>(phys);
  }

  // ---------------------------------------------------------------- uop kernels
  bool kernel_begin(const Key& key) {
    if (recording_) VTA_THROW("uop_kernel_begin while another uop kernel is being recorded");
    if (kernels_.count(key)) return false;
    recording_.emplace(key, std::make_unique<Kernel>());
    return true;
  }
  bool is_cached(const Key& key) const { return kernels_.count(key) != 0; }
  bool is_recording(const Key& key) const { return recording_ && recording_->first == key; }
  void abort_recording() { recording_.reset(); }

  Kernel& recording() {
    if (!recording_)
      VTA_THROW("uop_push/uop_loop_* outside a uop kernel (call push_gemm_op/push_alu_op with a kernel function, "
                "or uop_kernel_begin first)");
    return *recording_->second;
  }
  void loop_begin(int64_t e, int64_t d, int64_t s, int64_t w) { recording().loop_begin(e, d, s, w); }
  void loop_end() { recording().loop_end(); }
  void uop_push(int64_t m, int64_t r, int64_t d, int64_t s, int64_t w, int64_t op, int64_t ui, int64_t im) {
    recording().push(*spec_, m, r, d, s, w, op, ui, im);
  }

  // Append a GEMM (mode 0) or ALU op (mode 1) running the kernel cached under `key`,
  // finishing it first if it is the one being recorded.
  void push_kernel(const Key& key, int mode) {
    Kernel* k = get_kernel(key, mode);
    if (staged_uops_ + static_cast<int64_t>(k->uops.size()) > uop_capacity_) auto_flush();
    reserve(2);
    if (residency_.place(k)) {
      int64_t base = uop_staging() / elem_bytes_[MEM_UOP];
      int64_t n = static_cast<int64_t>(k->uops.size());
      q.mem(OP_LOAD, MEM_UOP, k->sram_begin, base + staged_uops_, 1, n, n, 0, 0, 0, 0);
      staging_.insert(staging_.end(), k->words.begin(), k->words.end());
      staged_uops_ += n;
    }
    Insn i;
    i[F_opcode] = mode == MODE_GEMM ? OP_GEMM : OP_ALU;
    i[F_reset_reg] = k->reset;
    i[F_uop_bgn] = k->sram_begin;
    i[F_uop_end] = k->sram_end;
    k->loop_fields(i);
    if (mode == MODE_ALU) {
      i[F_alu_opcode] = k->opcode;
      i[F_use_imm] = k->use_imm;
      i[F_imm] = k->imm;
    }
    q.create(COMPUTE, i);
  }

  void name_key(const Key& key, std::string key_repr, std::string sig_repr) {
    names_[key] = {std::move(key_repr), std::move(sig_repr)};
  }

  std::vector<Key> kernel_keys() const { return order_; }

  // ---------------------------------------------------------------- dependencies
  void dep_push(int64_t from, int64_t to) {
    reserve(1);
    check_qids("dep_push", from, to);
    q.dep_push(static_cast<int>(from), static_cast<int>(to));
  }
  void dep_pop(int64_t from, int64_t to) {
    reserve(1);
    check_qids("dep_pop", from, to);
    q.dep_pop(static_cast<int>(from), static_cast<int>(to));
  }

  // ---------------------------------------------------------------- streams
  // Close the stream (FINISH), hand it to Python to run, and reset the queues.
  void synchronize(double timeout, bool settled = false) {
    if (recording_) VTA_THROW("synchronize while a uop kernel is being recorded");
    if (debug_flags & DEBUG_FORCE_SERIAL) {
      q.rewrite_force_serial();
    } else {
      if (!settled) settle_tokens("synchronize");
      q.dep_push(STORE, COMPUTE);
      q.dep_push(LOAD, COMPUTE);
      q.dep_pop(STORE, COMPUTE);
      q.dep_pop(LOAD, COMPUTE);
      q.commit_pending_pop(COMPUTE);
    }
    Insn finish;
    finish[F_opcode] = OP_FINISH;
    q.create(COMPUTE, finish);
    std::string stream = q.encode();
    std::string uops(reinterpret_cast<const char*>(staging_.data()), staging_.size() * sizeof(uint32_t));
    int64_t count = static_cast<int64_t>(q.size());
    ffi::Bytes stream_bytes(stream), uop_bytes(uops);
    if (stream_rec_) stream_rec_->second.runs.push_back({stream_bytes, uop_bytes, count, timeout, debug_flags});
    try {
      cb_.run(stream_bytes, uop_bytes, count, timeout, debug_flags);
    } catch (...) {
      stream_rec_.reset();
      after_run();
      throw;
    }
    after_run();
  }

  // ---------------------------------------------------------------- the command-stream cache
  // A compiled kernel starts: replay its cached streams (true), or record what it builds now (false).
  // `args` are (kind, value) pairs (see StreamKey); `buffers` the device buffers among them.
  bool stream_begin(int64_t site, std::vector<int64_t> args, std::vector<std::pair<int64_t, int64_t>> buffers) {
    stream_rec_.reset();   // a recording still open here belongs to a kernel that failed: drop it
    if (!stream_cache_ || (debug_flags & DEBUG_DUMP_UOP) || !clean()) {
      ++stream_stats_.uncached;
      return false;
    }
    StreamKey key{site, debug_flags, std::move(args)};
    auto it = streams_.find(key);
    if (it != streams_.end()) {
      StreamEntry& e = it->second;
      if (e.uop_base == 0 || (uop_buf_ && e.uop_base == *uop_buf_)) {
        e.used = ++stream_clock_;
        ++stream_stats_.replays;
        for (const StreamRun& r : e.runs) {
          try {
            cb_.run(r.stream, r.uops, r.count, r.timeout, r.flags);
          } catch (...) {
            after_run();
            throw;
          }
          after_run();
        }
        return true;
      }
      drop(it);
    }
    StreamEntry e;
    e.buffers = std::move(buffers);
    stream_rec_.emplace(std::move(key), std::move(e));
    return false;
  }

  // The kernel's host code is done: keep what it ran if the queue is as empty as it was at the start.
  void stream_end(int64_t site) {
    if (!stream_rec_ || stream_rec_->first.site != site || !clean() || stream_rec_->second.runs.empty()) {
      stream_rec_.reset();
      return;
    }
    StreamEntry& e = stream_rec_->second;
    for (const StreamRun& r : e.runs) {
      e.bytes += r.stream.size() + r.uops.size();
      if (r.uops.size()) e.uop_base = uop_buf_.value_or(0);
    }
    e.used = ++stream_clock_;
    stream_bytes_ += e.bytes;
    ++stream_stats_.builds;
    streams_[stream_rec_->first] = std::move(e);
    stream_rec_.reset();
    while (stream_bytes_ > stream_budget_ && streams_.size() > 1) {
      auto oldest = streams_.begin();
      for (auto i = streams_.begin(); i != streams_.end(); ++i)
        if (i->second.used < oldest->second.used) oldest = i;
      drop(oldest);
      ++stream_stats_.evicted;
    }
  }

  // Device memory [phys, phys + nbytes) is freed: forget the streams that use it.
  void stream_invalidate(int64_t phys, int64_t nbytes) {
    for (auto it = streams_.begin(); it != streams_.end();) {
      bool hit = false;
      for (const auto& b : it->second.buffers)
        hit |= b.first < phys + std::max<int64_t>(nbytes, 1) && phys < b.first + std::max<int64_t>(b.second, 1);
      if (hit) {
        ++stream_stats_.dropped;
        it = drop(it);
      } else {
        ++it;
      }
    }
  }

  void stream_clear() {
    stream_stats_.dropped += static_cast<int64_t>(streams_.size());
    streams_.clear();
    stream_bytes_ = 0;
    stream_rec_.reset();
  }

  void set_stream_cache(bool on, int64_t budget) {
    stream_cache_ = on;
    stream_budget_ = static_cast<size_t>(budget);
    if (!on) stream_clear();
  }

  std::vector<int64_t> stream_stats() const {
    return {stream_stats_.replays, stream_stats_.builds, stream_stats_.uncached, stream_stats_.dropped,
            stream_stats_.evicted, static_cast<int64_t>(streams_.size()), static_cast<int64_t>(stream_bytes_)};
  }

  // Whether a host address is device memory of this queue's device; its physical address in *phys.
  bool try_host_to_phys(uint64_t addr, int64_t* phys) {
    window();
    uint64_t p = addr - window_->base;
    if (!(addr > window_->base && p < window_->size)) return false;
    *phys = static_cast<int64_t>(p);
    return true;
  }

 private:
  struct Window {
    uint64_t base, size;
    std::string device;
  };

  std::shared_ptr<const Spec> spec_;
  int64_t max_insns_, uop_capacity_;
  Residency residency_;
  std::array<int64_t, 6> elem_bytes_;
  Callbacks cb_;
  std::unordered_map<Key, std::unique_ptr<Kernel>, KeyHash> kernels_;
  std::vector<Key> order_;   // kernels in the order they were recorded
  std::unordered_map<Key, std::pair<std::string, std::string>, KeyHash> names_;
  std::optional<std::pair<Key, std::unique_ptr<Kernel>>> recording_;
  std::vector<uint32_t> staging_;
  int64_t staged_uops_ = 0;
  std::optional<int64_t> uop_buf_;
  std::optional<Window> window_;
  std::unordered_map<StreamKey, StreamEntry, StreamKeyHash> streams_;
  std::optional<std::pair<StreamKey, StreamEntry>> stream_rec_;   // the kernel whose streams are being recorded
  bool stream_cache_ = true;
  size_t stream_bytes_ = 0, stream_budget_ = size_t{256} << 20;
  uint64_t stream_clock_ = 0;
  StreamStats stream_stats_;

  void window() {
    if (!window_) {
      ffi::Array<ffi::Any> w = cb_.window().cast<ffi::Array<ffi::Any>>();
      window_ = Window{static_cast<uint64_t>(w[0].cast<int64_t>()), static_cast<uint64_t>(w[1].cast<int64_t>()),
                       w[2].cast<ffi::String>()};
    }
  }

  // Nothing queued, pending, in flight, being recorded or staged: the state after a synchronize.
  bool clean() const {
    if (q.size() || recording_ || staged_uops_) return false;
    for (int s = 0; s < 4; ++s)
      if (q.pending_pop_prev[s] || q.pending_pop_next[s]) return false;
    for (int64_t b : q.balance)
      if (b) return false;
    return true;
  }

  std::unordered_map<StreamKey, StreamEntry, StreamKeyHash>::iterator drop(
      std::unordered_map<StreamKey, StreamEntry, StreamKeyHash>::iterator it) {
    stream_bytes_ -= it->second.bytes;
    return streams_.erase(it);
  }

  std::string key_repr(const Key& k) const {
    auto it = names_.find(k);
    if (it != names_.end()) return it->second.first;
    if (k.kind == 0) return "('static', " + std::to_string(k.id) + ")";
    return std::to_string(k.id);
  }
  std::string sig_repr(const Key& k) const {
    auto it = names_.find(k);
    return it != names_.end() ? it->second.second : std::to_string(k.sig);
  }

  Kernel* get_kernel(const Key& key, int mode) {
    Kernel* k;
    if (recording_ && recording_->first == key) {
      std::unique_ptr<Kernel> rec = std::move(recording_->second);
      recording_.reset();
      rec->finish(*spec_);
      k = rec.get();
      kernels_[key] = std::move(rec);
      order_.push_back(key);
    } else {
      auto it = kernels_.find(key);
      if (it == kernels_.end())
        VTA_THROW("uop kernel " << key_repr(key) << " (signature " << sig_repr(key)
                                << ") is not cached and no kernel function was given to record it");
      k = it->second.get();
    }
    if (k->mode != mode)
      VTA_THROW("uop kernel " << key_repr(key) << " was recorded in mode " << k->mode << " but pushed as "
                              << (mode == MODE_GEMM ? "GEMM" : "ALU"));
    if (debug_flags & DEBUG_DUMP_UOP) dump_kernel(key, *k);
    return k;
  }

  void dump_kernel(const Key& key, const Kernel& k) {
    std::ostringstream os;
    os << "uop kernel " << key_repr(key) << ": ";
    if (k.mode == MODE_GEMM)
      os << "GEMM";
    else
      os << "ALU op=" << k.opcode << " use_imm=" << k.use_imm << " imm=" << k.imm;
    os << " reset=" << k.reset << " loops=[";
    for (size_t n = 0; n < k.loops.size(); ++n)
      os << (n ? ", " : "") << "(" << k.loops[n][0] << ", " << k.loops[n][1] << ", " << k.loops[n][2] << ", "
         << k.loops[n][3] << ")";
    os << "] (" << k.uops.size() << " uops)\n";
    for (size_t n = 0; n < k.uops.size(); ++n) {
      char num[16];
      std::snprintf(num, sizeof(num), "%4zu", n);
      os << "  uop " << num << ": dst=" << k.uops[n][0] << " src=" << k.uops[n][1] << " wgt=" << k.uops[n][2] << "\n";
    }
    cb_.write(ffi::String(os.str()));
  }

  int64_t uop_staging() {
    if (!uop_buf_) uop_buf_ = cb_.alloc_uops(uop_capacity_ * elem_bytes_[MEM_UOP]).cast<int64_t>();
    return *uop_buf_;
  }

  void check_qids(const char* what, int64_t a, int64_t b) const {
    bool ok = a >= LOAD && a <= STORE && b >= LOAD && b <= STORE &&
              spec_->queue_between(static_cast<int>(a), static_cast<int>(b)) >= 0;
    if (!ok)
      VTA_THROW(what << "(" << a << ", " << b << "): there is no dependency queue between these stages (1 load, 2 "
                     << "compute, 3 store; load and store are not connected)");
  }

  void reserve(int64_t n) {
    int64_t in_flight = 0;
    for (int64_t b : q.balance) in_flight += b > 0 ? b : 0;
    if (static_cast<int64_t>(q.size()) + n + kSyncReserve + in_flight > max_insns_) auto_flush();
  }

  // Run what is queued so far; tokens still in flight are drained now and re-pushed afterwards.
  void auto_flush() {
    std::array<int64_t, kQueues> carry = settle_tokens("automatic flush impossible");
    synchronize(-1.0, true);
    for (int qi = 0; qi < kQueues; ++qi)
      for (int64_t n = 0; n < carry[qi]; ++n) q.dep_push(spec_->queue_from[qi], spec_->queue_to[qi]);
  }

  // Commit pending pops, refuse a stream that pops more than it pushes, and pop (drain) every
  // token still in flight so that the run ends balanced; returns what was drained.
  std::array<int64_t, kQueues> settle_tokens(const char* what) {
    for (int st : {LOAD, COMPUTE, STORE}) q.commit_pending_pop(st);
    std::array<int64_t, kQueues> balance;
    std::copy(std::begin(q.balance), std::end(q.balance), balance.begin());
    std::ostringstream shortfall;
    for (int qi = 0; qi < kQueues; ++qi)
      if (balance[qi] < 0)
        shortfall << (shortfall.tellp() > 0 ? ", " : "") << spec_->queue_names[qi] << " short by " << -balance[qi];
    if (shortfall.tellp() > 0)
      VTA_THROW(what << ": the stream pops more tokens than it pushes, it would deadlock (" << shortfall.str() << ")");
    for (int qi = 0; qi < kQueues; ++qi)
      for (int64_t n = 0; n < balance[qi]; ++n) {
        q.dep_pop(spec_->queue_from[qi], spec_->queue_to[qi]);
        q.commit_pending_pop(spec_->queue_to[qi]);
      }
    return balance;
  }

  void after_run() {
    q.reset();
    residency_.reset();
    staging_.clear();
    staged_uops_ = 0;
  }
};

// ------------------------------------------------------------------ the queue compiled code uses
Queue* g_current = nullptr;

// Device copies of constant host tensors (a compiled network's weights), made once per queue: the Relax VM
// keeps its constants on the CPU, VTA's DMA reads device memory. The native face of
// vta_runtime.tvm_bridge._DeviceConstants (same key, same pinning, same budget), which makes the copies.
class DeviceConstants {
 public:
  ffi::Tensor get(Queue* owner, const ffi::Tensor& src) {
    if (owner != owner_) {
      clear();
      owner_ = owner;
    }
    const DLTensor* t = src.GetDLTensorPtr();
    Key key{reinterpret_cast<uint64_t>(t->data) + t->byte_offset, t->dtype.code, t->dtype.bits, t->dtype.lanes,
            std::vector<int64_t>(t->shape, t->shape + t->ndim)};
    auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.end(), lru_, it->second);   // most recently used last
      return it->second->dst;
    }
    // never destroyed: it holds a Python function, whose release during static destruction (after Python is
    // gone) crashes the process at exit
    static const ffi::Function& make =
        *new ffi::Function(*ffi::Function::GetGlobal("vta.runtime.native.MakeDeviceConstant"));
    ffi::Tensor dst = make(src).cast<ffi::Tensor>();
    size_t size = ffi::GetDataSize(*t);
    lru_.push_back(Entry{key, src, dst, size});
    index_[key] = std::prev(lru_.end());
    bytes_ += size;
    while (bytes_ > budget_ && lru_.size() > 1) {
      bytes_ -= lru_.front().size;
      index_.erase(lru_.front().key);
      lru_.pop_front();
    }
    return dst;
  }
  void clear() {
    index_.clear();
    lru_.clear();
    bytes_ = 0;
    owner_ = nullptr;
  }
  void forget(Queue* q) {
    if (owner_ == q) clear();   // a new queue at the same address must not find this one's copies
  }
  void set_budget(int64_t b) { budget_ = static_cast<size_t>(b); }
  int64_t size() const { return static_cast<int64_t>(lru_.size()); }

 private:
  struct Key {
    uint64_t data;
    int code, bits, lanes;
    std::vector<int64_t> shape;
    bool operator<(const Key& o) const {
      return std::tie(data, code, bits, lanes, shape) < std::tie(o.data, o.code, o.bits, o.lanes, o.shape);
    }
  };
  struct Entry {
    Key key;
    ffi::Tensor src, dst;   // src pinned: its address cannot be reused by another tensor while the entry lives
    size_t size;
  };
  std::list<Entry> lru_;
  std::map<Key, std::list<Entry>::iterator> index_;
  size_t bytes_ = 0, budget_ = size_t{512} << 20;
  Queue* owner_ = nullptr;
};
// never destroyed: its tensors' deleters must not run during static destruction, after Python is gone
DeviceConstants& g_constants = *new DeviceConstants();
int64_t g_next_kernel_id = 1;

Queue* current() {
  if (!g_current) {   // opens the configured device, as vta_runtime.command_handle() does
    auto open = ffi::Function::GetGlobal("vta.runtime.native.OpenCommandHandle");
    if (!open.has_value()) TVM_FFI_THROW(RuntimeError) << "vta_runtime is not loaded in this process";
    (*open)();
    if (!g_current) TVM_FFI_THROW(RuntimeError) << "vta_runtime did not open a command queue";
  }
  return g_current;
}

// A DRAM operand: a data pointer (an opaque handle) is a host address, an integer is physical.
int64_t dram_operand(Queue* q, const ffi::AnyView& a) {
  if (a.type_index() == ffi::TypeIndex::kTVMFFIOpaquePtr)
    return q->host_to_phys(reinterpret_cast<uint64_t>(a.cast<void*>()));
  return a.cast<int64_t>();
}

// The cache key of a kernel handle: a call site's static handle gets an id written into it on
// first use, so a handle of a freed module that is reused starts empty and never finds a stale kernel.
Key handle_key(const ffi::AnyView& h, int64_t sig) {
  if (h.type_index() == ffi::TypeIndex::kTVMFFIOpaquePtr) {
    void** slot = static_cast<void**>(h.cast<void*>());
    if (!slot) VTA_THROW("uop kernel handle is NULL");
    if (!*slot) *slot = reinterpret_cast<void*>(g_next_kernel_id++);
    return Key{0, reinterpret_cast<int64_t>(*slot), sig};
  }
  return Key{2, h.cast<int64_t>(), sig};
}

// A compiled kernel's call site for the command-stream cache: its static handle, numbered on first use.
int64_t stream_site(const ffi::AnyView& h) {
  if (h.type_index() != ffi::TypeIndex::kTVMFFIOpaquePtr) return h.cast<int64_t>();
  void** slot = static_cast<void**>(h.cast<void*>());
  if (!slot) VTA_THROW("stream cache handle is NULL");
  if (!*slot) *slot = reinterpret_cast<void*>(g_next_kernel_id++);
  return reinterpret_cast<int64_t>(*slot);
}

Queue* as_queue(int64_t h) { return reinterpret_cast<Queue*>(h); }

// A tensor's bytes, which must be compact (row-major without gaps).
size_t compact_bytes(const DLTensor* t, const char* what) {
  int64_t expect = 1;
  for (int d = t->ndim - 1; d >= 0; --d) {
    if (t->strides && t->shape[d] != 1 && t->strides[d] != expect)
      VTA_THROW("TensorCopy: the " << what << " tensor is not compact");
    expect *= t->shape[d];
  }
  return ffi::GetDataSize(*t);
}
InsnQueue* as_insns(int64_t h) { return reinterpret_cast<InsnQueue*>(h); }

std::shared_ptr<Spec> make_spec(const ffi::Array<int64_t>& tables, const std::string& formats,
                                const std::string& names) {
  auto spec = std::make_shared<Spec>();
  auto fmts = parse_formats(formats, true);
  for (const char* n : {"memory", "GEMM", "ALU", "uop"})
    if (!fmts.count(n)) TVM_FFI_THROW(ValueError) << "VTA runtime: no " << n << " format";
  spec->mem = fmts["memory"];
  spec->gemm = fmts["GEMM"];
  spec->alu = fmts["ALU"];
  spec->uop = fmts["uop"];
  // tables: queue_of[4][4], queue_from[4], queue_to[4], the number of legal ALU opcodes, those opcodes,
  // then the loadable memory types
  size_t k = 0;
  for (int s = 0; s < 4; ++s)
    for (int f = 0; f < 4; ++f) spec->queue_of[s][f] = static_cast<int>(tables[k++]);
  for (int qi = 0; qi < kQueues; ++qi) spec->queue_from[qi] = static_cast<int>(tables[k++]);
  for (int qi = 0; qi < kQueues; ++qi) spec->queue_to[qi] = static_cast<int>(tables[k++]);
  for (int64_t n = tables[k++]; n > 0; --n) spec->supported_alu.push_back(tables[k++]);
  while (k < tables.size()) spec->loadable.push_back(tables[k++]);
  // names: "l2g,g2l,g2s,s2g|MIN,MAX,ADD,SHR,MUL|<ALU refusals>|<LOAD refusals>", the refusals by value,
  // separated by \x1f
  std::vector<std::string> parts;
  std::stringstream all(names);
  std::string item;
  while (std::getline(all, item, '|')) parts.push_back(item);
  if (parts.size() != 4) TVM_FFI_THROW(ValueError) << "VTA runtime: bad ISA names table";
  auto split = [](const std::string& text, char sep, std::vector<std::string>& out) {
    std::stringstream in(text);
    std::string x;
    while (std::getline(in, x, sep)) out.push_back(x);
  };
  split(parts[0], ',', spec->queue_names);
  split(parts[1], ',', spec->alu_names);
  split(parts[2], '\x1f', spec->alu_refusal);
  split(parts[3], '\x1f', spec->load_refusal);
  return spec;
}

}  // namespace vta_rt

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  using namespace vta_rt;
  using tvm::ffi::AnyView;
  using tvm::ffi::PackedArgs;

  refl::GlobalDef()
      // ---------------------------------------------------------------- queues (vta_runtime/command_queue.py)
      .def("vta.runtime.native.NewQueue",
           [](ffi::Array<int64_t> tables, ffi::String formats, ffi::String names, ffi::Array<int64_t> sizes,
              ffi::Function run, ffi::Function alloc_uops, ffi::Function window, ffi::Function write) -> int64_t {
             // sizes: max_insns, uop_capacity, uop_depth, DRAM element bytes by memory type (6: ACC_8BIT last)
             std::array<int64_t, 6> eb;
             for (int m = 0; m < 6; ++m) eb[m] = sizes[3 + m];
             auto* q = new Queue(make_spec(tables, formats, names), sizes[0], sizes[1], sizes[2], eb,
                                 Callbacks{run, alloc_uops, window, write});
             return reinterpret_cast<int64_t>(q);
           })
      .def("vta.runtime.native.FreeQueue",
           [](int64_t h) {
             if (g_current == as_queue(h)) g_current = nullptr;
             g_constants.forget(as_queue(h));
             delete as_queue(h);
           })
      .def("vta.runtime.native.ClearDeviceConstants", []() { g_constants.clear(); })
      .def("vta.runtime.native.DeviceConstantCount", []() { return g_constants.size(); })
      .def("vta.runtime.native.SetDeviceConstantBudget", [](int64_t b) { g_constants.set_budget(b); })
      .def("vta.runtime.native.SetCurrent", [](int64_t h) { g_current = as_queue(h); })
      .def("vta.runtime.native.Current", []() -> int64_t { return reinterpret_cast<int64_t>(g_current); })
      .def("vta.runtime.native.InsnsOf", [](int64_t h) -> int64_t { return reinterpret_cast<int64_t>(&as_queue(h)->q); })
      .def("vta.runtime.native.Load",
           [](int64_t h, int64_t phys, int64_t off, int64_t xs, int64_t ys, int64_t st, int64_t xp0, int64_t yp0,
              int64_t xp1, int64_t yp1, int64_t sram, int64_t mt) {
             as_queue(h)->load_2d(phys, off, xs, ys, st, xp0, yp0, xp1, yp1, sram, mt);
           })
      .def("vta.runtime.native.Store",
           [](int64_t h, int64_t sram, int64_t mt, int64_t phys, int64_t off, int64_t xs, int64_t ys, int64_t st) {
             as_queue(h)->store_2d(sram, mt, phys, off, xs, ys, st);
           })
      .def("vta.runtime.native.KernelBegin",
           [](int64_t h, int64_t kind, int64_t id, int64_t sig) { return as_queue(h)->kernel_begin({kind, id, sig}); })
      .def("vta.runtime.native.IsCached",
           [](int64_t h, int64_t kind, int64_t id, int64_t sig) { return as_queue(h)->is_cached({kind, id, sig}); })
      .def("vta.runtime.native.IsRecording",
           [](int64_t h, int64_t kind, int64_t id, int64_t sig) {
             return as_queue(h)->is_recording({kind, id, sig});
           })
      .def("vta.runtime.native.AbortRecording", [](int64_t h) { as_queue(h)->abort_recording(); })
      .def("vta.runtime.native.NameKey",
           [](int64_t h, int64_t kind, int64_t id, int64_t sig, ffi::String key, ffi::String signature) {
             as_queue(h)->name_key({kind, id, sig}, key, signature);
           })
      .def("vta.runtime.native.LoopBegin",
           [](int64_t h, int64_t e, int64_t d, int64_t s, int64_t w) { as_queue(h)->loop_begin(e, d, s, w); })
      .def("vta.runtime.native.LoopEnd", [](int64_t h) { as_queue(h)->loop_end(); })
      .def("vta.runtime.native.UopPush",
           [](int64_t h, int64_t m, int64_t r, int64_t d, int64_t s, int64_t w, int64_t op, int64_t ui, int64_t im) {
             as_queue(h)->uop_push(m, r, d, s, w, op, ui, im);
           })
      .def("vta.runtime.native.PushKernel",
           [](int64_t h, int64_t kind, int64_t id, int64_t sig, int64_t mode) {
             as_queue(h)->push_kernel({kind, id, sig}, static_cast<int>(mode));
           })
      .def("vta.runtime.native.KernelKeys",
           [](int64_t h) {
             ffi::Array<int64_t> out;
             for (const Key& k : as_queue(h)->kernel_keys()) {
               out.push_back(k.kind);
               out.push_back(k.id);
               out.push_back(k.sig);
             }
             return out;
           })
      .def("vta.runtime.native.DepPush", [](int64_t h, int64_t a, int64_t b) { as_queue(h)->dep_push(a, b); })
      .def("vta.runtime.native.DepPop", [](int64_t h, int64_t a, int64_t b) { as_queue(h)->dep_pop(a, b); })
      .def("vta.runtime.native.Synchronize", [](int64_t h, double timeout) { as_queue(h)->synchronize(timeout); })
      .def("vta.runtime.native.SetDebug", [](int64_t h, int64_t flags) { as_queue(h)->set_debug(flags); })
      .def("vta.runtime.native.StreamStats",
           [](int64_t h) {   // replays, builds, uncached, dropped, evicted, entries, bytes
             ffi::Array<int64_t> out;
             for (int64_t v : as_queue(h)->stream_stats()) out.push_back(v);
             return out;
           })
      .def("vta.runtime.native.StreamInvalidate",
           [](int64_t h, int64_t phys, int64_t nbytes) { as_queue(h)->stream_invalidate(phys, nbytes); })
      .def("vta.runtime.native.StreamClear", [](int64_t h) { as_queue(h)->stream_clear(); })
      .def("vta.runtime.native.SetStreamCache",
           [](int64_t h, bool on, int64_t budget) { as_queue(h)->set_stream_cache(on, budget); })
      // ---------------------------------------------------------------- instruction queues (vta_runtime/insn_queue.py)
      .def("vta.runtime.native.NewInsnQueue",
           [](ffi::Array<int64_t> tables, ffi::String formats, ffi::String names) -> int64_t {
             return reinterpret_cast<int64_t>(new InsnQueue(make_spec(tables, formats, names)));
           })
      .def("vta.runtime.native.FreeInsnQueue", [](int64_t h) { delete as_insns(h); })
      .def("vta.runtime.native.IQCreate",
           [](int64_t h, int64_t stage, ffi::Map<ffi::String, int64_t> fields) {
             Insn i;
             for (const auto& kv : fields) {
               int id = field_id(std::string(kv.first));
               if (id < 0) TVM_FFI_THROW(ValueError) << "no instruction field named " << std::string(kv.first);
               i.v[id] = kv.second;
             }
             as_insns(h)->create(static_cast<int>(stage), i);
           })
      .def("vta.runtime.native.IQMem",
           [](int64_t h, int64_t op, int64_t mt, int64_t sram, int64_t dram, int64_t y, int64_t x, int64_t st,
              int64_t yp0, int64_t yp1, int64_t xp0, int64_t xp1) {
             as_insns(h)->mem(op, mt, sram, dram, y, x, st, yp0, yp1, xp0, xp1);
           })
      .def("vta.runtime.native.IQNoop",
           [](int64_t h, int64_t stage, int64_t push_prev, int64_t push_next, int64_t pop_prev, int64_t pop_next) {
             as_insns(h)->noop(static_cast<int>(stage), push_prev, push_next, pop_prev, pop_next);
           })
      .def("vta.runtime.native.IQDepPush",
           [](int64_t h, int64_t a, int64_t b) { as_insns(h)->dep_push(static_cast<int>(a), static_cast<int>(b)); })
      .def("vta.runtime.native.IQDepPop",
           [](int64_t h, int64_t a, int64_t b) { as_insns(h)->dep_pop(static_cast<int>(a), static_cast<int>(b)); })
      .def("vta.runtime.native.IQCommitPendingPop",
           [](int64_t h, int64_t stage) { as_insns(h)->commit_pending_pop(static_cast<int>(stage)); })
      .def("vta.runtime.native.IQState",
           [](int64_t h) {   // balance (4), pending_pop_prev (4 stages), pending_pop_next (4 stages)
             InsnQueue* q = as_insns(h);
             ffi::Array<int64_t> out;
             for (int64_t b : q->balance) out.push_back(b);
             for (int s = 0; s < 4; ++s) out.push_back(q->pending_pop_prev[s]);
             for (int s = 0; s < 4; ++s) out.push_back(q->pending_pop_next[s]);
             return out;
           })
      .def("vta.runtime.native.IQInsns",
           [](int64_t h) {   // every field of every instruction, NUM_FIELDS per instruction
             ffi::Array<int64_t> out;
             for (const Insn& i : as_insns(h)->insns)
               for (int f = 0; f < NUM_FIELDS; ++f) out.push_back(i.v[f]);
             return out;
           })
      .def("vta.runtime.native.FieldNames",
           []() {
             ffi::Array<ffi::String> out;
             for (const char* n : kFieldNames) out.push_back(n);
             return out;
           })
      .def("vta.runtime.native.IQLen", [](int64_t h) -> int64_t { return as_insns(h)->size(); })
      .def("vta.runtime.native.IQReset", [](int64_t h) { as_insns(h)->reset(); })
      .def("vta.runtime.native.IQRewriteForceSerial", [](int64_t h) { as_insns(h)->rewrite_force_serial(); })
      .def("vta.runtime.native.IQEncode", [](int64_t h) { return ffi::Bytes(as_insns(h)->encode()); })
      .def("vta.runtime.native.Loaded", []() { return true; });

  // What compiled code calls (tvm_bridge.py). These replace the Python stand-ins that
  // vta_runtime.tvm_bridge registers until this library is loaded.
  auto set = [](const char* name, ffi::Function f) { ffi::Function::SetGlobal(name, f, /*override=*/true); };
  set("vta.runtime.LoadBuffer2D", ffi::Function::FromPacked([](PackedArgs a, ffi::Any*) {
        Queue* q = current();
        q->load_2d(dram_operand(q, a[0]), a[1].cast<int64_t>(), a[2].cast<int64_t>(), a[3].cast<int64_t>(),
                   a[4].cast<int64_t>(), a[5].cast<int64_t>(), a[6].cast<int64_t>(), a[7].cast<int64_t>(),
                   a[8].cast<int64_t>(), a[9].cast<int64_t>(), a[10].cast<int64_t>());
      }));
  set("vta.runtime.StoreBuffer2D", ffi::Function::FromPacked([](PackedArgs a, ffi::Any*) {
        Queue* q = current();
        q->store_2d(a[0].cast<int64_t>(), a[1].cast<int64_t>(), dram_operand(q, a[2]), a[3].cast<int64_t>(),
                    a[4].cast<int64_t>(), a[5].cast<int64_t>(), a[6].cast<int64_t>());
      }));
  set("vta.runtime.UopKernelBegin", ffi::Function::FromPacked([](PackedArgs a, ffi::Any* rv) {
        *rv = static_cast<int64_t>(current()->kernel_begin(handle_key(a[0], a[1].cast<int64_t>())));
      }));
  set("vta.runtime.UopLoopBegin", ffi::Function::FromTyped([](int64_t e, int64_t d, int64_t s, int64_t w) {
        current()->loop_begin(e, d, s, w);
      }));
  set("vta.runtime.UopLoopEnd", ffi::Function::FromTyped([]() { current()->loop_end(); }));
  set("vta.runtime.UopPush",
      ffi::Function::FromTyped([](int64_t m, int64_t r, int64_t d, int64_t s, int64_t w, int64_t op, int64_t ui,
                                  int64_t im) { current()->uop_push(m, r, d, s, w, op, ui, im); }));
  set("vta.runtime.PushGEMMOp", ffi::Function::FromPacked([](PackedArgs a, ffi::Any*) {
        current()->push_kernel(handle_key(a[0], a[1].cast<int64_t>()), MODE_GEMM);
      }));
  set("vta.runtime.PushALUOp", ffi::Function::FromPacked([](PackedArgs a, ffi::Any*) {
        current()->push_kernel(handle_key(a[0], a[1].cast<int64_t>()), MODE_ALU);
      }));
  set("vta.runtime.DepPush", ffi::Function::FromTyped([](int64_t a, int64_t b) { current()->dep_push(a, b); }));
  set("vta.runtime.DepPop", ffi::Function::FromTyped([](int64_t a, int64_t b) { current()->dep_pop(a, b); }));
  set("vta.runtime.Synchronize", ffi::Function::FromPacked([](PackedArgs a, ffi::Any*) {
        double timeout = a[0].cast<double>();
        current()->synchronize(timeout > 0 ? timeout : -1.0);
      }));
  set("vta.runtime.SetDebugMode", ffi::Function::FromTyped([](int64_t flags) { current()->set_debug(flags); }));
  // StreamBegin(site, args...): each buffer is its data pointer followed by its size in bytes, each scalar
  // its value (vta_compiler/transform/sync.py writes the call). 1: the cached streams were replayed.
  set("vta.runtime.StreamBegin", ffi::Function::FromPacked([](PackedArgs a, ffi::Any* rv) {
        Queue* q = current();
        int64_t site = stream_site(a[0]);
        std::vector<int64_t> args;
        std::vector<std::pair<int64_t, int64_t>> buffers;
        args.reserve(2 * a.size());
        for (int i = 1; i < a.size(); ++i) {
          int32_t t = a[i].type_index();
          if (t == ffi::TypeIndex::kTVMFFIOpaquePtr || t == ffi::TypeIndex::kTVMFFINone) {
            uint64_t ptr = t == ffi::TypeIndex::kTVMFFINone ? 0 : reinterpret_cast<uint64_t>(a[i].cast<void*>());
            int64_t nbytes = i + 1 < a.size() ? a[i + 1].cast<int64_t>() : 0;
            ++i;
            args.insert(args.end(), {0, static_cast<int64_t>(ptr), 3, nbytes});
            int64_t phys;
            if (ptr && q->try_host_to_phys(ptr, &phys)) buffers.emplace_back(phys, nbytes);
          } else if (t == ffi::TypeIndex::kTVMFFIFloat) {
            double d = a[i].cast<double>();
            int64_t bits;
            std::memcpy(&bits, &d, sizeof bits);
            args.insert(args.end(), {2, bits});
          } else {
            args.insert(args.end(), {1, a[i].cast<int64_t>()});
          }
        }
        *rv = static_cast<int64_t>(q->stream_begin(site, std::move(args), std::move(buffers)));
      }));
  // TensorCopy(src, dst): copy a tensor between the CPU and device memory (both are host memory, see
  // vta_compiler/ext_dev.cc) into a tensor the Relax VM allocated, so from its pooled allocator.
  set("vta.runtime.TensorCopy", ffi::Function::FromPacked([](PackedArgs a, ffi::Any*) {
        DLTensor* src = a[0].cast<DLTensor*>();
        DLTensor* dst = a[1].cast<DLTensor*>();
        size_t n = compact_bytes(src, "source"), m = compact_bytes(dst, "destination");
        if (n != m) VTA_THROW("TensorCopy: the source has " << n << " bytes, the destination " << m);
        std::memcpy(static_cast<char*>(dst->data) + dst->byte_offset,
                    static_cast<const char*>(src->data) + src->byte_offset, n);
      }));
  set("vta.runtime.DeviceConstant", ffi::Function::FromTyped([](ffi::Tensor src) {
        return g_constants.get(current(), src);
      }));
  set("vta.runtime.StreamEnd",
      ffi::Function::FromPacked([](PackedArgs a, ffi::Any*) { current()->stream_end(stream_site(a[0])); }));
}
