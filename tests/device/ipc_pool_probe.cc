// SPDX-License-Identifier: Apache-2.0
// CUDA and HIP stream-ordered pool memory across processes (descriptor
// kinds 5 and 6, docs/impl/ipc.md §6) against the fake drivers' pools
// (tests/fake_drivers/fake_pool.h): the probe's `ipc-pool-*` commands (run
// by ipc_test.cc with the CUDA fake and with the HIP fake; TYPE 2 or 10).
// The producer's memory comes from hurray_alloc_async with
// HURRAY_ALLOC_SHAREABLE (libhurray's IPC-capable pool) on a stream of the
// fake.
//
//   probe ipc-pool-roundtrip 2  a child imports an allocation and a share of
//                               it over one connection, reads, writes,
//                               releases; exact driver calls on both sides
//   probe ipc-pool-once 2       K buffers over one connection: one pool fd
//                               (one import); a second connection gets it
//                               again; standalone messages carry it each time
//   probe ipc-pool-default 2    default-pool memory refused, nothing consumed
//   probe ipc-pool-kill 2       the child is SIGKILLed holding the import
//   probe ipc-pool-order 2      the fake counts an exporter's free before
//                               the importer's (the documented order)
//   probe ipc-pool-retry 2      the receiver's first pool import fails
//                               (injected): the kind-6 messages after it
//                               still import, from the fd kept at receipt
//   probe ipc-pool-two 2        two connections from one sender: each
//                               brings the pool (kind 5) but it is imported
//                               once, kept while either connection lasts
//   probe ipc-pool-unread 2     a receiver that closes its socket without
//                               reading its end: the pool goes at its next
//                               hurray_ipc_recv on another connection
//   probe ipc-pool-reset 2      CUDA: libhurray's own pool is made again
//                               after cuDevicePrimaryCtxReset destroyed it
//   probe ipc-pool-device-reset 2  CUDA, the fake's rule: a reset of device
//                               1 destroys the pool imported on device 1,
//                               not the one imported on device 0
//   probe ipc-pool-recv-reset 2 CUDA: the receiver's context reset between
//                               a kind-5 and a kind-6 message of a pool
//   probe ipc-pool-user 10      HIP: a pool the caller made, found by
//                               HIP_POINTER_ATTRIBUTE_MEMPOOL_HANDLE; with
//                               the attribute unanswered, refused clearly
//                               while libhurray's own pool memory still goes
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <cinttypes>
#include <cstdlib>
#include <cstring>

#include "fake_control.h"
#include "ipc_probe.h"

namespace ipc_probe {
namespace {

constexpr int kElems = 16;

int64_t pool_imports() { return fake_count("pool_imports"); }
int64_t pointer_imports() { return fake_count("pool_pointer_imports"); }
int64_t live_pointer_imports() { return fake_count("pool_live_pointer_imports"); }
int64_t pool_allocations() { return fake_count("pool_live_allocations"); }
int64_t violations() { return fake_count("pool_order_violations"); }

// The vendor's name of an entry point.
const char *N(const char *cuda, const char *hip) { return is_cuda() ? cuda : hip; }

// Kills a holding child (fork_holder) on an early return, so that no
// child outlives the probe (and holds its output open).
struct HolderGuard {
  pid_t pid;
  ~HolderGuard() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      (void)wait_child(pid);
    }
  }
};

void *g_stream = nullptr;

// 16 floats (values 1..16) of libhurray's IPC-capable pool on device 0.
int32_t pool_handle(hurray_buffer *h, uint64_t flags = HURRAY_ALLOC_SHAREABLE) {
  if (g_stream == nullptr) {
    auto create = fake_fn<void *(*)(int)>("stream_create");
    g_stream = create != nullptr ? create(0) : nullptr;
  }
  const int64_t shape[1] = {kElems};
  const int32_t st =
      hurray_alloc_async(hurray_device{g_type, 0}, kF32, 1, shape, flags, g_stream, h);
  check(st == HURRAY_OK, "alloc_async", "%s %s", hurray_status_name(st), hurray_last_error());
  if (st != HURRAY_OK) return st;
  for (int i = 0; i < kElems; ++i) static_cast<float *>(h->data)[i] = static_cast<float>(i + 1);
  return HURRAY_OK;
}

// The child of roundtrip: two handles over one connection, then the end of
// the connection.
[[noreturn]] void roundtrip_child(int sock) {
  const int fds_before = count_fds();
  hurray_buffer a{}, b{};
  child_recv_two(sock, &a, &b);
  // The pool came once (kind 5, then kind 6), each pointer on its own.
  check(pool_imports() == 1 &&
            call_count(N("cuMemPoolImportFromShareableHandle",
                         "hipMemPoolImportFromShareableHandle")) == 1 &&
            pointer_imports() == 2 &&
            call_count(N("cuIpcOpenMemHandle", "hipIpcOpenMemHandle")) == 0 &&
            call_count(N("cuMemImportFromShareableHandle", "hipMemImportFromShareableHandle")) == 0,
        "child_imported", "pools %lld pointers %lld", static_cast<long long>(pool_imports()),
        static_cast<long long>(pointer_imports()));
  check(a.device.device_type == g_type && a.ndim == 1 && a.shape[0] == kElems, "child_layout", "");
  const float *fa = static_cast<const float *>(a.data);
  const float *fb = static_cast<const float *>(b.data);
  check(fa[0] == 1.0f && fa[15] == 16.0f && fb[3] == 4.0f, "child_reads", "%g %g %g", fa[0], fa[15],
        fb[3]);
  static_cast<float *>(a.data)[1] = 42.0f;  // seen by the parent
  check(hurray_buffer_release(&a) == HURRAY_OK && hurray_buffer_release(&b) == HURRAY_OK,
        "child_release", "");
  // Each imported pointer freed by the importer (cuMemFree); the pool stays
  // with the connection until it ends.
  check(call_count(N("cuMemFree", "hipFree")) == 2 && live_pointer_imports() == 0 &&
            call_count(N("cuMemPoolDestroy", "hipMemPoolDestroy")) == 0,
        "child_freed_pointers", "frees %d live %lld destroys %d",
        call_count(N("cuMemFree", "hipFree")), static_cast<long long>(live_pointer_imports()),
        call_count(N("cuMemPoolDestroy", "hipMemPoolDestroy")));
  hurray_buffer none{};
  const int32_t st = hurray_ipc_recv(sock, &none);
  check(st == HURRAY_ERR_IPC_CLOSED && call_count(N("cuMemPoolDestroy", "hipMemPoolDestroy")) == 1,
        "child_pool_destroyed", "%s destroys %d", hurray_status_name(st),
        call_count(N("cuMemPoolDestroy", "hipMemPoolDestroy")));
  check(count_fds() == fds_before, "child_fds_back", "%d -> %d", fds_before, count_fds());
  _exit(g_failures == 0 ? 0 : 1);
}

