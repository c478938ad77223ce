// GPU pieces that do not depend on a vendor: which vendor serves a device
// type, release accounting and the diagnostic hook, hurray_alloc_async and
// hurray_stream_wait (docs/impl/gpu.md).
#include "gpu.h"

#include <pthread.h>

#include <atomic>
#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "../alloc.h"
#include "../error.h"

namespace hurray {
namespace {

std::atomic<uint64_t> g_failed_releases{0};
std::atomic<uint64_t> g_teardown_leaks{0};
std::atomic<uint64_t> g_fork_skips{0};
std::atomic<uint64_t> g_context_reset_skips{0};
std::atomic<uint64_t> g_stream_fallbacks{0};

// The hook and its argument change together under g_hook_mutex, which is
// also held while the hook runs: set_diagnostic_hook returning means the old
// hook is done. std::mutex is trivially destructible here, so releases
// during process exit can still take it.
std::mutex g_hook_mutex;
hurray_diagnostic_hook_fn g_hook = nullptr;
void *g_hook_user = nullptr;

// True while this thread runs the hook, and so holds g_hook_mutex. A
// release inside the hook whose free fails too (a hook that drops GPU
// memory, or a garbage collector it triggers) must not lock it again: that
// failure is counted only. Trivially destructible, so usable at exit.
thread_local bool t_in_hook = false;

// fork() while another thread holds g_hook_mutex (it is running the hook)
// would leave the child's copy locked forever by a thread the child does
// not have. The prepare handler takes the mutex (waiting for a running hook
// to return), so the child inherits it unlocked-by-us and releases it; a
// fork from inside the hook itself (this thread already holds it) takes
// nothing and the child's hook returns and unlocks as usual.
thread_local bool t_locked_for_fork = false;

void hook_prepare_fork() {
  if (t_in_hook) return;
  g_hook_mutex.lock();
  t_locked_for_fork = true;
}

void hook_after_fork() {
  if (!t_locked_for_fork) return;
  t_locked_for_fork = false;
  g_hook_mutex.unlock();
}

// Registered when libhurray is loaded: before any hook can run.
const int g_hook_atfork = pthread_atfork(&hook_prepare_fork, &hook_after_fork, &hook_after_fork);

void send_to_hook(int32_t status, const char *fmt, va_list args) {
  if (t_in_hook) return;
  std::lock_guard<std::mutex> lock(g_hook_mutex);
  if (g_hook == nullptr) return;
  char message[320];
  std::vsnprintf(message, sizeof message, fmt, args);
  t_in_hook = true;
  g_hook(status, message, g_hook_user);
  t_in_hook = false;
}

}  // namespace

void report_failed_release(int32_t status, const char *fmt, ...) {
  g_failed_releases.fetch_add(1, std::memory_order_relaxed);
  va_list args;
  va_start(args, fmt);
  send_to_hook(status, fmt, args);
  va_end(args);
}

void report_context_reset_skip(const char *fmt, ...) {
  g_context_reset_skips.fetch_add(1, std::memory_order_relaxed);
  va_list args;
  va_start(args, fmt);
  send_to_hook(HURRAY_ERR_DEVICE, fmt, args);
  va_end(args);
}

void count_stream_fallback() { g_stream_fallbacks.fetch_add(1, std::memory_order_relaxed); }

void count_teardown_leak() { g_teardown_leaks.fetch_add(1, std::memory_order_relaxed); }

void count_fork_skip() { g_fork_skips.fetch_add(1, std::memory_order_relaxed); }

void register_fork_child_handler(void (*child_handler)(void)) {
  // Can only fail with ENOMEM; then a forked child would still try to free,
  // which is what every program without this protection does.
  (void)pthread_atfork(nullptr, nullptr, child_handler);
}

const GpuVendor *find_gpu_vendor(int32_t device_type) {
  switch (device_type) {
    case HURRAY_DEVICE_CUDA:
    case HURRAY_DEVICE_CUDA_HOST:
    case HURRAY_DEVICE_CUDA_MANAGED:
#if defined(HURRAY_WITH_CUDA)
      return cuda_vendor();
#else
      fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
           "%s memory is not supported: this build of libhurray has no CUDA support "
           "(HURRAY_WITH_CUDA=OFF)",
           device_type_name(device_type));
      return nullptr;
#endif
    case HURRAY_DEVICE_ROCM:
    case HURRAY_DEVICE_ROCM_HOST:
#if defined(HURRAY_WITH_HIP)
      return hip_vendor();
#else
      fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
           "%s memory is not supported: this build of libhurray has no HIP support "
           "(HURRAY_WITH_HIP=OFF)",
           device_type_name(device_type));
      return nullptr;
#endif
    default:
      fail(HURRAY_ERR_UNSUPPORTED_DEVICE, "device type %d (%s) is not a GPU device type",
           device_type, device_type_name(device_type));
      return nullptr;
  }
}

