// SPDX-License-Identifier: Apache-2.0
// Interprocess events as both fakes model them (fake_cuda_ipc.cc for
// cuIpcGetEventHandle / cuIpcOpenEventHandle, fake_hip.cc for
// hipIpcGetEventHandle / hipIpcOpenEventHandle), after the CUDA Driver API
// reference (Event Management: cuEventCreate; Inter-Process Communication:
// cuIpcGetEventHandle, cuIpcOpenEventHandle) and the HIP API reference of
// the same functions:
// - an event may be used by cuIpcGetEventHandle only if it was created with
//   CU_EVENT_INTERPROCESS, which must come with CU_EVENT_DISABLE_TIMING
//   (cuEventCreate refuses it alone); cuIpcGetEventHandle of another event:
//   CUDA_ERROR_INVALID_VALUE / hipErrorInvalidValue;
// - the handle opened in another process names the same event: the fake's
//   handle is the creating pid and an event number, logged (bytes) by both
//   the get and the open, so a test can match them;
// - a handle is opened "from another process": HIP documents
//   hipErrorInvalidContext for a handle of the calling process; CUDA's
//   reference documents no code, and the fake answers as its
//   cuIpcOpenMemHandle does, CUDA_ERROR_INVALID_CONTEXT;
// - the opened event behaves as one created with CU_EVENT_DISABLE_TIMING
//   and is destroyed with cuEventDestroy / hipEventDestroy; operations on it
//   after the exporter destroyed its event are undefined, which the fake
//   counts (opened_after_destroy is not reachable across processes, so the
//   fake instead keeps a per-process table of live exported events that a
//   test reads through fake_control.h).
#ifndef HURRAY_TESTS_FAKES_FAKE_IPC_EVENT_H_
#define HURRAY_TESTS_FAKES_FAKE_IPC_EVENT_H_

#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>

namespace fake::ipc_event {

// CU_EVENT_DISABLE_TIMING / hipEventDisableTiming and CU_EVENT_INTERPROCESS /
// hipEventInterprocess have the same values in both APIs.
constexpr unsigned kDisableTiming = 0x2;
constexpr unsigned kInterprocess = 0x4;

// cuEventCreate's rule: CU_EVENT_INTERPROCESS only with
// CU_EVENT_DISABLE_TIMING.
inline bool valid_flags(unsigned flags) {
  return (flags & kInterprocess) == 0 || (flags & kDisableTiming) != 0;
}

// The 64 opaque bytes of CUipcEventHandle / hipIpcEventHandle_t.
struct Handle {
  char magic[8];  // "FAKEEVT"
  int32_t pid;    // the creating process
  int32_t zero;
  uint64_t id;  // its event number there (from 1)
  char pad[40];
};
static_assert(sizeof(Handle) == 64, "an IPC event handle is 64 bytes");

enum class OpenError { kNone, kInvalid, kOwnProcess };

class Table {
 public:
  static Table &get() {
    static Table *t = new Table;  // never destroyed: calls may come during exit
    return *t;
  }
  void created(const void *ev, unsigned flags) {
    std::lock_guard<std::mutex> lock(mu_);
    events_[ev] = Info{flags, ++next_id_};
  }
  void destroyed(const void *ev) {
    std::lock_guard<std::mutex> lock(mu_);
    events_.erase(ev);
  }
  // cuIpcGetEventHandle: false for an event not created here with
  // CU_EVENT_INTERPROCESS.
  bool handle(const void *ev, Handle *out) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = events_.find(ev);
    if (it == events_.end() || (it->second.flags & kInterprocess) == 0) return false;
    std::memset(out, 0, sizeof *out);
    std::memcpy(out->magic, "FAKEEVT", 8);
    out->pid = static_cast<int32_t>(getpid());
    out->id = it->second.id;
    ++exported_;
    return true;
  }
  // cuIpcOpenEventHandle: a handle made by a live other process.
  OpenError check_open(const Handle &h) {
    if (std::memcmp(h.magic, "FAKEEVT", 8) != 0 || h.pid <= 0 || h.id == 0) {
      return OpenError::kInvalid;
    }
    if (h.pid == static_cast<int32_t>(getpid())) return OpenError::kOwnProcess;
    if (kill(h.pid, 0) != 0) return OpenError::kInvalid;
    return OpenError::kNone;
  }
  // Interprocess events of this process not destroyed yet.
  int64_t live_interprocess() {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t n = 0;
    for (const auto &e : events_) n += (e.second.flags & kInterprocess) != 0 ? 1 : 0;
    return n;
  }

 private:
  struct Info {
    unsigned flags;
    uint64_t id;
  };
  std::mutex mu_;
  std::map<const void *, Info> events_;
  uint64_t next_id_ = 0;
  uint64_t exported_ = 0;
};

}  // namespace fake::ipc_event

// The control function of fake_control.h.
#define FAKE_IPC_EVENT_EXPORTS(prefix)                        \
  FAKE_EXPORT int64_t prefix##live_ipc_events(void) {         \
    return fake::ipc_event::Table::get().live_interprocess(); \
  }

#endif  // HURRAY_TESTS_FAKES_FAKE_IPC_EVENT_H_