int cmd_roundtrip() {
  int sv[2];
  const pid_t pid = fork_receiver(sv, roundtrip_child);
  if (pid < 0) return 2;
  hurray_buffer a{}, shares[3]{};
  if (pool_handle(&a) != HURRAY_OK) return 1;
  check(call_count(N("cuMemPoolCreate", "hipMemPoolCreate")) == 1 &&
            call_count(N("cuMemAllocFromPoolAsync", "hipMallocFromPoolAsync")) == 1 &&
            call_count(N("cuMemAllocAsync", "hipMallocAsync")) == 0,
        "allocated_from_own_pool", "creates %d allocs %d",
        call_count(N("cuMemPoolCreate", "hipMemPoolCreate")),
        call_count(N("cuMemAllocFromPoolAsync", "hipMallocFromPoolAsync")));
  check(hurray_share(&a, 3, shares) == HURRAY_OK, "share", "");
  hurray_buffer &h = shares[0], &s = shares[1], &keep = shares[2];
  const uint64_t returns = ipc_returns();
  int32_t st = hurray_ipc_send(sv[0], &h, HURRAY_IPC_DEFAULT);
  check(st == HURRAY_OK && h.release_fn == nullptr, "send", "%s %s", hurray_status_name(st),
        hurray_last_error());
  st = hurray_ipc_send(sv[0], &s, HURRAY_IPC_ZERO_COPY_ONLY);
  check(st == HURRAY_OK, "send_share", "%s %s", hurray_status_name(st), hurray_last_error());
  check(
      call_count(N("cuMemPoolExportToShareableHandle", "hipMemPoolExportToShareableHandle")) == 1 &&
          call_count(N("cuMemPoolExportPointer", "hipMemPoolExportPointer")) == 2 &&
          call_count(N("cuIpcGetMemHandle", "hipIpcGetMemHandle")) == 0 &&
          call_count(N("cuCtxSynchronize", "hipDeviceSynchronize")) == 0,
      "exported_pool_once", "pool exports %d pointer exports %d",
      call_count(N("cuMemPoolExportToShareableHandle", "hipMemPoolExportToShareableHandle")),
      call_count(N("cuMemPoolExportPointer", "hipMemPoolExportPointer")));
  shutdown(sv[0], SHUT_WR);
  const int code = wait_child(pid);
  check(code == 0, "child", "exit %d", code);
  check(wait_until([&] { return ipc_returns() == returns + 2; }), "returned", "%llu",
        static_cast<unsigned long long>(ipc_returns() - returns));
  check(call_count(N("cuMemFreeAsync", "hipFreeAsync")) == 0 && pool_allocations() == 1,
        "kept_by_local_share", "");
  check(static_cast<const float *>(keep.data)[1] == 42.0f, "child_write_seen", "%g",
        static_cast<const float *>(keep.data)[1]);
  check(hurray_buffer_release(&keep) == HURRAY_OK, "release_keep", "");
  check(call_count(N("cuMemFreeAsync", "hipFreeAsync")) == 1 && pool_allocations() == 0 &&
            violations() == 0,
        "producer_freed_once_after_the_importer", "frees %d live %lld violations %lld",
        call_count(N("cuMemFreeAsync", "hipFreeAsync")), static_cast<long long>(pool_allocations()),
        static_cast<long long>(violations()));
  close(sv[0]);
  return g_failures == 0 ? 0 : 1;
}

constexpr int kBuffers = 8;

// The child of once: kBuffers handles over one connection.
[[noreturn]] void once_child(int sock) {
  hurray_buffer r[kBuffers]{};
  int got = 0;
  for (int i = 0; i < kBuffers; ++i) got += hurray_ipc_recv(sock, &r[i]) == HURRAY_OK ? 1 : 0;
  check(got == kBuffers, "child_recv_all", "%d %s", got, hurray_last_error());
  check(pool_imports() == 1 && pointer_imports() == kBuffers, "child_one_pool_fd",
        "pool imports %lld pointer imports %lld", static_cast<long long>(pool_imports()),
        static_cast<long long>(pointer_imports()));
  bool values = true;
  for (int i = 0; i < got; ++i) values = values && static_cast<const float *>(r[i].data)[0] == 1.0f;
  check(values, "child_reads", "");
  for (int i = 0; i < got; ++i) (void)hurray_buffer_release(&r[i]);
  hurray_buffer none{};
  check(hurray_ipc_recv(sock, &none) == HURRAY_ERR_IPC_CLOSED &&
            call_count(N("cuMemPoolDestroy", "hipMemPoolDestroy")) == 1 &&
            live_pointer_imports() == 0,
        "child_done", "destroys %d", call_count(N("cuMemPoolDestroy", "hipMemPoolDestroy")));
  _exit(g_failures == 0 ? 0 : 1);
}