int32_t check_device_pointer(hurray_device device, const void *data) {
  switch (device.device_type) {
    case HURRAY_DEVICE_CUDA:
    case HURRAY_DEVICE_CUDA_HOST:
    case HURRAY_DEVICE_CUDA_MANAGED:
    case HURRAY_DEVICE_ROCM:
    case HURRAY_DEVICE_ROCM_HOST: {
      const GpuVendor *v = find_gpu_vendor(device.device_type);
      if (v == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
      return v->check_pointer(device, data);
    }
    default:
      return HURRAY_OK;
  }
}

}  // namespace hurray

extern "C" {

HURRAY_API int32_t hurray_alloc_async(hurray_device device, hurray_dtype dtype, int32_t ndim,
                                      const int64_t *shape, uint64_t flags, void *stream,
                                      hurray_buffer *out) {
  using namespace hurray;
  if (stream != nullptr && !is_device_memory(device.device_type)) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "stream-ordered allocation serves kDLCUDA and kDLROCM memory, not %s (pass a "
                "NULL stream for a synchronous allocation)",
                device_type_name(device.device_type));
  }
  // The per-thread default stream cannot be named again by the release
  // (it would be the releasing thread's): allocate synchronously instead.
  return alloc_on(device, dtype, ndim, shape, flags, allocation_stream(stream), false, out);
}

HURRAY_API int32_t hurray_stream_wait(hurray_device device, void *producer_stream,
                                      void *consumer_stream) {
  using namespace hurray;
  const int32_t type = device.device_type;
  const bool gpu_type = type == HURRAY_DEVICE_CUDA || type == HURRAY_DEVICE_CUDA_HOST ||
                        type == HURRAY_DEVICE_CUDA_MANAGED || type == HURRAY_DEVICE_ROCM ||
                        type == HURRAY_DEVICE_ROCM_HOST;
  if (gpu_type && producer_stream == consumer_stream) return HURRAY_OK;  // no runtime needed
  const GpuVendor *v = find_gpu_vendor(type);
  if (v == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  if (device.device_id < 0) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE, "%s has no device_id %d", device_type_name(type),
                device.device_id);
  }
  (void)g_hook_atfork;
  return v->stream_wait(device.device_id, producer_stream, consumer_stream);
}

HURRAY_API int32_t hurray_get_diagnostics(hurray_diagnostics *out) {
  using namespace hurray;
  if (out == nullptr) return fail(HURRAY_ERR_INVALID_ARGUMENT, "out is NULL");
  const size_t size = out->struct_size;
  if (size < offsetof(hurray_diagnostics, failed_releases) + sizeof(uint64_t)) {
    return fail(HURRAY_ERR_INVALID_ARGUMENT,
                "out->struct_size is %zu; set it to sizeof(hurray_diagnostics)", size);
  }
  hurray_diagnostics d;
  // Whole fields only: the end of the last field that fits in `size`.
  const size_t ends[] = {offsetof(hurray_diagnostics, failed_releases) + sizeof d.failed_releases,
                         offsetof(hurray_diagnostics, teardown_leaks) + sizeof d.teardown_leaks,
                         offsetof(hurray_diagnostics, fork_skipped_releases) +
                             sizeof d.fork_skipped_releases,
                         offsetof(hurray_diagnostics, context_reset_skips) +
                             sizeof d.context_reset_skips,
                         offsetof(hurray_diagnostics, stream_fallback_frees) +
                             sizeof d.stream_fallback_frees};
  size_t written = 0;
  for (size_t end : ends) {
    if (end <= size) written = end;
  }
  d.struct_size = static_cast<uint32_t>(written);
  d.reserved = 0;
  d.failed_releases = g_failed_releases.load(std::memory_order_relaxed);
  d.teardown_leaks = g_teardown_leaks.load(std::memory_order_relaxed);
  d.fork_skipped_releases = g_fork_skips.load(std::memory_order_relaxed);
  d.context_reset_skips = g_context_reset_skips.load(std::memory_order_relaxed);
  d.stream_fallback_frees = g_stream_fallbacks.load(std::memory_order_relaxed);
  std::memcpy(out, &d, written);
  return HURRAY_OK;
}

HURRAY_API int32_t hurray_set_diagnostic_hook(hurray_diagnostic_hook_fn hook, void *user) {
  using namespace hurray;
  if (t_in_hook) {
    // Called by the running hook: this thread already holds the mutex. The
    // new hook serves the next failure; the caller is the one still running.
    g_hook = hook;
    g_hook_user = user;
    return HURRAY_OK;
  }
  std::lock_guard<std::mutex> lock(g_hook_mutex);
  g_hook = hook;
  g_hook_user = user;
  return HURRAY_OK;
}

}  // extern "C"
