// SPDX-License-Identifier: Apache-2.0
// The fake CUDA driver's legacy IPC (part of libcuda.so.1, see
// fake_cuda.cc): cuIpcGetMemHandle, cuIpcOpenMemHandle and
// cuIpcCloseMemHandle over the Recorder's IPC handles (fake_common.h), and
// cuMemGetAddressRange, which libhurray uses to find an allocation's base.
#include <cuda.h>

#include <cstring>

#include "fake_cuda_internal.h"
#include "fake_ipc_event.h"
#include "fake_vmm.h"

namespace fake_cuda {

// Legacy IPC. cuIpcGetMemHandle takes the base of a cuMemAlloc allocation
// (pool memory: CUDA_ERROR_INVALID_VALUE); cuIpcOpenMemHandle needs a current
// context and maps another process's allocation (a handle of the calling
// process itself: CUDA_ERROR_INVALID_CONTEXT, as the driver answers);
// cuIpcCloseMemHandle unmaps it.
CUresult f_ipc_get_mem_handle(CUipcMemHandle *h, CUdeviceptr dp) {
  FAKE_ENTER("cuIpcGetMemHandle", as_ptr(dp));
  if (CUresult e = context_error()) return done("cuIpcGetMemHandle", e, as_ptr(dp));
  fake::IpcHandle ih;
  if (h == nullptr || !rec().ipc_handle(as_ptr(dp), &ih)) {
    return done("cuIpcGetMemHandle", CUDA_ERROR_INVALID_VALUE, as_ptr(dp));
  }
  static_assert(sizeof h->reserved == sizeof ih, "CUipcMemHandle is 64 bytes");
  std::memcpy(h->reserved, &ih, sizeof ih);
  return done("cuIpcGetMemHandle", CUDA_SUCCESS, as_ptr(dp));
}

CUresult f_ipc_open_mem_handle(CUdeviceptr *dp, CUipcMemHandle h, unsigned int flags) {
  FAKE_ENTER("cuIpcOpenMemHandle", nullptr, nullptr, flags);
  if (CUresult e = context_error()) return done("cuIpcOpenMemHandle", e, nullptr, nullptr, flags);
  fake::IpcHandle ih;
  std::memcpy(&ih, h.reserved, sizeof ih);
  fake::IpcOpenError why;
  void *p = rec().ipc_open(ih, &why);
  if (p == nullptr) {
    return done("cuIpcOpenMemHandle",
                why == fake::IpcOpenError::kOwnProcess ? CUDA_ERROR_INVALID_CONTEXT
                                                       : CUDA_ERROR_INVALID_VALUE,
                nullptr, nullptr, flags);
  }
  *dp = as_dptr(p);
  return done("cuIpcOpenMemHandle", CUDA_SUCCESS, p, nullptr, flags);
}

CUresult f_ipc_close_mem_handle(CUdeviceptr dp) {
  FAKE_ENTER("cuIpcCloseMemHandle", as_ptr(dp));
  if (CUresult e = context_error()) return done("cuIpcCloseMemHandle", e, as_ptr(dp));
  return done("cuIpcCloseMemHandle",
              rec().ipc_close(as_ptr(dp)) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE, as_ptr(dp));
}

CUresult f_mem_get_address_range(CUdeviceptr *base, size_t *size, CUdeviceptr dp) {
  FAKE_ENTER("cuMemGetAddressRange", as_ptr(dp));
  if (CUresult e = context_error()) return done("cuMemGetAddressRange", e, as_ptr(dp));
  uintptr_t b = 0;
  uint64_t n = 0;
  if (!rec().address_range(as_ptr(dp), &b, &n) &&
      !fake::Vmm::get().range(static_cast<uintptr_t>(dp), &b, &n) &&
      !pool_range(as_ptr(dp), &b, &n)) {
    return done("cuMemGetAddressRange", CUDA_ERROR_NOT_FOUND, as_ptr(dp));
  }
  if (base != nullptr) *base = static_cast<CUdeviceptr>(b);
  if (size != nullptr) *size = static_cast<size_t>(n);
  return done("cuMemGetAddressRange", CUDA_SUCCESS, as_ptr(dp), nullptr, n);
}

// IPC events (fake_ipc_event.h): cuIpcGetEventHandle of an event made with
// CU_EVENT_INTERPROCESS; cuIpcOpenEventHandle of another process's, with a
// context current, an event of this process that cuEventDestroy frees.
// `bytes` logs the event's number in its creating process.
CUresult f_ipc_get_event_handle(CUipcEventHandle *h, CUevent ev) {
  FAKE_ENTER("cuIpcGetEventHandle", ev);
  if (CUresult e = context_error()) return done("cuIpcGetEventHandle", e, ev);
  if (CUresult e = event_error(ev)) return done("cuIpcGetEventHandle", e, ev);
  fake::ipc_event::Handle eh;
  if (h == nullptr || !fake::ipc_event::Table::get().handle(ev, &eh)) {
    return done("cuIpcGetEventHandle", CUDA_ERROR_INVALID_VALUE, ev);
  }
  static_assert(sizeof h->reserved == sizeof eh, "CUipcEventHandle is 64 bytes");
  std::memcpy(h->reserved, &eh, sizeof eh);
  return done("cuIpcGetEventHandle", CUDA_SUCCESS, ev, nullptr, eh.id);
}

CUresult f_ipc_open_event_handle(CUevent *ev, CUipcEventHandle h) {
  FAKE_ENTER("cuIpcOpenEventHandle");
  if (CUresult e = context_error()) return done("cuIpcOpenEventHandle", e);
  fake::ipc_event::Handle eh;
  std::memcpy(&eh, h.reserved, sizeof eh);
  const fake::ipc_event::OpenError why = fake::ipc_event::Table::get().check_open(eh);
  if (ev == nullptr || why != fake::ipc_event::OpenError::kNone) {
    return done("cuIpcOpenEventHandle",
                why == fake::ipc_event::OpenError::kOwnProcess ? CUDA_ERROR_INVALID_CONTEXT
                                                               : CUDA_ERROR_INVALID_VALUE,
                nullptr, nullptr, eh.id);
  }
  *ev = new_event();  // of the current context: a reset destroys it too
  fake::ipc_event::Table::get().created(*ev, fake::ipc_event::kDisableTiming);
  return done("cuIpcOpenEventHandle", CUDA_SUCCESS, *ev, nullptr, eh.id);
}

}  // namespace fake_cuda