int cmd_once() {
  // Two connections, each to its own child (both forked before any GPU
  // call), served one after the other: each gets the pool's fd once.
  int socks[2][2];
  pid_t pids[2];
  for (int conn = 0; conn < 2; ++conn) {
    pids[conn] = fork_receiver(socks[conn], once_child);
    if (pids[conn] < 0) return 2;
  }
  const uint64_t returns = ipc_returns();
  for (int conn = 0; conn < 2; ++conn) {
    int *sv = socks[conn];
    const pid_t pid = pids[conn];
    const int exports_before =
        call_count(N("cuMemPoolExportToShareableHandle", "hipMemPoolExportToShareableHandle"));
    for (int i = 0; i < kBuffers; ++i) {
      hurray_buffer h{};
      if (pool_handle(&h) != HURRAY_OK) return 1;
      const int32_t st = hurray_ipc_send(sv[0], &h, HURRAY_IPC_DEFAULT);
      check(st == HURRAY_OK, "send", "%s", hurray_last_error());
    }
    check(call_count(N("cuMemPoolExportToShareableHandle", "hipMemPoolExportToShareableHandle")) ==
              exports_before + 1,
          "one_pool_fd_per_connection", "%d",
          call_count(N("cuMemPoolExportToShareableHandle", "hipMemPoolExportToShareableHandle")) -
              exports_before);
    shutdown(sv[0], SHUT_WR);
    check(wait_child(pid) == 0, "child", "");
    close(sv[0]);
  }
  check(wait_until([&] { return ipc_returns() == returns + 2 * kBuffers; }), "returned", "");
  check(wait_until([&] { return pool_allocations() == 0; }) && violations() == 0, "all_freed", "");
  // A standalone message carries the pool's fd every time (kind 5, 2 fds).
  for (int i = 0; i < 2; ++i) {
    hurray_buffer h{};
    if (pool_handle(&h) != HURRAY_OK) return 1;
    hurray_ipc_message m;
    const int32_t st = hurray_ipc_export(&h, HURRAY_IPC_DEFAULT, &m);
    check(st == HURRAY_OK && m.bytes[16] == 5 && m.nfds == 2 && fd_open(m.fds[1]),
          "standalone_carries_the_pool", "%s kind %u nfds %u", hurray_status_name(st), m.bytes[16],
          m.nfds);
    if (st == HURRAY_OK) check(hurray_ipc_message_discard(&m) == HURRAY_OK, "discard", "");
  }
  check(wait_until([&] { return pool_allocations() == 0; }), "standalone_returned", "");
  return g_failures == 0 ? 0 : 1;
}

int cmd_default() {
  hurray_buffer h{};
  if (pool_handle(&h, 0) != HURRAY_OK) return 1;  // cuMemAllocAsync: the default pool
  const int fds = count_fds();
  const int events = call_count(N("cuEventCreate", "hipEventCreateWithFlags"));
  hurray_ipc_message m;
  std::memset(&m, 0, sizeof m);
  int32_t st = hurray_ipc_export(&h, HURRAY_IPC_DEFAULT, &m);
  char want[1024];
  if (is_cuda()) {
    std::snprintf(want, sizeof want,
                  "%p on CUDA device 0 comes from a stream-ordered memory pool that cannot be "
                  "shared with another process (the device's default pool, which cuMemAllocAsync "
                  "and hurray_alloc_async use, has no shareable handle type): allocate it with "
                  "hurray_alloc_async and HURRAY_ALLOC_SHAREABLE, or from a pool made by "
                  "cuMemPoolCreate with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR in "
                  "CUmemPoolProps::handleTypes",
                  h.data);
  } else {
    std::snprintf(want, sizeof want,
                  "%p on HIP device 0 comes from a stream-ordered memory pool that cannot be "
                  "shared with another process (the device's default pool, which hipMallocAsync "
                  "and hurray_alloc_async use, has no shareable handle type): allocate it with "
                  "hurray_alloc_async and HURRAY_ALLOC_SHAREABLE, or from a pool made by "
                  "hipMemPoolCreate with hipMemHandleTypePosixFileDescriptor in "
                  "hipMemPoolProps::handleTypes",
                  h.data);
  }
  check(st == HURRAY_ERR_UNSUPPORTED_DEVICE && std::strcmp(hurray_last_error(), want) == 0,
        "export_refused", "%s %s", hurray_status_name(st), hurray_last_error());
  check(h.release_fn != nullptr && m.nfds == 0 && count_fds() == fds &&
            call_count(N("cuEventCreate", "hipEventCreateWithFlags")) == events &&
            call_count(N("cuMemPoolExportPointer", "hipMemPoolExportPointer")) == 0,
        "nothing_consumed", "fds %d -> %d", fds, count_fds());
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return 2;
  st = hurray_ipc_send(sv[0], &h, HURRAY_IPC_DEFAULT);
  check(st == HURRAY_ERR_UNSUPPORTED_DEVICE && std::strcmp(hurray_last_error(), want) == 0 &&
            h.release_fn != nullptr,
        "send_refused", "%s", hurray_last_error());
  close(sv[0]);
  close(sv[1]);
  check(hurray_buffer_release(&h) == HURRAY_OK &&
            call_count(N("cuMemFreeAsync", "hipFreeAsync")) == 1,
        "released_by_owner", "");
  return g_failures == 0 ? 0 : 1;
}

int cmd_kill() {
  int sv[2], ready[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0 || pipe(ready) != 0) return 2;
  const pid_t pid = fork_holder(sv, ready[1]);
  HolderGuard guard{pid};
  hurray_buffer h{};
  if (pool_handle(&h) != HURRAY_OK) return 1;
  const uint64_t returns = ipc_returns();
  const int32_t st = hurray_ipc_send(sv[0], &h, HURRAY_IPC_DEFAULT);
  check(st == HURRAY_OK, "send", "%s", hurray_last_error());
  if (st != HURRAY_OK) return 1;
  char byte = 0;
  check(read(ready[0], &byte, 1) == 1 && byte == 'y', "child_imported", "%c", byte);
  check(call_count(N("cuMemFreeAsync", "hipFreeAsync")) == 0, "held_by_child", "");
  kill(pid, SIGKILL);
  check(wait_child(pid) == 128 + SIGKILL, "killed", "");
  guard.pid = -1;
  check(wait_until([&] { return ipc_returns() == returns + 1; }), "returned", "");
  // The dead importer's import went with it: no order violation.
  check(wait_until([&] { return pool_allocations() == 0; }) &&
            call_count(N("cuMemFreeAsync", "hipFreeAsync")) == 1 && violations() == 0,
        "producer_freed_once", "frees %d violations %lld",
        call_count(N("cuMemFreeAsync", "hipFreeAsync")), static_cast<long long>(violations()));
  return g_failures == 0 ? 0 : 1;
}

