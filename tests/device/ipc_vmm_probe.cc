// SPDX-License-Identifier: Apache-2.0
// CUDA VMM allocations across processes as POSIX fds (descriptor kind 2,
// docs/impl/ipc.md §6) against the fake driver: the probe's `ipc-vmm-*`
// commands (run by ipc_test.cc with the CUDA fake). The producer's memory is
// made with the fake's cuMemCreate / cuMemAddressReserve / cuMemMap /
// cuMemSetAccess (fake_cuda_vmm_alloc) and wrapped in a handle whose release
// unmaps it, as an application's own allocator would.
//
//   probe ipc-vmm-roundtrip 2   a child imports an allocation and a share of
//                               it, reads, writes, releases; every import-side
//                               mapping undone; the producer's release once
//   probe ipc-vmm-kill 2        the child is SIGKILLed holding the import
//   probe ipc-vmm-malformed 2   kind-2 messages with wrong fds / size / bytes,
//                               and driver failures during the import
//   probe ipc-vmm-refusals 2    a VMM allocation without the POSIX-fd type
//   probe ipc-vmm-range-* 2     several mappings in one reservation, a
//                               mapping at an offset: ipc_vmm_range_probe.cc
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <cstring>

#include "fake_control.h"
#include "ipc_probe.h"

