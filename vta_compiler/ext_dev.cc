// The `ext_dev` DeviceAPI of VTA (TVM device type 12), built on first use by vta_compiler.ext_dev.
//
// Tensors on ext_dev live in VTA device memory. Allocation is delegated to the Python runtime
// (global functions vta.runtime.HostAlloc / HostFree), which allocates physical memory on the
// current device and returns its *host* address: the device's memory is mapped into this process
// (the simulated DRAM arena of fsim/tsim, or a board's contiguous-memory mapping), so a data
// pointer is an ordinary CPU pointer and copies are memcpy. The runtime translates data pointers
// back to physical addresses when compiled code passes them to LoadBuffer2D / StoreBuffer2D.
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>
#include <tvm/runtime/device_api.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace {
using namespace tvm;
using namespace tvm::runtime;

bool shutting_down = false;   // set at Python exit (vta_compiler/ext_dev.py registers the atexit hook)

ffi::Function Need(const char* name) {
  auto f = ffi::Function::GetGlobal(name);
  if (!f.has_value()) {
    TVM_FFI_THROW(RuntimeError) << "VTA ext_dev: global function " << name
                                << " is not registered (import vta_compiler first)";
  }
  return *f;
}

class VTADeviceAPI final : public DeviceAPI {
 public:
  void SetDevice(Device) final {}
  void GetAttr(Device, DeviceAttrKind kind, ffi::Any* rv) final {
    if (kind == kExist) *rv = 1;
  }
  void* AllocDataSpace(Device, size_t nbytes, size_t, DLDataType) final {
    int64_t addr = Need("vta.runtime.HostAlloc")(static_cast<int64_t>(nbytes)).cast<int64_t>();
    return reinterpret_cast<void*>(addr);
  }
  void FreeDataSpace(Device, void* ptr) final {
    // Called from destructors, so it must not throw: a failure is reported instead. Tensors still
    // alive when Python exits are freed after the runtime is gone: their memory goes with the process.
    if (shutting_down) return;
    try {
      Need("vta.runtime.HostFree")(reinterpret_cast<int64_t>(ptr));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "VTA ext_dev: could not free device memory at %p: %s\n", ptr, e.what());
    }
  }
  // Workspaces: the intermediate buffers of compiled host code on ext_dev tensors (a reduction's partial
  // result), allocated and freed on every call. Freed ones are kept by size and handed out again, since
  // allocating device memory goes through Python; ReleaseWorkspaces (vta_runtime.tvm_bridge, when the device
  // changes) frees them.
  void* AllocWorkspace(Device dev, size_t nbytes, DLDataType type_hint) final {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = spare_.find(nbytes);
      if (it != spare_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        live_[p] = nbytes;
        return p;
      }
    }
    void* p = AllocDataSpace(dev, nbytes, kAllocAlignment, type_hint);
    std::lock_guard<std::mutex> lock(mu_);
    live_[p] = nbytes;
    return p;
  }
  void FreeWorkspace(Device, void* ptr) final {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(ptr);
    if (it == live_.end()) return;
    spare_[it->second].push_back(ptr);
    live_.erase(it);
  }
  void ReleaseWorkspaces(Device dev) {
    std::vector<void*> spare;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& kv : spare_) spare.insert(spare.end(), kv.second.begin(), kv.second.end());
      spare_.clear();
    }
    for (void* p : spare) FreeDataSpace(dev, p);
  }
  void StreamSync(Device, TVMStreamHandle) final {}
  bool SupportsDevicePointerArithmeticsOnHost() final { return true; }
  static VTADeviceAPI* Global() {
    static auto* inst = new VTADeviceAPI();
    return inst;
  }

 private:
  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> spare_;
  std::unordered_map<void*, size_t> live_;

 protected:
  void CopyDataFromTo(const void* from, size_t from_offset, void* to, size_t to_offset, size_t size,
                      Device, Device, DLDataType, TVMStreamHandle) final {
    std::memmove(static_cast<char*>(to) + to_offset, static_cast<const char*>(from) + from_offset, size);
  }
};
}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::GlobalDef()
      .def_packed("vta.ext_dev.device_api",
                  [](tvm::ffi::PackedArgs, tvm::ffi::Any* rv) { *rv = static_cast<void*>(VTADeviceAPI::Global()); })
      .def("vta.ext_dev.Shutdown", []() { shutting_down = true; })
      .def("vta.ext_dev.ReleaseWorkspaces", []() { VTADeviceAPI::Global()->ReleaseWorkspaces(Device{kDLExtDev, 0}); });
}