// The fake's rule itself: an exporter that frees while a live importer
// holds the pointer is counted (what the library must never do; the
// roundtrip checks it does not).
int cmd_order() {
  int sv[2], ready[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0 || pipe(ready) != 0) return 2;
  const pid_t pid = fork_holder(sv, ready[1]);
  HolderGuard guard{pid};
  hurray_buffer a{}, shares[2]{};
  if (pool_handle(&a) != HURRAY_OK) return 1;
  check(hurray_share(&a, 2, shares) == HURRAY_OK, "share", "");
  hurray_buffer &h = shares[0], &raw = shares[1];
  const int32_t st = hurray_ipc_send(sv[0], &h, HURRAY_IPC_DEFAULT);
  check(st == HURRAY_OK, "send", "%s", hurray_last_error());
  if (st != HURRAY_OK) return 1;
  char byte = 0;
  check(read(ready[0], &byte, 1) == 1 && byte == 'y', "child_imported", "%c", byte);
  // Free out of order through the driver itself, the child still holding it.
  void *lib = dlopen(std::getenv(is_cuda() ? "HURRAY_CUDA_DRIVER_PATH" : "HURRAY_HIP_LIBRARY_PATH"),
                     RTLD_NOW | RTLD_LOCAL);
  void *fn = nullptr;
  if (lib != nullptr && is_cuda()) {
    using GetProc = int (*)(const char *, void **, int, uint64_t);
    auto get = reinterpret_cast<GetProc>(dlsym(lib, "cuGetProcAddress"));
    if (get != nullptr) (void)get("cuMemFree", &fn, 3020, 0);
  } else if (lib != nullptr) {
    fn = dlsym(lib, "hipFree");
  }
  auto set_current = fake_fn<void (*)(int)>("set_current_device");
  if (set_current != nullptr) set_current(0);
  int r = -1;
  if (fn != nullptr && is_cuda()) {
    r = reinterpret_cast<int (*)(uint64_t)>(fn)(
        static_cast<uint64_t>(reinterpret_cast<uintptr_t>(raw.data)));
  } else if (fn != nullptr) {
    r = reinterpret_cast<int (*)(void *)>(fn)(raw.data);
  }
  if (set_current != nullptr) set_current(is_cuda() ? -1 : 0);
  check(r == 0 && violations() == 1, "exporter_first_is_counted", "%d %lld", r,
        static_cast<long long>(violations()));
  kill(pid, SIGKILL);
  check(wait_child(pid) == 128 + SIGKILL, "killed", "");
  guard.pid = -1;
  close(sv[0]);
  // The library's own release now frees twice: counted as a failed release.
  (void)hurray_buffer_release(&raw);
  return g_failures == 0 ? 0 : 1;
}

const char *pool_import_call() {
  return N("cuMemPoolImportFromShareableHandle", "hipMemPoolImportFromShareableHandle");
}
int destroys() { return call_count(N("cuMemPoolDestroy", "hipMemPoolDestroy")); }

// The child of retry: the first pool import fails (injected out of memory,
// a transient driver failure), so the first message (kind 5) is refused;
// the two after it (kind 6, no fd) import from the pool's fd kept when the
// first arrived. Before, the sender had marked the pool sent and every
// later message of that pool on the connection was refused.
[[noreturn]] void retry_child(int sock) {
  const int fds_before = count_fds();
  fake_fn<void (*)(const char *, int, int)>("inject")(pool_import_call(), 2, 1);
  hurray_buffer r[3]{};
  const int32_t s0 = hurray_ipc_recv(sock, &r[0]);
  check(s0 == HURRAY_ERR_OUT_OF_MEMORY && r[0].release_fn == nullptr, "first_refused", "%s %s",
        hurray_status_name(s0), hurray_last_error());
  const int32_t s1 = hurray_ipc_recv(sock, &r[1]);
  check(s1 == HURRAY_OK, "kind6_after_failed_kind5", "%s %s", hurray_status_name(s1),
        hurray_last_error());
  const int32_t s2 = hurray_ipc_recv(sock, &r[2]);
  check(s2 == HURRAY_OK, "next_kind6", "%s %s", hurray_status_name(s2), hurray_last_error());
  check(call_count(pool_import_call()) == 2 && pool_imports() == 1 && pointer_imports() == 2,
        "imported_from_kept_fd", "calls %d imports %lld pointers %lld",
        call_count(pool_import_call()), static_cast<long long>(pool_imports()),
        static_cast<long long>(pointer_imports()));
  if (s1 == HURRAY_OK && s2 == HURRAY_OK) {
    check(static_cast<const float *>(r[1].data)[4] == 5.0f &&
              static_cast<const float *>(r[2].data)[15] == 16.0f,
          "child_reads", "");
  }
  for (hurray_buffer &b : r) {
    if (b.release_fn != nullptr) (void)hurray_buffer_release(&b);
  }
  hurray_buffer none{};
  const int32_t st = hurray_ipc_recv(sock, &none);
  check(st == HURRAY_ERR_IPC_CLOSED && destroys() == 1 && live_pointer_imports() == 0,
        "child_pool_destroyed", "%s destroys %d", hurray_status_name(st), destroys());
  check(count_fds() == fds_before, "child_fds_back", "%d -> %d", fds_before, count_fds());
  _exit(g_failures == 0 ? 0 : 1);
}

