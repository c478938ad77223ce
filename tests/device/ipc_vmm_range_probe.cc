// SPDX-License-Identifier: Apache-2.0
// Which bytes a kind-2 export sends when a reservation holds more than one
// mapping (docs/impl/ipc.md §6): the probe's `ipc-vmm-range-*` commands, run
// by ipc_test.cc with the CUDA fake. The producer builds its memory with the
// fake driver's own entry points (cuGetProcAddress_v2 of the fake), as an
// application's allocator would; the fake models the driver's documented
// rules for them (tests/fake_drivers/fake_vmm.h).
//
//   probe ipc-vmm-range-back-to-back 2  two allocations mapped back to back in
//                                       one reservation; the second one's data
//                                       is sent: the child must see its bytes
//   probe ipc-vmm-range-offset 2        a mapping of a later part of an
//                                       allocation (cuMemMap offset > 0) and
//                                       one of its first part: the export must
//                                       be refused, never send other bytes;
//                                       driver failures inside the check
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "ipc_probe.h"

namespace ipc_probe {
namespace {

constexpr size_t kChunk = 64 * 1024;  // each allocation (a multiple of the fake's granularity)
constexpr size_t kDataAt = 256;       // where the tensor starts in its mapping
constexpr int kN = 16;                // floats in the tensor

// The fake driver's entry points the producer uses.
struct Driver {
  PFN_cuMemCreate_v10020 create = nullptr;
  PFN_cuMemRelease_v10020 release = nullptr;
  PFN_cuMemAddressReserve_v10020 reserve = nullptr;
  PFN_cuMemAddressFree_v10020 address_free = nullptr;
  PFN_cuMemMap_v10020 map = nullptr;
  PFN_cuMemUnmap_v10020 unmap = nullptr;
  PFN_cuMemSetAccess_v10020 set_access = nullptr;
};

bool load(Driver *d) {
  const char *path = std::getenv("HURRAY_CUDA_DRIVER_PATH");
  void *lib = path != nullptr ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
  using GetProc =
      CUresult (*)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
  auto get =
      lib != nullptr ? reinterpret_cast<GetProc>(dlsym(lib, "cuGetProcAddress_v2")) : nullptr;
  if (get == nullptr) return false;
  auto one = [&](const char *name, auto *fn) {
    void *p = nullptr;
    CUdriverProcAddressQueryResult q{};
    if (get(name, &p, 12000, 0, &q) != CUDA_SUCCESS) return false;
    *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(p);
    return p != nullptr;
  };
  return one("cuMemCreate", &d->create) && one("cuMemRelease", &d->release) &&
         one("cuMemAddressReserve", &d->reserve) && one("cuMemAddressFree", &d->address_free) &&
         one("cuMemMap", &d->map) && one("cuMemUnmap", &d->unmap) &&
         one("cuMemSetAccess", &d->set_access);
}

CUmemAllocationProp device0() {
  CUmemAllocationProp prop;
  std::memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

// A reservation of `reserved` bytes and the mappings made in it; unmapped
// and freed by undo().
struct Region {
  const Driver *d = nullptr;
  CUdeviceptr va = 0;
  size_t reserved = 0;
  CUdeviceptr at[2] = {0, 0};
  size_t bytes[2] = {0, 0};
  int n = 0;

  // Maps `size` bytes of a new allocation of `alloc` bytes from its byte
  // `offset` at va + `where`, readable and writable; the allocation's
  // handle is released at once (the mapping holds it).
  bool add(size_t where, size_t alloc, size_t offset, size_t size) {
    const CUmemAllocationProp prop = device0();
    CUmemGenericAllocationHandle h = 0;
    if (d->create(&h, alloc, &prop, 0) != CUDA_SUCCESS) return false;
    const CUresult r = d->map(va + where, size, offset, h, 0);
    (void)d->release(h);
    if (r != CUDA_SUCCESS) return false;
    at[n] = va + where;
    bytes[n++] = size;
    CUmemAccessDesc access;
    std::memset(&access, 0, sizeof access);
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return d->set_access(va + where, size, &access, 1) == CUDA_SUCCESS;
  }
  void undo() {
    for (int i = 0; i < n; ++i) check(d->unmap(at[i], bytes[i]) == CUDA_SUCCESS, "unmapped", "");
    check(d->address_free(va, reserved) == CUDA_SUCCESS, "reservation_freed", "");
  }
};

int64_t vmm_count(const char *what) {
  auto f = reinterpret_cast<int64_t (*)()>(control(what));
  return f != nullptr ? f() : -1;
}
int64_t mappings() { return vmm_count("vmm_live_mappings"); }
int64_t vmm_allocations() { return vmm_count("vmm_live_allocations"); }
int64_t handle_refs() { return vmm_count("vmm_handle_references"); }

float *floats(CUdeviceptr p) { return reinterpret_cast<float *>(static_cast<uintptr_t>(p)); }

struct Owner {
  int64_t shape[1] = {kN};
  int64_t strides[1] = {1};
  std::atomic<int> releases{0};  // the sender's watcher thread releases
};
void owner_release(void *user_data) { static_cast<Owner *>(user_data)->releases.fetch_add(1); }

// A handle of kN floats at `data` (memory the caller keeps).
hurray_buffer wrap(void *data, Owner *o) {
  hurray_buffer h;
  std::memset(&h, 0, sizeof h);
  h.version = HURRAY_BUFFER_VERSION;
  h.release_fn = &owner_release;
  h.user_data = o;
  h.data = data;
  h.device = hurray_device{HURRAY_DEVICE_CUDA, 0};
  h.dtype = kF32;
  h.ndim = 1;
  h.shape = o->shape;
  h.strides = o->strides;
  return h;
}

// The receiver: takes one handle and answers on the socket with one byte,
// 'y' when its floats are 1000 + i (what the sender meant), 'n' when they
// are other bytes, 'e' when nothing arrived (the sender refused).
[[noreturn]] void compare_child(int sock) {
  hurray_buffer r{};
  const int32_t st = hurray_ipc_recv(sock, &r);
  char byte = 'e';
  if (st == HURRAY_OK) {
    byte = 'y';
    const float *f = static_cast<const float *>(r.data);
    for (int i = 0; i < kN; ++i) {
      if (f[i] != 1000.0f + static_cast<float>(i)) byte = 'n';
    }
    std::printf("child read %g %g (want 1000 1001)\n", f[0], f[1]);
    (void)hurray_buffer_release(&r);
  }
  (void)!write(sock, &byte, 1);
  _exit(0);
}

// A receiver forked before any driver call (a child forked after libhurray
// loaded the driver cannot use it).
struct Receiver {
  int sv[2] = {-1, -1};
  pid_t pid = -1;
  Receiver() { pid = fork_receiver(sv, compare_child); }
};

// Sends a handle of the kN floats at `data` (set to 1000 + i here) to
// `rx`; returns the send's status and the receiver's answer.
int32_t send_and_compare(Receiver *rx, void *data, char *answer, Owner *o) {
  if (rx->pid < 0) return HURRAY_ERR_IPC;
  for (int i = 0; i < kN; ++i) static_cast<float *>(data)[i] = 1000.0f + static_cast<float>(i);
  hurray_buffer h = wrap(data, o);
  const int32_t st = hurray_ipc_send(rx->sv[0], &h, HURRAY_IPC_DEFAULT);
  if (st != HURRAY_OK) {
    std::printf("send: %s %s\n", hurray_status_name(st), hurray_last_error());
    check(h.release_fn != nullptr, "refusal_consumed_nothing", "");
    (void)hurray_buffer_release(&h);
  }
  shutdown(rx->sv[0], SHUT_WR);
  if (read(rx->sv[0], answer, 1) != 1) *answer = '?';
  check(wait_child(rx->pid) == 0, "child_exit", "");
  close(rx->sv[0]);
  return st;
}

int cmd_back_to_back() {
  Receiver rx;
  Driver d;
  if (!load(&d)) {
    check(false, "driver", "the fake's entry points");
    return 1;
  }
  Region reg{&d};
  reg.reserved = 2 * kChunk;
  check(d.reserve(&reg.va, reg.reserved, 0, 0, 0) == CUDA_SUCCESS, "reserve", "");
  const bool made = reg.add(0, kChunk, 0, kChunk) && reg.add(kChunk, kChunk, 0, kChunk);
  check(made, "two_allocations_back_to_back", "");
  if (!made) return 1;
  // The first allocation holds other values, where a wrong base or offset
  // would land.
  for (size_t i = 0; i < kChunk / 4; ++i) floats(reg.va)[i] = -1.0f;
  Owner o;
  char answer = 0;
  const uint64_t returns = ipc_returns();
  const int32_t st = send_and_compare(&rx, floats(reg.at[1]) + kDataAt / 4, &answer, &o);
  // Each mapping is one whole allocation from offset 0: sent, and the
  // receiver maps the second allocation, not the first or the reservation.
  check(st == HURRAY_OK && answer == 'y', "second_allocation_sent_right", "%s, child '%c'",
        hurray_status_name(st), answer);
  check(wait_until([&] { return ipc_returns() == returns + 1 && o.releases == 1; }),
        "returned_once", "releases %d", o.releases.load());
  reg.undo();
  check(vmm_allocations() == 0 && handle_refs() == 0, "nothing_left", "allocations %lld",
        static_cast<long long>(vmm_allocations()));
  return g_failures == 0 ? 0 : 1;
}

int cmd_offset() {
  Receiver rx[2];
  Driver d;
  if (!load(&d)) {
    check(false, "driver", "the fake's entry points");
    return 1;
  }
  // Two cases, each a reservation of one chunk mapping one chunk of an
  // allocation of two: its second half (offset kChunk), then its first half
  // (offset 0; the allocation is larger than the mapping, which export
  // cannot tell apart from an offset one).
  const size_t offsets[2] = {kChunk, 0};
  const char *names[2] = {"offset_mapping_refused", "partial_mapping_refused"};
  for (int c = 0; c < 2; ++c) {
    Region reg{&d};
    reg.reserved = kChunk;
    check(d.reserve(&reg.va, reg.reserved, 0, 0, 0) == CUDA_SUCCESS, "reserve", "");
    const bool made = reg.add(0, 2 * kChunk, offsets[c], kChunk);
    check(made, "mapping_made", "offset %zu", offsets[c]);
    if (!made) return 1;
    Owner o;
    char answer = 0;
    const int retains = call_count("cuMemRetainAllocationHandle");
    const int exports = call_count("cuMemExportToShareableHandle");
    const int reserves = call_count("cuMemAddressReserve");
    const int frees = call_count("cuMemAddressFree");
    const int32_t st = send_and_compare(&rx[c], floats(reg.va) + kDataAt / 4, &answer, &o);
    check(st == HURRAY_ERR_UNSUPPORTED_DEVICE && answer == 'e' &&
              std::strstr(hurray_last_error(), "offset 0") != nullptr,
          names[c], "%s, child '%c': %s", hurray_status_name(st), answer, hurray_last_error());
    // Nothing exported or kept: the retain released, the scratch
    // reservation freed, the producer's release once (the caller's).
    check(call_count("cuMemRetainAllocationHandle") == retains + 1 &&
              call_count("cuMemExportToShareableHandle") == exports && handle_refs() == 0 &&
              call_count("cuMemAddressReserve") - reserves ==
                  call_count("cuMemAddressFree") - frees &&
              mappings() == 1 && o.releases == 1,
          "nothing_kept", "exports %d refs %lld maps %lld releases %d",
          call_count("cuMemExportToShareableHandle") - exports,
          static_cast<long long>(handle_refs()), static_cast<long long>(mappings()),
          o.releases.load());
    reg.undo();
  }
  // A driver failure inside the check, on a whole mapping that would be
  // sent: refused with the entry point named, nothing retained or left
  // reserved or mapped.
  auto inject = reinterpret_cast<void (*)(const char *, int, int)>(control("inject"));
  for (const char *fn :
       {"cuMemGetAllocationGranularity", "cuMemAddressReserve", "cuMemMap", "cuMemAddressFree"}) {
    Region reg{&d};
    reg.reserved = kChunk;
    check(d.reserve(&reg.va, reg.reserved, 0, 0, 0) == CUDA_SUCCESS, "reserve", "");
    if (!reg.add(0, kChunk, 0, kChunk)) return 1;
    Owner o;
    hurray_buffer h = wrap(floats(reg.va), &o);
    const int reserves = call_count("cuMemAddressReserve");
    const int frees = call_count("cuMemAddressFree");
    inject(fn, 999 /* CUDA_ERROR_UNKNOWN */, 1);
    hurray_ipc_message m;
    const int32_t st = hurray_ipc_export(&h, HURRAY_IPC_DEFAULT, &m);
    check(st == HURRAY_ERR_UNSUPPORTED_DEVICE && std::strstr(hurray_last_error(), fn) != nullptr &&
              h.release_fn != nullptr,
          "check_failure_refused", "%s: %s %s", fn, hurray_status_name(st), hurray_last_error());
    // Every scratch reservation made was handed back (a refused
    // cuMemAddressFree was still asked for; a refused reserve made none;
    // without the granularity none was asked for).
    const bool granularity = std::strcmp(fn, "cuMemGetAllocationGranularity") == 0;
    const int asked = granularity ? 0 : 1;
    const int made = granularity || std::strcmp(fn, "cuMemAddressReserve") == 0 ? 0 : 1;
    check(handle_refs() == 0 && mappings() == 1 &&
              call_count("cuMemAddressReserve") - reserves == asked &&
              call_count("cuMemAddressFree") - frees == made,
          "check_failure_left_nothing", "%s: refs %lld maps %lld", fn,
          static_cast<long long>(handle_refs()), static_cast<long long>(mappings()));
    (void)hurray_buffer_release(&h);
    check(o.releases == 1, "check_failure_released", "%s", fn);
    reg.undo();
  }
  check(vmm_allocations() == 0, "nothing_left", "%lld", static_cast<long long>(vmm_allocations()));
  return g_failures == 0 ? 0 : 1;
}

}  // namespace

int run_vmm_range_command(const std::string &cmd) {
  if (cmd == "back-to-back") return cmd_back_to_back();
  if (cmd == "offset") return cmd_offset();
  std::fprintf(stderr, "unknown command 'ipc-vmm-range-%s'\n", cmd.c_str());
  return 64;
}

}  // namespace ipc_probe
