// SPDX-License-Identifier: Apache-2.0
// The one table of operations per device type (allocate, free, copy,
// synchronise, stream wait, events, pointer check, strided copy), the CPU's
// (device/cpu/cpu.cc) like the GPU vendors' (device/cuda/, device/hip/),
// resolved in one place (device/backend.cc). A vendor left out of the build
// is served by a stub table whose every operation answers
// HURRAY_ERR_UNSUPPORTED_DEVICE with one message, so no caller needs an
// #ifdef. See docs/impl/gpu.md, "The backend table".
#ifndef HURRAY_SRC_DEVICE_BACKEND_H_
#define HURRAY_SRC_DEVICE_BACKEND_H_

#include <cstddef>
#include <cstdint>

#include "hurray/hurray.h"

namespace hurray::detail {

struct DeviceCopy;  // device/strided_copy.h

// What a backend's allocate hands back and needs again to free: the pointer
// and how the release must be ordered and checked. Kept by hurray_alloc in
// the handle's host block and passed back unchanged to `deallocate`.
struct DeviceMemory {
  void *ptr = nullptr;
  // The stream the caller named (NULL: none); CU_STREAM_PER_THREAD /
  // hipStreamPerThread (2) included.
  void *stream = nullptr;
  // The vendor's identity of the context the memory was allocated in (CUDA:
  // the primary context's id or libhurray's generation of it), so that a
  // release after a context reset can tell the memory died with it.
  uint64_t context = 0;
  // How the release is ordered (a vendor's own enumeration; 0: synchronous
  // free, nothing else to wait for).
  uint32_t order = 0;
  // The device `stream` belongs to when the allocator was told it is
  // another device than the memory's (a copy queued there uses the memory);
  // -1 otherwise. The release waits for that device's work there.
  int32_t stream_device = -1;
};

// What `copy_strided` answers when this backend cannot do the layout itself
// (nothing was queued): the caller stages the bytes through the host. Never
// a public status (those are >= 0).
constexpr int32_t kStageThroughHost = -1;

// One device type's operations. Every function but `deallocate` returns a
// hurray_status and sets the thread's message on failure. Streams are the
// vendor's own handles (CUstream / hipStream_t); NULL is the default stream.
// Every GPU operation loads the vendor's library on first use. Filled by
// name (never by position) in each backend's file.
struct DeviceBackend {
  const char *name;  // "CPU", "CUDA" or "HIP" (the stub of a vendor too)
  // HURRAY_OK when the library is loaded and works here; else
  // HURRAY_ERR_UNSUPPORTED_DEVICE with the message saying why.
  int32_t (*load)();
  // Allocates `nbytes` on `device`, stream-ordered on `stream` when it is
  // non-NULL, and fills *mem. With `nbytes` 0 nothing is allocated and
  // mem->ptr stays NULL, but the answer for a missing runtime or device is
  // the same as for a non-empty request. `stream_device`: -1, or the
  // ordinal of the other device the caller knows `stream` belongs to; the
  // memory is then allocated synchronously and its release ordered after
  // that stream (for the per-thread default stream 2, after every thread's
  // per-thread stream of that device, CUDA: its legacy stream; the handle
  // names the releasing thread's stream). On
  // failure returns a status with the message set and leaves *mem untouched.
  int32_t (*allocate)(hurray_device device, uint64_t nbytes, void *stream, int32_t stream_device,
                      DeviceMemory *mem);
  // Frees what `allocate` returned (mem.ptr non-NULL), with the same
  // device. Called from any thread, including during process exit; never
  // fails loudly (src/common/diagnostics.h counts what goes wrong).
  void (*deallocate)(hurray_device device, const DeviceMemory &mem);
  // Enqueues a copy of `nbytes` between any two addresses the runtime can
  // reach (device, pinned, managed or pageable host memory) on `stream`, with
  // device `device_id` current around the call (the CPU: copies now).
  int32_t (*copy)(int32_t device_id, void *dst, const void *src, uint64_t nbytes, void *stream);
  // Waits on the host until all work on `stream` is done.
  int32_t (*synchronize)(int32_t device_id, void *stream);
  // Makes `consumer` wait for the work queued so far on `producer`.
  int32_t (*stream_wait)(int32_t device_id, void *producer, void *consumer);
  // The events of hurray_event_record (docs/impl/gpu.md §4, "Events").
  // event_record creates an event (CUDA: cuEventCreate with
  // CU_EVENT_DISABLE_TIMING; HIP: hipEventCreateWithFlags with
  // hipEventDisableTiming) in device `device_id`'s context (CUDA: its
  // primary context) and records it on `stream` (NULL: the default stream);
  // *event and *context (the incarnation of that context, as in
  // DeviceMemory::context) are written on success only. While `stream` is
  // being captured into a graph (CUDA: NULL / CU_STREAM_LEGACY also while a
  // blocking stream of the device is) nothing is created:
  // HURRAY_ERR_INVALID_ARGUMENT. The CPU: HURRAY_ERR_UNSUPPORTED_DEVICE.
  int32_t (*event_record)(int32_t device_id, void *stream, void **event, uint64_t *context);
  // Makes `stream` wait on the device for `event` (no host blocking). While
  // `stream` is being captured, CUDA captures the wait as an external
  // event-wait node (CU_EVENT_WAIT_EXTERNAL: the CUDA Programming Guide
  // forbids waiting on a non-captured event from a capturing stream without
  // it); HIP, which has no such flag, and CUDA's legacy stream while a
  // blocking stream captures answer HURRAY_ERR_INVALID_ARGUMENT, nothing
  // queued. `context` is event_record's: when the context was reset since
  // (CUDA: that incarnation of the primary context is no longer the live
  // one), the event died with it, and the wait is refused with
  // HURRAY_ERR_DEVICE before any call that names the event or the stream,
  // and without retaining the reset context again.
  int32_t (*event_wait)(int32_t device_id, void *event, uint64_t context, void *stream);
  // Destroys what event_record made, from any thread. Nothing is called when
  // the context was reset since (`context` differs: the event died with it;
  // the reset context is not retained again to find out) or in a forked
  // child; HURRAY_ERR_DEVICE with the message set when the runtime fails
  // (the event is then leaked).
  int32_t (*event_destroy)(int32_t device_id, void *event, uint64_t context);
  // HURRAY_OK when `ptr` is memory of `device` (type and ordinal) according
  // to the runtime's pointer attributes; HURRAY_ERR_INVALID_ARGUMENT if not.
  int32_t (*check_pointer)(hurray_device device, const void *ptr);
  // Queues the strided copy `c` (device/strided_copy.h) with `ordinal`
  // current; kStageThroughHost (nothing queued) when this backend cannot do
  // the layout itself: the caller stages through the host.
  int32_t (*copy_strided)(int32_t ordinal, const DeviceCopy &c, void *stream);
  // HURRAY_OK when the host may wait for `stream` of device `device_id`
  // (NULL: the legacy default stream) now; HURRAY_ERR_INVALID_ARGUMENT with
  // the message set while the stream is being captured into a graph, when
  // waiting for it is prohibited (CUDA: also the legacy stream while a
  // blocking stream of the device is captured). Asked before a copy that
  // must wait on the host queues anything.
  int32_t (*host_wait_allowed)(int32_t device_id, void *stream);
  // hurray_retire_deferred_frees for device `device_id` (docs/impl/gpu.md
  // §2): tries the releases kept because their stream was being captured
  // now, and writes how many are still kept to *remaining (when not NULL).
  // HURRAY_ERR_UNSUPPORTED_DEVICE with the message set when the library or
  // the ordinal is unavailable; the CPU keeps nothing (HURRAY_OK, 0).
  int32_t (*retire_deferred)(int32_t device_id, size_t *remaining);
};

// Every member is a pointer, and every table sets every one:
// tests/device/backend_tables_test.cc reads each table (the CPU's, the
// vendors', the stubs) as an array of pointers and refuses a NULL, so a
// member added and left unset in one table fails there.
static_assert(sizeof(DeviceBackend) % sizeof(void *) == 0 &&
                  alignof(DeviceBackend) == alignof(void *),
              "DeviceBackend holds pointers only");

// kDLCUDA, kDLCUDAHost, kDLCUDAManaged, kDLROCM, kDLROCMHost.
bool is_gpu_type(int32_t device_type);

// The table serving `device_type` (kDLCPU included): the vendor's, or its
// stub when the build leaves the vendor out. Loads nothing. nullptr with
// HURRAY_ERR_UNSUPPORTED_DEVICE set when no backend serves the type.
const DeviceBackend *backend_for(int32_t device_type);

// backend_for, then `load`: nullptr with HURRAY_ERR_UNSUPPORTED_DEVICE set
// when no backend serves the type, the build leaves its vendor out, or the
// library cannot work here.
const DeviceBackend *ready_backend(int32_t device_type);

// The stub table of the vendor serving `device_type` (a GPU type), the one a
// build without that vendor serves it with; nullptr for any other type.
// Built in every configuration, so that its completeness is tested in all.
const DeviceBackend *stub_backend_for(int32_t device_type);

// HURRAY_IMPORT_CHECK_DEVICE_POINTER: HURRAY_OK when `device` is not a GPU
// type or `data` is memory of that device type and ordinal; else
// INVALID_ARGUMENT (or UNSUPPORTED_DEVICE when the runtime is unavailable).
int32_t check_device_pointer(hurray_device device, const void *data);

// Memory that lives on one device ordinal and whose operations run with that
// device current (kDLCUDA, kDLROCM). Pinned and managed memory also name a
// device (the one whose context allocated them), but are not device memory.
inline bool is_device_memory(int32_t device_type) {
  return device_type == HURRAY_DEVICE_CUDA || device_type == HURRAY_DEVICE_ROCM;
}

// CU_STREAM_PER_THREAD and hipStreamPerThread (both 2) name the stream of
// whichever thread uses the handle. Memory cannot be freed "on the stream it
// was allocated on" from another thread through that handle, so such
// requests are served synchronously (gpu §2).
inline bool is_per_thread_stream(const void *stream) {
  return reinterpret_cast<uintptr_t>(stream) == 2;
}

// `stream_device` for an allocator when the stream is the memory's own
// device's (or the allocator is to find out).
constexpr int32_t kStreamOfThisDevice = -1;

}  // namespace hurray::detail

#endif  // HURRAY_SRC_DEVICE_BACKEND_H_