int cmd_retry() {
  int sv[2];
  const pid_t pid = fork_receiver(sv, retry_child);
  if (pid < 0) return 2;
  const uint64_t returns = ipc_returns();
  for (int i = 0; i < 3; ++i) {
    hurray_buffer h{};
    if (pool_handle(&h) != HURRAY_OK) return 1;
    const int32_t st = hurray_ipc_send(sv[0], &h, HURRAY_IPC_DEFAULT);
    check(st == HURRAY_OK, "send", "%s", hurray_last_error());
  }
  check(call_count(N("cuMemPoolExportToShareableHandle", "hipMemPoolExportToShareableHandle")) == 1,
        "pool_fd_sent_once", "");
  shutdown(sv[0], SHUT_WR);
  check(wait_child(pid) == 0, "child", "");
  close(sv[0]);
  check(wait_until([&] { return ipc_returns() == returns + 3; }), "returned", "%llu",
        static_cast<unsigned long long>(ipc_returns() - returns));
  check(wait_until([&] { return pool_allocations() == 0; }) && violations() == 0, "all_freed", "");
  return g_failures == 0 ? 0 : 1;
}

// Two connections (socket pairs) from this process to one child, made
// before the fork; the child gets both receiving ends.
template <typename Child>
pid_t fork_two(int a[2], int b[2], Child child) {
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, a) != 0 ||
      socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, b) != 0) {
    return -1;
  }
  const pid_t pid = fork();
  if (pid == 0) {
    close(a[0]);
    close(b[0]);
    child(a[1], b[1]);
    _exit(1);
  }
  close(a[1]);
  close(b[1]);
  return pid;
}

// The child of two: kind 5 on A, kind 5 on B, kind 6 on A, kind 6 on B.
// One pool import serves both connections; the pool is destroyed once the
// last of them ended.
[[noreturn]] void two_child(int a, int b) {
  const int fds_before = count_fds();
  hurray_buffer r[4]{};
  int ok = 0;
  for (int i = 0; i < 4; ++i) ok += hurray_ipc_recv(i % 2 == 0 ? a : b, &r[i]) == HURRAY_OK;
  check(ok == 4, "child_recv_all", "%d %s", ok, hurray_last_error());
  check(pool_imports() == 1 && call_count(pool_import_call()) == 1 && pointer_imports() == 4,
        "one_import_for_both_connections", "imports %lld pointers %lld",
        static_cast<long long>(pool_imports()), static_cast<long long>(pointer_imports()));
  for (int i = 0; i < ok; ++i) (void)hurray_buffer_release(&r[i]);
  hurray_buffer none{};
  int32_t st = hurray_ipc_recv(a, &none);
  check(st == HURRAY_ERR_IPC_CLOSED && destroys() == 0, "kept_for_the_other_connection",
        "%s destroys %d", hurray_status_name(st), destroys());
  st = hurray_ipc_recv(b, &none);
  check(st == HURRAY_ERR_IPC_CLOSED && destroys() == 1, "destroyed_with_the_last", "%s destroys %d",
        hurray_status_name(st), destroys());
  check(count_fds() == fds_before, "child_fds_back", "%d -> %d", fds_before, count_fds());
  _exit(g_failures == 0 ? 0 : 1);
}

int cmd_two() {
  int a[2], b[2];
  const pid_t pid = fork_two(a, b, two_child);
  if (pid < 0) return 2;
  const uint64_t returns = ipc_returns();
  for (int i = 0; i < 4; ++i) {
    hurray_buffer h{};
    if (pool_handle(&h) != HURRAY_OK) return 1;
    const int32_t st = hurray_ipc_send(i % 2 == 0 ? a[0] : b[0], &h, HURRAY_IPC_DEFAULT);
    check(st == HURRAY_OK, "send", "%s", hurray_last_error());
  }
  check(call_count(N("cuMemPoolExportToShareableHandle", "hipMemPoolExportToShareableHandle")) == 2,
        "pool_fd_once_per_connection", "");
  shutdown(a[0], SHUT_WR);
  shutdown(b[0], SHUT_WR);
  check(wait_child(pid) == 0, "child", "");
  close(a[0]);
  close(b[0]);
  check(wait_until([&] { return ipc_returns() == returns + 4; }), "returned", "");
  return g_failures == 0 ? 0 : 1;
}

// The child of unread: one pool buffer on A, released; A closed without
// reading its end (no HURRAY_ERR_IPC_CLOSED). Its next hurray_ipc_recv, on
// B (a CPU buffer), finds A gone from the process and lets go of its pool.
[[noreturn]] void unread_child(int a, int b) {
  const int fds_before = count_fds();
  hurray_buffer r{};
  int32_t st = hurray_ipc_recv(a, &r);
  check(st == HURRAY_OK && pool_imports() == 1, "child_recv", "%s %s", hurray_status_name(st),
        hurray_last_error());
  if (st == HURRAY_OK) (void)hurray_buffer_release(&r);
  check(destroys() == 0, "kept_while_connected", "%d", destroys());
  close(a);
  st = hurray_ipc_recv(b, &r);
  check(st == HURRAY_OK && r.device.device_type == HURRAY_DEVICE_CPU, "child_recv_cpu", "%s %s",
        hurray_status_name(st), hurray_last_error());
  check(destroys() == 1 && live_pointer_imports() == 0, "dropped_at_next_recv", "destroys %d",
        destroys());
  if (st == HURRAY_OK) (void)hurray_buffer_release(&r);
  hurray_buffer none{};
  st = hurray_ipc_recv(b, &none);
  check(st == HURRAY_ERR_IPC_CLOSED && destroys() == 1, "child_done", "%s", hurray_status_name(st));
  check(count_fds() == fds_before - 1, "child_fds_back", "%d -> %d (A closed)", fds_before,
        count_fds());
  _exit(g_failures == 0 ? 0 : 1);
}

