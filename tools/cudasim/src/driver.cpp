// The driver API beyond VMM that PyTorch needs: initialization and version, devices, primary
// contexts, and cuGetProcAddress. Like every driver function of cudasim these are reached by
// name (cudaGetDriverEntryPoint*, cuGetProcAddress, or cudasim's libcuda.so.1, which forwards
// here), return CUresult, and never touch the runtime's last error.
//
// Contexts: each device has one primary context, and a program may create others
// (cuCtxCreate: a private context, current until popped or destroyed; cuCtxDestroy). The
// simulator creates nothing lazily, so a primary context is always active. A thread's current
// context is the one it set (cuCtxSetCurrent, cuCtxPushCurrent, cuCtxCreate) or else the
// primary context of its current runtime device, as after any runtime call on that device;
// making a context current also makes its device the thread's runtime device, and cudaSetDevice
// makes the device's primary context current again, in place of the one set (as CUDA's does).
// All contexts of a device share its memory, streams and counters: a private context differs
// from the primary one only in being a different handle. A destroyed context stays where it was
// on other threads (current, or on their stacks), as on CUDA: cuCtxGetDevice there answers
// CUDA_ERROR_CONTEXT_IS_DESTROYED, and the thread's runtime device stays what it was. A thread's
// stack holds up to kContextStackDepth contexts (CUDA's has no set limit). cuCtxCreate is found
// from CUDA 12.5 on (its _v4 form); a lookup for an older version gets "version too low" where a
// driver would hand out the older signature.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "api.h"

namespace cudasim {

namespace {

// A primary context handle is the address of an element here; nothing is stored through it.
struct ContextTag {
  char unused;
};
ContextTag context_tags[64];  // CUDASIM_DEVICES is at most 64

CUcontext primary_context(int device) { return reinterpret_cast<CUcontext>(&context_tags[device]); }

// Private contexts (cuCtxCreate) not destroyed yet, and their devices. A handle is a number
// never handed out before (never dereferenced), so a destroyed context's handle stays invalid.
constexpr std::uintptr_t kFirstPrivateContext = 0x7c7c000000000000ULL;
struct PrivateContexts {
  std::mutex mutex;
  std::unordered_map<CUcontext, int> devices;
  std::uintptr_t next = kFirstPrivateContext;  // the last handle made
};
PrivateContexts& private_contexts() {
  static PrivateContexts* const contexts = new PrivateContexts;  // leaked, as the State
  return *contexts;
}

bool is_primary(CUcontext context) {
  const auto* tag = reinterpret_cast<const ContextTag*>(context);
  return tag >= std::begin(context_tags) && tag < std::end(context_tags);
}

constexpr int kNoContext = -1;
constexpr int kDestroyedContext = -2;

// The device of a valid device's primary context or of a live private one; kDestroyedContext
// for a private context destroyed since, kNoContext for any other handle.
int context_device(const State& s, CUcontext context) {
  if (!is_primary(context)) {
    PrivateContexts& p = private_contexts();
    std::lock_guard lock(p.mutex);
    const auto it = p.devices.find(context);
    if (it != p.devices.end()) return it->second;
    const auto handle = reinterpret_cast<std::uintptr_t>(context);
    const bool made = handle > kFirstPrivateContext && handle <= p.next &&
                      (handle - kFirstPrivateContext) % 64 == 0;
    return made ? kDestroyedContext : kNoContext;
  }
  const auto* tag = reinterpret_cast<const ContextTag*>(context);
  const int device = static_cast<int>(tag - std::begin(context_tags));
  return valid_device(s, device) ? device : kNoContext;
}

constexpr std::size_t kContextStackDepth = 64;

// Trivially destructible: cudaSetDevice and the context functions may run in static
// destructors at exit, after a thread's non-trivial thread_locals are gone.
struct ThreadContexts {
  bool set = false;  // false: follow the runtime's current device
  CUcontext current = nullptr;
  CUcontext stack[kContextStackDepth] = {};  // contexts below the current one, oldest first
  std::size_t depth = 0;

