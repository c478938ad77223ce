// SPDX-License-Identifier: Apache-2.0
// The stream-ordered GPU handoff against the fake drivers (docs/impl/ipc.md
// §6, what the consumer waits for): the probe's `ipc-event-*` commands, run
// by ipc_event_test.cc. Each forks its receiver before any GPU call, prints
// `check NAME ok|FAILED ...` lines and exits 0 only when every check held.
//
//   probe ipc-event-handoff TYPE  hurray_ipc_send / hurray_ipc_recv: no
//                                 host-blocking synchronisation on either
//                                 side, the event recorded on the legacy
//                                 default stream, the receiver's legacy
//                                 stream waits on the opened event, the
//                                 sender's event destroyed once the
//                                 receiver released, not before
//   probe ipc-event-async TYPE    hurray_ipc_export_async on a stream of the
//                                 sender, hurray_ipc_import_async on one of
//                                 the receiver: the descriptor carries the
//                                 event, each stream is the one named
//   probe ipc-event-open-fails TYPE  the receiver's cuIpcOpenEventHandle /
//                                 hipIpcOpenEventHandle fails (injected):
//                                 HURRAY_ERR_IPC, the mapping closed again,
//                                 every fd closed, the reference back
//   probe ipc-event-capture TYPE  the receiver's other thread captures a
//                                 blocking stream of the device while a
//                                 message comes (hurray_ipc_recv, then
//                                 hurray_ipc_import, no stream): each is
//                                 imported and ordered by a host wait on
//                                 the event (cuEventSynchronize /
//                                 hipEventSynchronize), no wait queued on
//                                 the legacy stream, the capture left
//                                 valid; after the capture a third message
//                                 waits on the device again
//   probe ipc-event-reset TYPE    (CUDA) the sender's primary context is
//                                 reset while the export's event is kept:
//                                 when the receiver's reference comes back,
//                                 no cuEventDestroy names the event the
//                                 reset destroyed (the fake counts any use)
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include "fake_control.h"
#include "hurray/hurray.h"
#include "ipc_probe.h"