int cmd_unread() {
  int a[2], b[2];
  const pid_t pid = fork_two(a, b, unread_child);
  if (pid < 0) return 2;
  hurray_buffer h{};
  if (pool_handle(&h) != HURRAY_OK) return 1;
  int32_t st = hurray_ipc_send(a[0], &h, HURRAY_IPC_DEFAULT);
  check(st == HURRAY_OK, "send_pool", "%s", hurray_last_error());
  hurray_buffer c{};
  const int64_t shape[1] = {4};
  st =
      hurray_alloc(hurray_device{HURRAY_DEVICE_CPU, 0}, kF32, 1, shape, HURRAY_ALLOC_SHAREABLE, &c);
  check(st == HURRAY_OK, "alloc_cpu", "%s", hurray_last_error());
  st = hurray_ipc_send(b[0], &c, HURRAY_IPC_DEFAULT);
  check(st == HURRAY_OK, "send_cpu", "%s", hurray_last_error());
  shutdown(b[0], SHUT_WR);
  check(wait_child(pid) == 0, "child", "");
  close(a[0]);
  close(b[0]);
  return g_failures == 0 ? 0 : 1;
}

// CUDA: cuDevicePrimaryCtxReset destroys the pools made in the context,
// libhurray's own IPC-capable pool among them (fake_pool.h drop_device).
// The next HURRAY_ALLOC_SHAREABLE allocation makes a new pool in the new
// incarnation of the context instead of allocating from the dead one, and
// that memory is sent as kind 5 with the new pool's fd.
int cmd_reset() {
  if (!is_cuda()) return 64;
  hurray_buffer h{};
  if (pool_handle(&h) != HURRAY_OK) return 1;
  check(hurray_buffer_release(&h) == HURRAY_OK, "release", "");
  fake_fn<void (*)(int)>("primary_ctx_reset")(0);
  if (pool_handle(&h) != HURRAY_OK) return 1;
  check(call_count("cuMemPoolCreate") == 2 && call_count("cuMemAllocFromPoolAsync") == 2,
        "new_pool_after_reset", "creates %d allocs %d", call_count("cuMemPoolCreate"),
        call_count("cuMemAllocFromPoolAsync"));
  hurray_ipc_message m;
  const int32_t st = hurray_ipc_export(&h, HURRAY_IPC_DEFAULT, &m);
  check(st == HURRAY_OK && m.bytes[16] == 5 && m.nfds == 2, "exported", "%s %s",
        hurray_status_name(st), hurray_last_error());
  if (st == HURRAY_OK) check(hurray_ipc_message_discard(&m) == HURRAY_OK, "discard", "");
  check(wait_until([&] { return pool_allocations() == 0; }), "freed", "");
  return g_failures == 0 ? 0 : 1;
}

// The receiver's own cuDevicePrimaryCtxReset between a kind-5 and a
// kind-6 message of one pool (review of issue 27): the reset destroyed the
// pool the receiver imported (the Driver API reference of
// cuDevicePrimaryCtxReset: all resources of the context, its pools among
// them; fake_pool.h drop_device). The kind-6 message must not name that
// dead pool to the driver (cuMemPoolImportPointer on a destroyed handle is
// undefined on a real driver) and must still import: the pool came on this
// connection and the sender will not send its fd again. The pointer
// imported before the reset died with it (the reset freed the context's
// allocations): its release calls nothing (a cuMemFree of that address
// could free whatever the new context has there), and the connection's end
// destroys only the live, second import.
[[noreturn]] void recv_reset_child(int sock) {
  hurray_buffer a{};
  int32_t st = hurray_ipc_recv(sock, &a);
  check(st == HURRAY_OK && pool_imports() == 1, "child_recv_kind5", "%s %s", hurray_status_name(st),
        hurray_last_error());
  if (st != HURRAY_OK) _exit(1);
  fake_fn<void (*)(int)>("primary_ctx_reset")(0);
  check(live_pointer_imports() == 0, "reset_ended_the_import", "%lld",
        static_cast<long long>(live_pointer_imports()));
  const auto failed_releases = [] {
    hurray_diagnostics d{};
    d.struct_size = sizeof d;
    // (a failed call leaves d zeroed: the counts below then cannot match)
    return hurray_get_diagnostics(&d) == HURRAY_OK ? d.failed_releases : UINT64_MAX;
  };
  const uint64_t failed_before = failed_releases();
  hurray_buffer b{};
  st = hurray_ipc_recv(sock, &b);
  check(st == HURRAY_OK, "kind6_after_receivers_reset_imports", "%s %s", hurray_status_name(st),
        hurray_last_error());
  check(pool_imports() == 2 && call_count("cuMemPoolImportPointer") == 2, "pool_imported_again",
        "pools %lld pointer imports %d", static_cast<long long>(pool_imports()),
        call_count("cuMemPoolImportPointer"));
  // The dead pointer's release: no driver call, nothing failed.
  const int frees = call_count("cuMemFree");
  // Released before check() is called: its arguments are evaluated in no
  // set order, the message's counts included.
  const int32_t released = hurray_buffer_release(&a);
  check(released == HURRAY_OK && call_count("cuMemFree") == frees &&
            failed_releases() == failed_before,
        "dead_pointer_release_calls_nothing", "cuMemFree %d -> %d, failed releases %llu -> %llu",
        frees, call_count("cuMemFree"), static_cast<unsigned long long>(failed_before),
        static_cast<unsigned long long>(failed_releases()));
  if (st == HURRAY_OK) {
    check(static_cast<const float *>(b.data)[15] == 16.0f, "child_reads", "");
    const int32_t freed = hurray_buffer_release(&b);
    check(freed == HURRAY_OK && call_count("cuMemFree") == frees + 1, "live_pointer_freed",
          "cuMemFree %d", call_count("cuMemFree"));
  }
  hurray_buffer none{};
  st = hurray_ipc_recv(sock, &none);
  check(st == HURRAY_ERR_IPC_CLOSED && failed_releases() == failed_before &&
            call_count("cuMemPoolDestroy") == 1,
        "only_the_live_import_destroyed", "%s failed releases %llu -> %llu, destroys %d",
        hurray_status_name(st), static_cast<unsigned long long>(failed_before),
        static_cast<unsigned long long>(failed_releases()), call_count("cuMemPoolDestroy"));
  _exit(g_failures == 0 ? 0 : 1);
}