  bool push(CUcontext context) {
    if (depth == kContextStackDepth) return false;
    stack[depth++] = context;
    return true;
  }
  CUcontext pop() { return depth == 0 ? nullptr : stack[--depth]; }
};
static_assert(std::is_trivially_destructible_v<ThreadContexts>);

ThreadContexts& thread_contexts() {
  thread_local ThreadContexts contexts;
  return contexts;
}

CUcontext current_context(const State& s) {
  const ThreadContexts& t = thread_contexts();
  if (t.set) return t.current;
  return valid_device(s, current_device()) ? primary_context(current_device()) : nullptr;
}

void make_current(const State& s, CUcontext context) {
  ThreadContexts& t = thread_contexts();
  t.set = true;
  t.current = context;
  if (context == nullptr) return;
  // A destroyed context (popped back from under another) leaves the runtime device alone.
  if (const int device = context_device(s, context); device >= 0) current_device() = device;
}

}  // namespace

void follow_runtime_device() {
  ThreadContexts& t = thread_contexts();
  t.set = false;
  t.current = nullptr;
}

}  // namespace cudasim

using namespace cudasim;

extern "C" {

CUresult cuInit(unsigned int Flags) {
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  (void)state();
  return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int* driverVersion) {
  if (driverVersion == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = kRuntimeVersion;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = static_cast<int>(state().devices.size());
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(state(), ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(state(), dev)) return CUDA_ERROR_INVALID_DEVICE;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) return CUDA_ERROR_INVALID_DEVICE;
  std::strncpy(name, prop.name, static_cast<size_t>(len) - 1);
  name[len - 1] = '\0';
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(state(), dev)) return CUDA_ERROR_INVALID_DEVICE;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) return CUDA_ERROR_INVALID_DEVICE;
  std::memcpy(uuid->bytes, prop.uuid.bytes, sizeof(uuid->bytes));
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem(size_t* bytes, CUdevice dev) {
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  if (!valid_device(s, dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(s.mutex);
  *bytes = s.devices[static_cast<size_t>(dev)].capacity;
  return CUDA_SUCCESS;
}

// The runtime's attributes share the driver's numbering; the VMM ones are driver-only.
CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(state(), dev)) return CUDA_ERROR_INVALID_DEVICE;
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: {
      State& s = state();
      std::lock_guard lock(s.mutex);
      *pi = s.devices[static_cast<size_t>(dev)].vmm_supported ? 1 : 0;
      return CUDA_SUCCESS;
    }
    // Not simulated: shareable handles (cuMemExportToShareableHandle), RDMA, multicast.
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED: *pi = 0; return CUDA_SUCCESS;
    default: break;
  }
  const std::optional<int> v = device_attribute(static_cast<cudaDeviceAttr>(attrib), dev);
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  *pi = *v;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  if (!valid_device(s, dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(s.mutex);
  ++s.devices[static_cast<size_t>(dev)].primary_context_retains;
  *pctx = primary_context(dev);
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  State& s = state();
  if (!valid_device(s, dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(s.mutex);
  int& retains = s.devices[static_cast<size_t>(dev)].primary_context_retains;
  if (retains == 0) return CUDA_ERROR_INVALID_CONTEXT;
  --retains;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  if (!valid_device(s, dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(s.mutex);
  *flags = s.devices[static_cast<size_t>(dev)].flags;
  *active = 1;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext* pctx) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = current_context(state());
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
  State& s = state();
  if (ctx != nullptr && context_device(s, ctx) < 0) return CUDA_ERROR_INVALID_CONTEXT;
  make_current(s, ctx);
  return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent(CUcontext ctx) {
  State& s = state();
  if (context_device(s, ctx) < 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (!thread_contexts().push(current_context(s))) return CUDA_ERROR_OUT_OF_MEMORY;
  make_current(s, ctx);
  return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent(CUcontext* pctx) {
  State& s = state();
  ThreadContexts& t = thread_contexts();
  const CUcontext popped = current_context(s);
  if (popped == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx != nullptr) *pctx = popped;
  make_current(s, t.pop());
  return CUDA_SUCCESS;
}

CUresult cuCtxCreate(CUcontext* pctx, CUctxCreateParams* ctxCreateParams, unsigned int flags,
                     CUdevice dev) {
  if (pctx == nullptr || (flags & ~static_cast<unsigned>(CU_CTX_FLAGS_MASK)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // Execution affinity and CIG parameters ask for what the simulator does not model.
  if (ctxCreateParams != nullptr &&
      (ctxCreateParams->execAffinityParams != nullptr || ctxCreateParams->cigParams != nullptr)) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  State& s = state();
  if (!valid_device(s, dev)) return CUDA_ERROR_INVALID_DEVICE;
  // Pushed: the context current before comes back when this one is popped or destroyed.
  ThreadContexts& t = thread_contexts();
  if (!t.push(current_context(s))) return CUDA_ERROR_OUT_OF_MEMORY;
  PrivateContexts& p = private_contexts();
  CUcontext context = nullptr;
  {
    std::lock_guard lock(p.mutex);
    p.next += 64;
    context = reinterpret_cast<CUcontext>(p.next);
    p.devices.emplace(context, dev);
  }
  make_current(s, context);
  *pctx = context;
  return CUDA_SUCCESS;
}

CUresult cuCtxDestroy(CUcontext ctx) {
  State& s = state();
  if (ctx == nullptr || is_primary(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  {
    PrivateContexts& p = private_contexts();
    std::lock_guard lock(p.mutex);
    if (p.devices.erase(ctx) == 0) return CUDA_ERROR_INVALID_CONTEXT;
  }
  // Current on this thread: popped, as by cuCtxPopCurrent. Where it is current elsewhere, or
  // lower on a stack, it stays (a destroyed context, as on CUDA).
  ThreadContexts& t = thread_contexts();
  if (t.set && t.current == ctx) make_current(s, t.pop());
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice* device) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  const CUcontext context = current_context(s);
  const int owner = context == nullptr ? kNoContext : context_device(s, context);
  if (owner == kDestroyedContext) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  if (owner < 0) return CUDA_ERROR_INVALID_CONTEXT;
  *device = owner;
  return CUDA_SUCCESS;
}

// Counted once, as synchronize, by cudaDeviceSynchronize.
CUresult cuCtxSynchronize(void) {
  return cudaDeviceSynchronize() == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
}

// Driver log callbacks are registered and unregistered; the simulator has no driver messages
// to deliver, so a callback is never called.
CUresult cuLogsRegisterCallback(CUlogsCallback callbackFunc, void* userData,
                                CUlogsCallbackHandle* callback_out) {
  if (callbackFunc == nullptr || callback_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  (void)userData;
  State& s = state();
  std::lock_guard lock(s.mutex);
  const uint64_t id = ++s.log_callbacks_registered;
  s.log_callbacks.push_back(id);
  *callback_out = reinterpret_cast<CUlogsCallbackHandle>(static_cast<uintptr_t>(id));
  return CUDA_SUCCESS;
}

CUresult cuLogsUnregisterCallback(CUlogsCallbackHandle callback) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  const auto id = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(callback));
  const auto it = std::find(s.log_callbacks.begin(), s.log_callbacks.end(), id);
  if (it == s.log_callbacks.end()) return CUDA_ERROR_INVALID_VALUE;
  s.log_callbacks.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                          CUdriverProcAddressQueryResult* symbolStatus) {
  if (symbol == nullptr || pfn == nullptr ||
      (flags & ~static_cast<cuuint64_t>(CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                                        CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  void* function = nullptr;
  const DriverLookup found = lookup_driver_symbol(symbol, cudaVersion, &function);
  *pfn = function;
  if (symbolStatus != nullptr) {
    *symbolStatus = found == DriverLookup::Found ? CU_GET_PROC_ADDRESS_SUCCESS
                    : found == DriverLookup::VersionTooLow
                        ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                        : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  }
  return found == DriverLookup::Found ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

}  // extern "C"