namespace ipc_probe {
namespace {

// The legacy default stream as each fake logs it: CU_STREAM_LEGACY (0x1) /
// HIP's null stream.
void *legacy_stream() { return is_cuda() ? reinterpret_cast<void *>(0x1) : nullptr; }
int context_syncs() {
  auto f = reinterpret_cast<int (*)()>(control("context_synchronizations"));
  return f != nullptr ? f() : -1;
}
int stream_syncs() {
  auto f = reinterpret_cast<int (*)()>(control("stream_synchronizations"));
  return f != nullptr ? f() : -1;
}
int64_t live_ipc_events() {
  auto f = reinterpret_cast<int64_t (*)()>(control("live_ipc_events"));
  return f != nullptr ? f() : -1;
}
std::vector<fake_call> calls(const char *fn) {
  auto f = reinterpret_cast<int (*)(const char *, fake_call *, int)>(control("calls"));
  std::vector<fake_call> out(16);
  const int n = f != nullptr ? f(fn, out.data(), 16) : 0;
  out.resize(n < 16 ? n : 16);
  return out;
}
void *stream_create() {
  auto f = reinterpret_cast<void *(*)(int)>(control("stream_create"));
  return f != nullptr ? f(0) : nullptr;
}
void inject(const char *fn, int result, int times) {
  auto f = reinterpret_cast<void (*)(const char *, int, int)>(control("inject"));
  if (f != nullptr) f(fn, result, times);
}
const char *record_call() { return is_cuda() ? "cuEventRecord" : "hipEventRecord"; }
const char *wait_call() { return is_cuda() ? "cuStreamWaitEvent" : "hipStreamWaitEvent"; }
const char *get_event_call() { return is_cuda() ? "cuIpcGetEventHandle" : "hipIpcGetEventHandle"; }
const char *open_event_call() {
  return is_cuda() ? "cuIpcOpenEventHandle" : "hipIpcOpenEventHandle";
}
const char *destroy_call() { return is_cuda() ? "cuEventDestroy" : "hipEventDestroy"; }

int32_t alloc(hurray_buffer *h) {
  const int64_t shape[1] = {16};
  int32_t st = hurray_alloc(hurray_device{g_type, 0}, kF32, 1, shape, 0, h);
  if (st == HURRAY_OK) {
    for (int i = 0; i < 16; ++i) static_cast<float *>(h->data)[i] = static_cast<float>(i + 1);
  }
  return st;
}

// One message by hand: the descriptor and its fds (SCM_RIGHTS).
bool send_message(int sock, const hurray_ipc_message &m) {
  char control_buf[CMSG_SPACE(sizeof(int) * HURRAY_IPC_MAX_FDS)];
  std::memset(control_buf, 0, sizeof control_buf);
  iovec iov{const_cast<uint8_t *>(m.bytes), m.size};
  msghdr msg;
  std::memset(&msg, 0, sizeof msg);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control_buf;
  msg.msg_controllen = CMSG_SPACE(sizeof(int) * m.nfds);
  cmsghdr *c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * m.nfds);
  std::memcpy(CMSG_DATA(c), m.fds, sizeof(int) * m.nfds);
  return sendmsg(sock, &msg, 0) == static_cast<ssize_t>(m.size);
}
bool recv_message(int sock, hurray_ipc_message *m) {
  std::memset(m, 0, sizeof *m);
  char control_buf[CMSG_SPACE(sizeof(int) * HURRAY_IPC_MAX_FDS)];
  iovec iov{m->bytes, sizeof m->bytes};
  msghdr msg;
  std::memset(&msg, 0, sizeof msg);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control_buf;
  msg.msg_controllen = sizeof control_buf;
  const ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  cmsghdr *c = CMSG_FIRSTHDR(&msg);
  if (n <= 0 || c == nullptr) return false;
  m->size = static_cast<uint32_t>(n);
  m->nfds = static_cast<uint32_t>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
  std::memcpy(m->fds, CMSG_DATA(c), sizeof(int) * m->nfds);
  return true;
}

uint64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// The receiver's side of a handoff: the event opened, `stream` made to wait
// on it, the opened event destroyed, no host wait.
void check_receiver_waited(void *stream) {
  const std::vector<fake_call> opened = calls(open_event_call());
  const std::vector<fake_call> waits = calls(wait_call());
  const std::vector<fake_call> destroyed = calls(destroy_call());
  check(opened.size() == 1 && opened[0].result == 0, "child_event_opened", "%zu", opened.size());
  check(waits.size() == 1 && !opened.empty() && waits[0].ptr == opened[0].ptr &&
            waits[0].stream == stream,
        "child_stream_waits_on_event", "%zu waits, stream %p (want %p)", waits.size(),
        waits.empty() ? nullptr : waits[0].stream, stream);
  check(destroyed.size() == 1 && !opened.empty() && destroyed[0].ptr == opened[0].ptr,
        "child_opened_event_destroyed", "%zu", destroyed.size());
  check(context_syncs() == 0 && stream_syncs() == 0, "child_no_host_wait", "ctx %d stream %d",
        context_syncs(), stream_syncs());
  check(live_ipc_events() == 0, "child_no_interprocess_event", "%lld",
        static_cast<long long>(live_ipc_events()));
}

// --- event-handoff ---
int cmd_handoff() {
  int sv[2], ready[2], go[2];
  if (pipe(ready) != 0 || pipe(go) != 0) return 2;
  const pid_t pid = fork_receiver(sv, [&](int sock) {
    hurray_buffer r{};
    const int32_t st = hurray_ipc_recv(sock, &r);
    check(st == HURRAY_OK, "child_recv", "%s %s", hurray_status_name(st), hurray_last_error());
    if (st != HURRAY_OK) _exit(1);
    check(static_cast<const float *>(r.data)[2] == 3.0f, "child_reads", "");
    check_receiver_waited(legacy_stream());
    char byte = 'i';
    (void)!write(ready[1], &byte, 1);
    (void)!read(go[0], &byte, 1);
    check(hurray_buffer_release(&r) == HURRAY_OK, "child_release", "");
    _exit(g_failures == 0 ? 0 : 1);
  });
  if (pid < 0) return 2;
  hurray_buffer a{};
  if (alloc(&a) != HURRAY_OK) return 1;
  const int ctx0 = context_syncs(), s0 = stream_syncs();
  const uint64_t returns = ipc_returns();
  const int32_t st = hurray_ipc_send(sv[0], &a, HURRAY_IPC_DEFAULT);
  check(st == HURRAY_OK, "send", "%s %s", hurray_status_name(st), hurray_last_error());
  // Counted by the fake: 0 host-blocking synchronisations per export (it
  // was 1 context-wide before the event).
  check(context_syncs() == ctx0 && stream_syncs() == s0, "export_no_host_wait",
        "ctx +%d stream +%d", context_syncs() - ctx0, stream_syncs() - s0);
  const std::vector<fake_call> records = calls(record_call());
  const std::vector<fake_call> handles = calls(get_event_call());
  check(records.size() == 1 && records[0].stream == legacy_stream(), "event_on_legacy_stream",
        "%zu records, stream %p", records.size(), records.empty() ? nullptr : records[0].stream);
  check(handles.size() == 1 && !records.empty() && handles[0].ptr == records[0].ptr &&
            handles[0].result == 0,
        "event_handle_taken", "%zu", handles.size());
  char byte = 0;
  check(read(ready[0], &byte, 1) == 1 && byte == 'i', "child_imported", "");
  check(call_count(destroy_call()) == 0 && live_ipc_events() == 1, "event_kept_while_held",
        "%d destroyed, %lld live", call_count(destroy_call()),
        static_cast<long long>(live_ipc_events()));
  (void)!write(go[1], &byte, 1);
  check(wait_child(pid) == 0, "child_ok", "");
  check(wait_until([&] { return ipc_returns() == returns + 1; }), "returned", "");
  const std::vector<fake_call> destroyed = calls(destroy_call());
  check(destroyed.size() == 1 && !records.empty() && destroyed[0].ptr == records[0].ptr &&
            live_ipc_events() == 0,
        "event_destroyed_after_release", "%zu", destroyed.size());
  check(call_count(free_call()) == 1, "producer_released_once", "%d", call_count(free_call()));
  close(sv[0]);
  return g_failures == 0 ? 0 : 1;
}

// --- event-async ---
int cmd_async() {
  int sv[2];
  const pid_t pid = fork_receiver(sv, [](int sock) {
    void *mine = stream_create();
    hurray_ipc_message m;
    if (!recv_message(sock, &m)) _exit(3);
    hurray_buffer r{};
    const int32_t st = hurray_ipc_import_async(&m, mine, &r);
    check(st == HURRAY_OK, "child_import_async", "%s %s", hurray_status_name(st),
          hurray_last_error());
    if (st != HURRAY_OK) _exit(1);
    check_receiver_waited(mine);
    check(hurray_buffer_release(&r) == HURRAY_OK, "child_release", "");
    _exit(g_failures == 0 ? 0 : 1);
  });
  if (pid < 0) return 2;
  void *s = stream_create();
  hurray_buffer a{};
  if (alloc(&a) != HURRAY_OK) return 1;
  const int ctx0 = context_syncs(), s0 = stream_syncs();
  const uint64_t returns = ipc_returns();
  hurray_ipc_message m;
  int32_t st = hurray_ipc_export_async(&a, HURRAY_IPC_DEFAULT, s, &m);
  check(st == HURRAY_OK, "export_async", "%s %s", hurray_status_name(st), hurray_last_error());
  if (st != HURRAY_OK) return 1;
  check(context_syncs() == ctx0 && stream_syncs() == s0, "export_no_host_wait", "");
  const std::vector<fake_call> records = calls(record_call());
  check(records.size() == 1 && records[0].stream == s, "event_on_named_stream", "%zu",
        records.size());
  // The descriptor carries the event: flag bit 0 and the handle's bytes.
  const uint8_t *g = gpu_part(&m);
  bool event_set = false;
  for (int i = 0; i < 64; ++i) event_set = event_set || g[104 + i] != 0;
  check(get64(g + 32) == 1 && event_set, "descriptor_carries_event", "flags %llu",
        static_cast<unsigned long long>(get64(g + 32)));
  check(send_message(sv[0], m), "sent", "");
  // The child holds its own copies of the fds.
  check(hurray_ipc_message_discard(&m) == HURRAY_OK, "discard", "");
  check(wait_child(pid) == 0, "child_ok", "");
  check(wait_until([&] { return ipc_returns() == returns + 1; }), "returned", "");
  check(call_count(destroy_call()) == 1 && live_ipc_events() == 0, "event_destroyed", "");
  close(sv[0]);
  return g_failures == 0 ? 0 : 1;
}

// --- event-open-fails ---
int cmd_open_fails() {
  int sv[2];
  const pid_t pid = fork_receiver(sv, [](int sock) {
    hurray_ipc_message m;
    if (!recv_message(sock, &m)) _exit(3);
    int fds[HURRAY_IPC_MAX_FDS];
    const uint32_t nfds = m.nfds;
    std::memcpy(fds, m.fds, sizeof fds);
    inject(open_event_call(), 1, 1);  // CUDA_ERROR_INVALID_VALUE / hipErrorInvalidValue
    hurray_buffer r{};
    const int32_t st = hurray_ipc_import(&m, &r);
    bool closed = m.nfds == 0 && nfds >= 1;
    for (uint32_t i = 0; i < nfds; ++i) closed = closed && !fd_open(fds[i]);
    check(st == HURRAY_ERR_IPC && r.release_fn == nullptr, "refused", "%s %s",
          hurray_status_name(st), hurray_last_error());
    check(closed, "fds_closed", "");
    check(call_count(open_call()) == 1 && call_count(close_call()) == 1 && ipc_open_count() == 0,
          "mapping_undone", "open %d close %d", call_count(open_call()), call_count(close_call()));
    check(call_count(wait_call()) == 0, "no_wait_queued", "");
    _exit(g_failures == 0 ? 0 : 1);
  });
  if (pid < 0) return 2;
  hurray_buffer a{};
  if (alloc(&a) != HURRAY_OK) return 1;
  const uint64_t returns = ipc_returns();
  hurray_ipc_message m;
  const int32_t st = hurray_ipc_export(&a, HURRAY_IPC_DEFAULT, &m);
  check(st == HURRAY_OK, "export", "%s", hurray_last_error());
  if (st != HURRAY_OK) return 1;
  check(send_message(sv[0], m), "sent", "");
  check(hurray_ipc_message_discard(&m) == HURRAY_OK, "discard", "");
  check(wait_child(pid) == 0, "child_ok", "");
  check(wait_until([&] { return ipc_returns() == returns + 1; }), "returned", "");
  check(call_count(free_call()) == 1 && live_ipc_events() == 0, "released_once_event_destroyed",
        "%d", call_count(free_call()));
  close(sv[0]);
  return g_failures == 0 ? 0 : 1;
}

}  // namespace