namespace ipc_probe {
namespace {

constexpr uint64_t kBytes = 64 * 1024;      // the allocation (a multiple of the page size)
constexpr uint64_t kDataAt = 256;           // where the tensor starts in it
constexpr unsigned long long kPosixFd = 1;  // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR

std::atomic<int> g_producer_releases{0};

int64_t mappings() { return fake_count("vmm_live_mappings"); }
int64_t vmm_allocations() { return fake_count("vmm_live_allocations"); }
int64_t handle_refs() { return fake_count("vmm_handle_references"); }

// The producer's bookkeeping of one VMM allocation and its handle.
struct Owner {
  void *base;
  int64_t shape[1];
  int64_t strides[1];
};

void owner_release(void *user_data) {
  auto *o = static_cast<Owner *>(user_data);
  const int r = fake_fn<int (*)(void *, uint64_t)>("vmm_free")(o->base, kBytes);
  check(r == 0, "producer_unmapped", "%d", r);
  delete o;
  g_producer_releases.fetch_add(1);
}

// A handle of 16 floats at kDataAt in a new VMM allocation of device 0
// made with `types` (values 1..16 written).
int32_t vmm_handle(hurray_buffer *h, unsigned long long types) {
  void *base = nullptr;
  const int r = fake_fn<int (*)(int, uint64_t, unsigned long long, void **)>("vmm_alloc")(
      0, kBytes, types, &base);
  if (r != 0) {
    check(false, "vmm_alloc", "CUresult %d", r);
    return HURRAY_ERR_DEVICE;
  }
  auto *o = new Owner{base, {16}, {1}};
  std::memset(h, 0, sizeof *h);
  h->version = HURRAY_BUFFER_VERSION;
  h->release_fn = &owner_release;
  h->user_data = o;
  h->data = static_cast<char *>(base) + kDataAt;
  h->device = hurray_device{HURRAY_DEVICE_CUDA, 0};
  h->dtype = kF32;
  h->ndim = 1;
  h->shape = o->shape;
  h->strides = o->strides;
  for (int i = 0; i < 16; ++i) static_cast<float *>(h->data)[i] = static_cast<float>(i + 1);
  return HURRAY_OK;
}

// The child of roundtrip: receives two handles, checks and writes, releases.
[[noreturn]] void roundtrip_child(int sock) {
  const int fds_before = count_fds();
  hurray_buffer a{}, b{};
  child_recv_two(sock, &a, &b);
  check(a.device.device_type == HURRAY_DEVICE_CUDA && a.ndim == 1 && a.shape[0] == 16,
        "child_layout", "");
  check(call_count("cuMemImportFromShareableHandle") == 2 && call_count("cuMemMap") == 2 &&
            call_count("cuMemSetAccess") == 2 && mappings() == 2 &&
            call_count("cuIpcOpenMemHandle") == 0,
        "child_mapped", "imports %d maps %d", call_count("cuMemImportFromShareableHandle"),
        call_count("cuMemMap"));
  // Each handle holds its lifetime fd, the fake its own dup of each memfd
  // (as a driver keeps the allocation); the received allocation fds were
  // closed.
  check(count_fds() == fds_before + 4, "child_fds_while_held", "%d -> %d", fds_before, count_fds());
  const float *fa = static_cast<const float *>(a.data);
  const float *fb = static_cast<const float *>(b.data);
  check(fa[0] == 1.0f && fa[15] == 16.0f, "child_reads", "%g %g", fa[0], fa[15]);
  check(fb[3] == 4.0f, "child_reads_share", "%g", fb[3]);
  static_cast<float *>(a.data)[1] = 42.0f;  // seen by the parent
  check(hurray_buffer_release(&a) == HURRAY_OK && hurray_buffer_release(&b) == HURRAY_OK,
        "child_release", "");
  check(call_count("cuMemUnmap") == 2 && call_count("cuMemAddressFree") == 2 &&
            call_count("cuMemRelease") == 2 && mappings() == 0 && vmm_allocations() == 0 &&
            handle_refs() == 0,
        "child_unmapped_all", "unmap %d free %d release %d", call_count("cuMemUnmap"),
        call_count("cuMemAddressFree"), call_count("cuMemRelease"));
  check(count_fds() == fds_before, "child_fds_back", "%d -> %d", fds_before, count_fds());
  _exit(g_failures == 0 ? 0 : 1);
}

int cmd_roundtrip() {
  int sv[2];
  const pid_t pid = fork_receiver(sv, roundtrip_child);
  if (pid < 0) return 2;
  hurray_buffer a{}, shares[3]{};
  if (vmm_handle(&a, kPosixFd) != HURRAY_OK) return 1;
  check(hurray_share(&a, 3, shares) == HURRAY_OK, "share", "");
  hurray_buffer &h = shares[0], &s = shares[1], &keep = shares[2];
  const uint64_t returns = ipc_returns();
  const int syncs = call_count("cuCtxSynchronize");
  int32_t st = hurray_ipc_send(sv[0], &h, HURRAY_IPC_DEFAULT);
  check(st == HURRAY_OK && h.release_fn == nullptr, "send", "%s %s", hurray_status_name(st),
        hurray_last_error());
  st = hurray_ipc_send(sv[0], &s, HURRAY_IPC_ZERO_COPY_ONLY);
  check(st == HURRAY_OK, "send_share", "%s %s", hurray_status_name(st), hurray_last_error());
  // No host wait: each export records an IPC event instead (ipc §6).
  check(call_count("cuCtxSynchronize") == syncs, "export_does_not_synchronise", "");
  // Every retained handle released again; the legacy path never taken.
  check(call_count("cuMemRetainAllocationHandle") == 2 &&
            call_count("cuMemExportToShareableHandle") == 2 && handle_refs() == 0 &&
            call_count("cuIpcGetMemHandle") == 0,
        "export_released_its_retain", "retains %d refs %lld",
        call_count("cuMemRetainAllocationHandle"), static_cast<long long>(handle_refs()));
  shutdown(sv[0], SHUT_WR);
  const int code = wait_child(pid);
  check(code == 0, "child", "exit %d", code);
  check(wait_until([&] { return ipc_returns() == returns + 2; }), "returned", "%llu",
        static_cast<unsigned long long>(ipc_returns() - returns));
  check(g_producer_releases.load() == 0, "kept_by_local_share", "");
  check(static_cast<const float *>(keep.data)[1] == 42.0f, "child_write_seen", "%g",
        static_cast<const float *>(keep.data)[1]);
  check(hurray_buffer_release(&keep) == HURRAY_OK, "release_keep", "");
  check(g_producer_releases.load() == 1 && vmm_allocations() == 0 && mappings() == 0,
        "producer_released_once", "%d", g_producer_releases.load());
  close(sv[0]);
  return g_failures == 0 ? 0 : 1;
}

int cmd_kill() {
  int sv[2], ready[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0 || pipe(ready) != 0) return 2;
  const pid_t pid = fork_holder(sv, ready[1]);
  hurray_buffer h{};
  if (vmm_handle(&h, kPosixFd) != HURRAY_OK) return 1;
  const uint64_t returns = ipc_returns();
  check(hurray_ipc_send(sv[0], &h, HURRAY_IPC_DEFAULT) == HURRAY_OK, "send", "%s",
        hurray_last_error());
  char byte = 0;
  check(read(ready[0], &byte, 1) == 1 && byte == 'y', "child_imported", "%c", byte);
  check(g_producer_releases.load() == 0, "held_by_child", "");
  kill(pid, SIGKILL);
  check(wait_child(pid) == 128 + SIGKILL, "killed", "");
  check(wait_until([&] { return ipc_returns() == returns + 1; }), "returned", "");
  check(wait_until([&] { return g_producer_releases.load() == 1; }) && vmm_allocations() == 0,
        "producer_released_once", "%d", g_producer_releases.load());
  return g_failures == 0 ? 0 : 1;
}

// Exports a fresh VMM handle in this process (kind 2), applies `edit`,
// imports: the status must be `want`, every fd closed, the reference back.
template <typename Edit>
void malformed_case(const char *what, int32_t want, Edit edit) {
  hurray_buffer h{};
  if (vmm_handle(&h, kPosixFd) != HURRAY_OK) return;
  hurray_ipc_message m;
  int32_t st = hurray_ipc_export(&h, HURRAY_IPC_DEFAULT, &m);
  if (st != HURRAY_OK) {
    check(false, what, "export: %s", hurray_last_error());
    (void)hurray_buffer_release(&h);
    return;
  }
  if (m.bytes[16] != 2 || m.nfds != 2) {
    check(false, what, "export made kind %u with %u fds", m.bytes[16], m.nfds);
    if (hurray_ipc_message_discard(&m) != HURRAY_OK) check(false, what, "discard failed");
    return;
  }
  // The fake's exported fd, like a driver's may be, lacks close-on-exec.
  for (uint32_t i = 0; i < m.nfds; ++i) {
    check((fcntl(m.fds[i], F_GETFD) & FD_CLOEXEC) != 0, what, "fds[%u] is not close-on-exec", i);
  }
  const uint64_t returns = ipc_returns();
  const int releases = g_producer_releases.load();
  // Named as another process's message, so that the import goes to the
  // driver (this process's own would come back as a share, ipc §6).
  put32(gpu_part(&m) + 16, 1);
  edit(&m);
  int fds[HURRAY_IPC_MAX_FDS];
  const uint32_t n = m.nfds < HURRAY_IPC_MAX_FDS ? m.nfds : HURRAY_IPC_MAX_FDS;
  for (uint32_t i = 0; i < n; ++i) fds[i] = m.fds[i];
  hurray_buffer r;
  std::memset(&r, 0x5a, sizeof r);
  st = hurray_ipc_import(&m, &r);
  bool closed = m.nfds == 0;
  for (uint32_t i = 0; i < n; ++i) closed = closed && !fd_open(fds[i]);
  check(st == want && closed && reinterpret_cast<const uint8_t *>(&r)[0] == 0x5a, what,
        "%s (%s) fds closed %d", hurray_status_name(st), hurray_last_error(), closed ? 1 : 0);
  // Nothing of the import left: no handle reference (the producer's
  // allocation is held by its mapping only), and once the reference is
  // back and the producer unmapped, no mapping either.
  check(handle_refs() == 0 && mappings() <= 1, "nothing_imported", "%s: maps %lld refs %lld", what,
        static_cast<long long>(mappings()), static_cast<long long>(handle_refs()));
  check(wait_until([&] {
          return ipc_returns() == returns + 1 && g_producer_releases.load() == releases + 1;
        }) &&
            mappings() == 0,
        "returned", "%s", what);
}

int cmd_malformed() {
  auto reset = fake_fn<void (*)()>("reset");
  auto inject = fake_fn<void (*)(const char *, int, int)>("inject");
  malformed_case("kind 2 with one fd", HURRAY_ERR_IPC, [](hurray_ipc_message *m) {
    close(m->fds[1]);
    m->nfds = 1;
  });
  malformed_case("kind 2 with three fds", HURRAY_ERR_IPC, [](hurray_ipc_message *m) {
    m->fds[2] = dup(0);
    m->nfds = 3;
  });
  malformed_case("descriptor nfds 1", HURRAY_ERR_IPC,
                 [](hurray_ipc_message *m) { put32(m->bytes + 20, 1); });
  malformed_case("size without the GPU part", HURRAY_ERR_IPC, [](hurray_ipc_message *m) {
    m->size -= 168;
    put32(m->bytes + 12, m->size);
  });
  malformed_case("size one byte short", HURRAY_ERR_IPC, [](hurray_ipc_message *m) {
    m->size -= 1;
    put32(m->bytes + 12, m->size);
  });
  malformed_case("reserved byte set", HURRAY_ERR_IPC,
                 [](hurray_ipc_message *m) { m->bytes[m->size - 1] = 1; });
  malformed_case("kind 2's IPC handle set", HURRAY_ERR_IPC,
                 [](hurray_ipc_message *m) { gpu_part(m)[40] = 1; });
  malformed_case("kind 3 with two fds", HURRAY_ERR_IPC,
                 [](hurray_ipc_message *m) { put32(m->bytes + 16, 3); });
  malformed_case("HIP device", HURRAY_ERR_IPC,
                 [](hurray_ipc_message *m) { put32(m->bytes + 32, HURRAY_DEVICE_ROCM); });
  malformed_case("elements beyond the allocation", HURRAY_ERR_IPC,
                 [](hurray_ipc_message *m) { put64(m->bytes + 72, kDataAt + 32); });
  malformed_case("lifetime fd not a pipe", HURRAY_ERR_IPC, [](hurray_ipc_message *m) {
    close(m->fds[0]);
    m->fds[0] = open("/dev/null", O_WRONLY | O_CLOEXEC);
  });
  malformed_case("allocation fd closed", HURRAY_ERR_IPC, [](hurray_ipc_message *m) {
    close(m->fds[1]);
    m->fds[1] = -1;
  });
  malformed_case("allocation fd not an allocation", HURRAY_ERR_DEVICE, [](hurray_ipc_message *m) {
    close(m->fds[1]);
    m->fds[1] = open("/dev/null", O_RDONLY | O_CLOEXEC);
  });
  // Driver failures part-way through the import: every step undone.
  for (const char *fn : {"cuMemAddressReserve", "cuMemMap", "cuMemSetAccess"}) {
    reset();
    malformed_case(fn, HURRAY_ERR_DEVICE,
                   [&](hurray_ipc_message *) { inject(fn, 999 /* CUDA_ERROR_UNKNOWN */, 1); });
    // After the reset: the producer's create, reserve, map, set access and
    // release, the export's retain, its whole-allocation check (a scratch
    // reservation, one scratch mapping unmapped) and release, the import's
    // steps up to the failure and their undoing, the producer's unmap and
    // address free.
    const bool reserved = std::strcmp(fn, "cuMemAddressReserve") != 0;
    const bool mapped = std::strcmp(fn, "cuMemSetAccess") == 0;
    check(call_count("cuMemImportFromShareableHandle") == 1 &&
              call_count("cuMemUnmap") == 2 + (mapped ? 1 : 0) &&
              call_count("cuMemAddressFree") == 2 + (reserved ? 1 : 0) &&
              call_count("cuMemRelease") == 3,
          "unwound", "%s: unmaps %d frees %d releases %d", fn, call_count("cuMemUnmap"),
          call_count("cuMemAddressFree"), call_count("cuMemRelease"));
  }
  // Giving the thread its context back fails after a complete import: the
  // import is undone (with_device's contract), not left mapped for good.
  reset();
  malformed_case("cuCtxPopCurrent after the import", HURRAY_ERR_DEVICE,
                 [&](hurray_ipc_message *) { inject("cuCtxPopCurrent", 999, 1); });
  check(wait_until([&] { return vmm_allocations() == 0; }) && mappings() == 0, "nothing_left",
        "%lld", static_cast<long long>(vmm_allocations()));
  return g_failures == 0 ? 0 : 1;
}

int cmd_refusals() {
  hurray_buffer h{};
  if (vmm_handle(&h, 0) != HURRAY_OK) return 1;
  const int retains = call_count("cuMemRetainAllocationHandle");
  const int releases = call_count("cuMemRelease");
  hurray_ipc_message m;
  int32_t st = hurray_ipc_export(&h, HURRAY_IPC_DEFAULT, &m);
  check(
      st == HURRAY_ERR_UNSUPPORTED_DEVICE &&
          std::strstr(hurray_last_error(), "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR") != nullptr &&
          h.release_fn != nullptr,
      "no_fd_type_refused", "%s %s", hurray_status_name(st), hurray_last_error());
  check(call_count("cuMemRetainAllocationHandle") == retains + 1 &&
            call_count("cuMemRelease") == releases + 1 && handle_refs() == 0 &&
            call_count("cuMemExportToShareableHandle") == 0 && call_count("cuIpcGetMemHandle") == 0,
        "nothing_retained", "retains %d releases %d refs %lld",
        call_count("cuMemRetainAllocationHandle") - retains, call_count("cuMemRelease") - releases,
        static_cast<long long>(handle_refs()));
  check(hurray_buffer_release(&h) == HURRAY_OK && g_producer_releases.load() == 1 &&
            vmm_allocations() == 0,
        "released", "");
  return g_failures == 0 ? 0 : 1;
}

}  // namespace

int run_vmm_command(const std::string &cmd) {
  if (cmd == "roundtrip") return cmd_roundtrip();
  if (cmd == "kill") return cmd_kill();
  if (cmd == "malformed") return cmd_malformed();
  if (cmd == "refusals") return cmd_refusals();
#if defined(HURRAY_PROBE_VMM_RANGE)
  if (cmd.rfind("range-", 0) == 0) return run_vmm_range_command(cmd.substr(6));
#endif
  std::fprintf(stderr, "unknown command 'ipc-vmm-%s'\n", cmd.c_str());
  return 64;
}

}  // namespace ipc_probe