int cmd_recv_reset() {
  if (!is_cuda()) return 64;
  int sv[2];
  const pid_t pid = fork_receiver(sv, recv_reset_child);
  if (pid < 0) return 2;
  for (int i = 0; i < 2; ++i) {
    hurray_buffer h{};
    if (pool_handle(&h) != HURRAY_OK) return 1;
    const int32_t st = hurray_ipc_send(sv[0], &h, HURRAY_IPC_DEFAULT);
    check(st == HURRAY_OK, "send", "%s", hurray_last_error());
  }
  check(call_count("cuMemPoolExportToShareableHandle") == 1, "pool_fd_sent_once", "");
  shutdown(sv[0], SHUT_WR);
  check(wait_child(pid) == 0, "child", "");
  close(sv[0]);
  return g_failures == 0 ? 0 : 1;
}

// HIP only (pool-user): memory of a pool the caller made, not libhurray's.
struct UserOwner {
  void *ptr;
  void *stream;
  int64_t shape[1];
  int64_t strides[1];
};
std::atomic<int> g_user_releases{0};

using HipMallocFromPool = int (*)(void **, size_t, void *, void *);
using HipFreeAsync = int (*)(void *, void *);
void *hip_symbol(const char *name) {
  void *lib = dlopen(std::getenv("HURRAY_HIP_LIBRARY_PATH"), RTLD_NOW | RTLD_LOCAL);
  return lib != nullptr ? dlsym(lib, name) : nullptr;
}

void user_release(void *user_data) {
  auto *o = static_cast<UserOwner *>(user_data);
  auto free_async = reinterpret_cast<HipFreeAsync>(hip_symbol("hipFreeAsync"));
  const int r = free_async != nullptr ? free_async(o->ptr, o->stream) : -1;
  check(r == 0, "user_freed", "%d", r);
  delete o;
  g_user_releases.fetch_add(1);
}

// 16 floats from `pool` (made by the caller with the fake's pool_create),
// wrapped in a handle whose release frees them with hipFreeAsync.
int32_t user_handle(void *pool, hurray_buffer *h) {
  if (g_stream == nullptr) g_stream = fake_fn<void *(*)(int)>("stream_create")(0);
  auto alloc = reinterpret_cast<HipMallocFromPool>(hip_symbol("hipMallocFromPoolAsync"));
  void *p = nullptr;
  const int r = alloc != nullptr ? alloc(&p, kElems * sizeof(float), pool, g_stream) : -1;
  check(r == 0, "user_alloc", "%d", r);
  if (r != 0) return HURRAY_ERR_DEVICE;
  auto *o = new UserOwner{p, g_stream, {kElems}, {1}};
  std::memset(h, 0, sizeof *h);
  h->version = HURRAY_BUFFER_VERSION;
  h->release_fn = &user_release;
  h->user_data = o;
  h->data = p;
  h->device = hurray_device{HURRAY_DEVICE_ROCM, 0};
  h->dtype = kF32;
  h->ndim = 1;
  h->shape = o->shape;
  h->strides = o->strides;
  for (int i = 0; i < kElems; ++i) static_cast<float *>(p)[i] = static_cast<float>(i + 1);
  return HURRAY_OK;
}

[[noreturn]] void user_child(int sock) {
  hurray_buffer a{};
  const int32_t st = hurray_ipc_recv(sock, &a);
  check(st == HURRAY_OK, "child_recv", "%s %s", hurray_status_name(st), hurray_last_error());
  if (st != HURRAY_OK) _exit(1);
  check(pool_imports() == 1 && pointer_imports() == 1 &&
            static_cast<const float *>(a.data)[15] == 16.0f,
        "child_imported_user_pool", "pools %lld pointers %lld",
        static_cast<long long>(pool_imports()), static_cast<long long>(pointer_imports()));
  check(hurray_buffer_release(&a) == HURRAY_OK && call_count("hipFree") == 1, "child_release", "");
  hurray_buffer none{};
  check(
      hurray_ipc_recv(sock, &none) == HURRAY_ERR_IPC_CLOSED && call_count("hipMemPoolDestroy") == 1,
      "child_done", "");
  _exit(g_failures == 0 ? 0 : 1);
}