// --- event-reset (CUDA) ---
int cmd_reset() {
  auto dead_event_uses = reinterpret_cast<int (*)()>(control("dead_event_uses"));
  auto renew = reinterpret_cast<void (*)(int)>(control("renew_context"));
  if (dead_event_uses == nullptr || renew == nullptr) return 2;
  int sv[2], ready[2], go[2];
  if (pipe(ready) != 0 || pipe(go) != 0) return 2;
  const pid_t pid = fork_receiver(sv, [&](int sock) {
    hurray_buffer r{};
    const int32_t st = hurray_ipc_recv(sock, &r);
    check(st == HURRAY_OK, "child_recv", "%s %s", hurray_status_name(st), hurray_last_error());
    if (st != HURRAY_OK) _exit(1);
    char byte = 'i';
    (void)!write(ready[1], &byte, 1);
    (void)!read(go[0], &byte, 1);
    check(hurray_buffer_release(&r) == HURRAY_OK, "child_release", "");
    _exit(g_failures == 0 ? 0 : 1);
  });
  if (pid < 0) return 2;
  hurray_buffer a{};
  if (alloc(&a) != HURRAY_OK) return 1;
  const uint64_t returns = ipc_returns();
  const int dead = dead_event_uses();
  hurray_diagnostics before{};
  before.struct_size = sizeof before;
  check(hurray_get_diagnostics(&before) == HURRAY_OK, "diagnostics", "");
  const int32_t st = hurray_ipc_send(sv[0], &a, HURRAY_IPC_DEFAULT);
  check(st == HURRAY_OK, "send", "%s %s", hurray_status_name(st), hurray_last_error());
  char byte = 0;
  check(read(ready[0], &byte, 1) == 1 && byte == 'i', "child_imported", "");
  renew(0);  // cuDevicePrimaryCtxReset, then another library's retain
  (void)!write(go[1], &byte, 1);
  check(wait_child(pid) == 0, "child_ok", "");
  check(wait_until([&] { return ipc_returns() == returns + 1; }), "returned", "");
  check(call_count(destroy_call()) == 0, "dead_event_not_destroyed", "%d cuEventDestroy",
        call_count(destroy_call()));
  check(dead_event_uses() == dead, "no_dead_event_use", "%d", dead_event_uses() - dead);
  hurray_diagnostics after{};
  after.struct_size = sizeof after;
  check(hurray_get_diagnostics(&after) == HURRAY_OK, "diagnostics_after", "");
  check(after.failed_releases == before.failed_releases, "no_failed_release", "%llu",
        static_cast<unsigned long long>(after.failed_releases - before.failed_releases));
  close(sv[0]);
  return g_failures == 0 ? 0 : 1;
}

// --- event-capture ---
int count_of(const char *name) {
  auto f = reinterpret_cast<int (*)()>(control(name));
  return f != nullptr ? f() : -1;
}
int cmd_capture() {
  int sv[2];
  const pid_t pid = fork_receiver(sv, [&](int sock) {
    // Another thread of the receiver captures a blocking stream of device 0
    // (as a framework's capture thread does) while messages arrive.
    auto create = reinterpret_cast<void *(*)(int)>(control("stream_create"));
    auto begin = reinterpret_cast<void (*)(void *, int)>(control("stream_begin_capture_mode"));
    auto end = reinterpret_cast<int (*)(void *)>(control("stream_end_capture"));
    check(create != nullptr && begin != nullptr && end != nullptr, "child_controls", "");
    if (create == nullptr || begin == nullptr || end == nullptr) _exit(1);
    void *side = create(0);
    std::thread([&] { begin(side, 2); }).join();  // relaxed mode: the implicit rule alone
    const int invalidated = count_of("invalidated_captures");
    hurray_buffer r1{}, r2{}, r3{};
    int32_t st = hurray_ipc_recv(sock, &r1);
    check(st == HURRAY_OK, "child_recv_during_capture", "%s %s", hurray_status_name(st),
          hurray_last_error());
    hurray_ipc_message m;
    check(recv_message(sock, &m), "child_message", "");
    st = hurray_ipc_import(&m, &r2);
    check(st == HURRAY_OK, "child_import_during_capture", "%s %s", hurray_status_name(st),
          hurray_last_error());
    check(calls(wait_call()).empty(), "child_no_stream_wait_during_capture", "%zu",
          calls(wait_call()).size());
    check(count_of("event_synchronizations") == 2, "child_host_waits_on_event", "%d",
          count_of("event_synchronizations"));
    check(count_of("invalidated_captures") == invalidated, "child_capture_not_invalidated", "");
    check(end(side) == 1, "child_capture_valid", "");
    check(st == HURRAY_OK && static_cast<const float *>(r2.data)[2] == 3.0f, "child_reads", "");
    // After the capture: the device wait again.
    st = hurray_ipc_recv(sock, &r3);
    check(st == HURRAY_OK, "child_recv_after_capture", "%s %s", hurray_status_name(st),
          hurray_last_error());
    const std::vector<fake_call> waits = calls(wait_call());
    check(waits.size() == 1 && waits[0].stream == legacy_stream(), "child_waits_after_capture",
          "%zu", waits.size());
    check(count_of("event_synchronizations") == 2, "child_no_host_wait_after_capture", "%d",
          count_of("event_synchronizations"));
    for (hurray_buffer *b : {&r1, &r2, &r3}) {
      if (b->release_fn != nullptr)
        check(hurray_buffer_release(b) == HURRAY_OK, "child_release", "");
    }
    _exit(g_failures == 0 ? 0 : 1);
  });
  if (pid < 0) return 2;
  hurray_buffer a{}, b{}, c{};
  if (alloc(&a) != HURRAY_OK || alloc(&b) != HURRAY_OK || alloc(&c) != HURRAY_OK) return 1;
  const uint64_t returns = ipc_returns();
  int32_t st = hurray_ipc_send(sv[0], &a, HURRAY_IPC_DEFAULT);
  check(st == HURRAY_OK, "send", "%s %s", hurray_status_name(st), hurray_last_error());
  hurray_ipc_message m;
  st = hurray_ipc_export(&b, HURRAY_IPC_DEFAULT, &m);
  check(st == HURRAY_OK, "export", "%s %s", hurray_status_name(st), hurray_last_error());
  if (st == HURRAY_OK) {
    check(send_message(sv[0], m), "send_by_hand", "");
    check(hurray_ipc_message_discard(&m) == HURRAY_OK, "discard_own_copy", "");
  }
  st = hurray_ipc_send(sv[0], &c, HURRAY_IPC_DEFAULT);
  check(st == HURRAY_OK, "send_after", "%s %s", hurray_status_name(st), hurray_last_error());
  check(wait_child(pid) == 0, "child_ok", "");
  check(wait_until([&] { return ipc_returns() == returns + 3; }), "returned", "");
  check(call_count(free_call()) == 3, "producer_released_once", "%d", call_count(free_call()));
  close(sv[0]);
  return g_failures == 0 ? 0 : 1;
}

// `cmd` without "ipc-event-"; 64 when unknown.
int run_event_command(const std::string &cmd) {
  if (cmd == "reset") return cmd_reset();
  if (cmd == "handoff") return cmd_handoff();
  if (cmd == "async") return cmd_async();
  if (cmd == "open-fails") return cmd_open_fails();
  if (cmd == "capture") return cmd_capture();
  return 64;
}

}  // namespace ipc_probe