// Memory of a pool the caller made with hipMemPoolCreate and the POSIX-fd
// type: libhurray finds its pool with hipPointerGetAttribute(
// HIP_POINTER_ATTRIBUTE_MEMPOOL_HANDLE) and sends it as kind 5. With the
// attribute unanswered (FAKE_HIP_NO_MEMPOOL_ATTRIBUTE=1, a ROCm that does
// not implement it) the same memory is not known as pool memory and goes
// the legacy way, which refuses it clearly, nothing consumed; libhurray's
// own pool memory still goes as kind 5 (its allocations are recorded).
int cmd_user() {
  if (is_cuda()) return 64;
  int sv[2];
  const pid_t pid = fork_receiver(sv, user_child);
  if (pid < 0) return 2;
  void *pool = nullptr;
  const int pr = fake_fn<int (*)(int, unsigned long long, void **)>("pool_create")(0, 1, &pool);
  check(pr == 0 && pool != nullptr, "pool_create", "%d", pr);
  hurray_buffer h{};
  if (user_handle(pool, &h) != HURRAY_OK) return 1;
  const uint64_t returns = ipc_returns();
  int32_t st = hurray_ipc_send(sv[0], &h, HURRAY_IPC_DEFAULT);
  check(st == HURRAY_OK && call_count("hipPointerGetAttribute") == 1 &&
            call_count("hipMemPoolExportToShareableHandle") == 1 &&
            call_count("hipMemPoolExportPointer") == 1 && call_count("hipIpcGetMemHandle") == 0,
        "sent_as_pool_memory", "%s %s attr %d", hurray_status_name(st), hurray_last_error(),
        call_count("hipPointerGetAttribute"));
  shutdown(sv[0], SHUT_WR);
  check(wait_child(pid) == 0, "child", "");
  close(sv[0]);
  check(wait_until([&] { return ipc_returns() == returns + 1; }) && g_user_releases.load() == 1 &&
            violations() == 0,
        "released_once_after_the_importer", "releases %d violations %lld", g_user_releases.load(),
        static_cast<long long>(violations()));

  setenv("FAKE_HIP_NO_MEMPOOL_ATTRIBUTE", "1", 1);
  hurray_buffer u{};
  if (user_handle(pool, &u) != HURRAY_OK) return 1;
  const int fds = count_fds();
  hurray_ipc_message m;
  std::memset(&m, 0, sizeof m);
  st = hurray_ipc_export(&u, HURRAY_IPC_DEFAULT, &m);
  check(
      st == HURRAY_ERR_UNSUPPORTED_DEVICE &&
          std::strstr(hurray_last_error(), "cannot be exported with a HIP IPC handle") != nullptr &&
          u.release_fn != nullptr && m.nfds == 0 && count_fds() == fds,
      "unanswered_attribute_refuses_user_pool", "%s %s", hurray_status_name(st),
      hurray_last_error());
  check(hurray_buffer_release(&u) == HURRAY_OK && g_user_releases.load() == 2, "user_released", "");
  hurray_buffer own{};
  if (pool_handle(&own) != HURRAY_OK) return 1;
  st = hurray_ipc_export(&own, HURRAY_IPC_DEFAULT, &m);
  check(st == HURRAY_OK && m.bytes[16] == 5 && m.nfds == 2, "own_pool_memory_without_attribute",
        "%s %s", hurray_status_name(st), hurray_last_error());
  if (st == HURRAY_OK) check(hurray_ipc_message_discard(&m) == HURRAY_OK, "discard", "");
  check(wait_until([&] { return ipc_returns() == returns + 2; }), "own_returned", "");
  return g_failures == 0 ? 0 : 1;
}

}  // namespace

// The fake's rule (review of issue 27, finding 4): an imported pool belongs
// to the importing context's device, so cuDevicePrimaryCtxReset of device 1
// destroys the pool imported with device 1 current and not the one imported
// with device 0 current (before, every import was recorded as device 0's).
// In one process: the fake's import does not look at the exporting pid.
int cmd_device_reset() {
  if (!is_cuda()) return 64;
  void *lib = dlopen(std::getenv("HURRAY_CUDA_DRIVER_PATH"), RTLD_NOW | RTLD_LOCAL);
  using GetProc = int (*)(const char *, void **, int, uint64_t);
  auto get = lib != nullptr ? reinterpret_cast<GetProc>(dlsym(lib, "cuGetProcAddress")) : nullptr;
  void *init = nullptr, *exp = nullptr, *imp = nullptr, *destroy = nullptr;
  if (get != nullptr) {
    (void)get("cuInit", &init, 2000, 0);
    (void)get("cuMemPoolExportToShareableHandle", &exp, 11020, 0);
    (void)get("cuMemPoolImportFromShareableHandle", &imp, 11020, 0);
    (void)get("cuMemPoolDestroy", &destroy, 11020, 0);
  }
  auto create = fake_fn<int (*)(int, unsigned long long, void **)>("pool_create");
  auto set_current = fake_fn<void (*)(int)>("set_current_device");
  auto renew = fake_fn<void (*)(int)>("renew_context");
  check(init && exp && imp && destroy && create && set_current && renew, "entry_points", "");
  if (!(init && exp && imp && destroy && create && set_current && renew)) return 1;
  (void)reinterpret_cast<int (*)(unsigned)>(init)(0);
  using Export = int (*)(void *, void *, int, unsigned long long);
  using Import = int (*)(void **, void *, int, unsigned long long);
  void *imported[2] = {nullptr, nullptr};
  for (int d = 0; d < 2; ++d) {
    set_current(d);
    void *pool = nullptr;
    int fd = -1;
    const int c = create(d, 1, &pool);  // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    const int e = c == 0 ? reinterpret_cast<Export>(exp)(&fd, pool, 1, 0) : -1;
    const int i = e == 0
                      ? reinterpret_cast<Import>(imp)(
                            &imported[d], reinterpret_cast<void *>(static_cast<intptr_t>(fd)), 1, 0)
                      : -1;
    check(c == 0 && e == 0 && i == 0, "imported_on_device", "%d: %d %d %d", d, c, e, i);
    if (fd >= 0) close(fd);
  }
  renew(1);  // cuDevicePrimaryCtxReset of device 1, revived
  auto destroy_fn = reinterpret_cast<int (*)(void *)>(destroy);
  set_current(0);
  const int d0 = destroy_fn(imported[0]);
  set_current(1);
  const int d1 = destroy_fn(imported[1]);
  set_current(-1);
  check(d0 == 0, "device0_import_survives_device1_reset", "cuMemPoolDestroy: %d", d0);
  check(d1 != 0, "device1_import_died_with_its_context", "cuMemPoolDestroy: %d", d1);
  return g_failures == 0 ? 0 : 1;
}

int run_pool_command(const std::string &cmd) {
  if (cmd == "device-reset") return cmd_device_reset();
  if (cmd == "roundtrip") return cmd_roundtrip();
  if (cmd == "once") return cmd_once();
  if (cmd == "default") return cmd_default();
  if (cmd == "kill") return cmd_kill();
  if (cmd == "order") return cmd_order();
  if (cmd == "user") return cmd_user();
  if (cmd == "retry") return cmd_retry();
  if (cmd == "two") return cmd_two();
  if (cmd == "unread") return cmd_unread();
  if (cmd == "reset") return cmd_reset();
  if (cmd == "recv-reset") return cmd_recv_reset();
  return 64;
}

}  // namespace ipc_probe
