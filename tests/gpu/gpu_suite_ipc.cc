// SPDX-License-Identifier: Apache-2.0
// The real-GPU suite's two-process cases (docs/impl/ipc.md §6; run by
// gpu_suite.cc's main through ipc_checks): device memory, CUDA VMM
// allocations and stream-ordered pool memory sent to a fresh child process (`gpu_suite --ipc-child
// FD`, exec'd, since a child forked after cuInit cannot use CUDA) and back.
#include <cuda.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "hurray/hurray.h"
#include "gpu_suite.h"

namespace gpu_suite {

constexpr int64_t kIpcN = 4096;

// The receiver: imports the buffer, checks the parent's values with
// cuMemcpyDtoH, writes element 0 back as -1, releases. Exit 0 when all held.
int ipc_child(int sock) {
  hurray_buffer r{};
  int32_t st = hurray_ipc_recv(sock, &r);
  if (st != HURRAY_OK) {
    std::printf("ipc-child recv: %s %s\n", hurray_status_name(st), hurray_last_error());
    return 1;
  }
  if (r.device.device_type != HURRAY_DEVICE_CUDA || r.ndim != 1 || r.shape[0] != kIpcN) {
    std::printf("ipc-child: wrong device or layout\n");
    return 1;
  }
  CUdevice dev;
  CUcontext ctx = nullptr;
  if (cuDeviceGet(&dev, r.device.device_id) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
      cuCtxPushCurrent(ctx) != CUDA_SUCCESS) {
    std::printf("ipc-child: no context\n");
    return 1;
  }
  std::vector<float> host(static_cast<size_t>(kIpcN));
  const CUdeviceptr p = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(r.data));
  int bad = cuMemcpyDtoH(host.data(), p, host.size() * 4) != CUDA_SUCCESS ? 1 : 0;
  for (int64_t i = 0; i < kIpcN && bad == 0; ++i) {
    if (host[static_cast<size_t>(i)] != 3.0f * static_cast<float>(i)) bad = 2;
  }
  const float minus_one = -1.0f;
  if (bad == 0 && cuMemcpyHtoD(p, &minus_one, 4) != CUDA_SUCCESS) bad = 3;
  CUcontext popped;
  cuCtxPopCurrent(&popped);
  if (hurray_buffer_release(&r) != HURRAY_OK) bad = 4;
  std::printf("ipc-child %s (%d)\n", bad == 0 ? "ok" : "failed", bad);
  return bad;
}

namespace {

// Starts `gpu_suite --ipc-child FD` with the socket `fd` inherited.
pid_t start_ipc_child(int fd) {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return -1;
  exe[n] = '\0';
  char fd_arg[16];
  std::snprintf(fd_arg, sizeof fd_arg, "%d", fd);
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    char *const argv[] = {exe, const_cast<char *>("--ipc-child"), fd_arg, nullptr};
    execv(exe, argv);
    _exit(127);
  }
  return pid;
}

// A CUDA VMM allocation (cuMemCreate, cuMemAddressReserve, cuMemMap,
// cuMemSetAccess) of device 0 wrapped in a handle whose release unmaps it,
// as an application's own allocator would: what kind 2 sends.
struct VmmBlock {
  CUdeviceptr va;
  size_t size;
  int64_t shape[1];
  int64_t strides[1];
  std::atomic<int> *releases;
};

void vmm_release(void *user_data) {
  auto *b = static_cast<VmmBlock *>(user_data);
  (void)cuMemUnmap(b->va, b->size);
  (void)cuMemAddressFree(b->va, b->size);
  b->releases->fetch_add(1);
  delete b;
}

// kIpcN floats in a new VMM allocation with `types` as requestedHandleTypes;
// CUresult of the first failing step.
CUresult vmm_alloc(unsigned long long types, std::atomic<int> *releases, hurray_buffer *out) {
  CUmemAllocationProp prop;
  std::memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.requestedHandleTypes = static_cast<CUmemAllocationHandleType>(types);
  size_t gran = 0;
  CUresult r = cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (r != CUDA_SUCCESS) return r;
  const size_t size = (kIpcN * 4 + gran - 1) / gran * gran;
  CUmemGenericAllocationHandle h = 0;
  if ((r = cuMemCreate(&h, size, &prop, 0)) != CUDA_SUCCESS) return r;
  CUdeviceptr va = 0;
  r = cuMemAddressReserve(&va, size, 0, 0, 0);
  if (r == CUDA_SUCCESS && (r = cuMemMap(va, size, 0, h, 0)) != CUDA_SUCCESS) {
    (void)cuMemAddressFree(va, size);
  }
  (void)cuMemRelease(h);  // the mapping holds the memory
  if (r != CUDA_SUCCESS) return r;
  CUmemAccessDesc access;
  std::memset(&access, 0, sizeof access);
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if ((r = cuMemSetAccess(va, size, &access, 1)) != CUDA_SUCCESS) {
    (void)cuMemUnmap(va, size);
    (void)cuMemAddressFree(va, size);
    return r;
  }
  auto *b = new VmmBlock{va, size, {kIpcN}, {1}, releases};
  std::memset(out, 0, sizeof *out);
  out->version = HURRAY_BUFFER_VERSION;
  out->release_fn = &vmm_release;
  out->user_data = b;
  out->data = reinterpret_cast<void *>(static_cast<uintptr_t>(va));
  out->device = {HURRAY_DEVICE_CUDA, 0};
  out->dtype = kF32;
  out->ndim = 1;
  out->shape = b->shape;
  out->strides = b->strides;
  return CUDA_SUCCESS;
}

// The two-process cases' common part: fills `g` (float32, kIpcN elements on
// device 0) with 3 * i, shares it to two, sends one share to a fresh exec'd
// child (start_ipc_child), which checks the values and writes -1 to element
// 0; checks the child's exit, its reference coming back and its write.
// Returns the other share, still held by the caller.
hurray_buffer round_trip_through_child(hurray_buffer *g) {
  int sv[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
  fcntl(sv[0], F_SETFD, FD_CLOEXEC);
  const pid_t pid = start_ipc_child(sv[1]);
  close(sv[1]);
  CHECK(pid > 0, "fork");
  std::vector<float> host(static_cast<size_t>(kIpcN));
  for (int64_t i = 0; i < kIpcN; ++i) host[static_cast<size_t>(i)] = 3.0f * static_cast<float>(i);
  const CUdeviceptr p = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(g->data));
  {
    CurrentContext in0(0);
    CU(cuMemcpyHtoD(p, host.data(), host.size() * 4));
  }
  hurray_buffer two[2];
  CHECK_OK(hurray_share(g, 2, two));
  const uint64_t returns = diagnostics().ipc_returns;
  CHECK_OK(hurray_ipc_send(sv[0], &two[0], HURRAY_IPC_DEFAULT));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  close(sv[0]);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child's status is %d", status);
  for (int i = 0; i < 500 && diagnostics().ipc_returns != returns + 1; ++i) usleep(10000);
  CHECK(diagnostics().ipc_returns == returns + 1, "the child's reference did not come back");
  float first = 0;
  {
    CurrentContext in0(0);
    CU(cuMemcpyDtoH(&first, p, 4));
  }
  CHECK(first == -1.0f, "element 0 is %g, the child wrote -1", first);
  return two[1];
}

// Several VMM mappings in one reservation (docs/impl/ipc.md §6, the
// whole-allocation check): `n` mappings of `size` bytes each, back to back
// from va; mapping i maps `size` bytes of a new allocation of `alloc[i]`
// bytes from its byte `offset[i]`, read-write on device 0. Freed by the
// destructor (each mapping unmapped, the range freed; the mappings hold the
// allocations).
struct VmmRegion {
  CUdeviceptr va = 0;
  size_t size = 0;
  int n = 0, mapped = 0;
  VmmRegion(size_t each, int count) : size(each), n(count) {
    CU(cuMemAddressReserve(&va, size * static_cast<size_t>(n), 0, 0, 0));
  }
  VmmRegion(const VmmRegion &) = delete;
  VmmRegion &operator=(const VmmRegion &) = delete;
  ~VmmRegion() {
    for (int i = 0; i < mapped; ++i) (void)cuMemUnmap(at(i), size);
    (void)cuMemAddressFree(va, size * static_cast<size_t>(n));
  }
  CUdeviceptr at(int i) const { return va + size * static_cast<size_t>(i); }
  // CUDA_SUCCESS, or the CUresult of the failing step (nothing left mapped
  // by it).
  CUresult map_next(size_t alloc, size_t offset) {
    CUmemAllocationProp prop;
    std::memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUmemGenericAllocationHandle h = 0;
    CUresult r = cuMemCreate(&h, alloc, &prop, 0);
    if (r != CUDA_SUCCESS) return r;
    r = cuMemMap(at(mapped), size, offset, h, 0);
    (void)cuMemRelease(h);
    if (r != CUDA_SUCCESS) return r;
    CUmemAccessDesc access;
    std::memset(&access, 0, sizeof access);
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = cuMemSetAccess(at(mapped), size, &access, 1);
    if (r != CUDA_SUCCESS) {
      (void)cuMemUnmap(at(mapped), size);
      return r;
    }
    ++mapped;
    return CUDA_SUCCESS;
  }
};

// A handle of kIpcN floats at `p` (memory the caller frees) whose release
// counts in *releases.
struct Counted {
  int64_t shape[1] = {kIpcN};
  int64_t strides[1] = {1};
  std::atomic<int> *releases;
};
void counted_release(void *user_data) {
  auto *c = static_cast<Counted *>(user_data);
  c->releases->fetch_add(1);
  delete c;
}
hurray_buffer counted_view(CUdeviceptr p, std::atomic<int> *releases) {
  auto *c = new Counted{{kIpcN}, {1}, releases};
  hurray_buffer h;
  std::memset(&h, 0, sizeof h);
  h.version = HURRAY_BUFFER_VERSION;
  h.release_fn = &counted_release;
  h.user_data = c;
  h.data = reinterpret_cast<void *>(static_cast<uintptr_t>(p));
  h.device = {HURRAY_DEVICE_CUDA, 0};
  h.dtype = kF32;
  h.ndim = 1;
  h.shape = c->shape;
  h.strides = c->strides;
  return h;
}

// Whether device 0 can export VMM allocations as POSIX fds (a failed driver
// call fails the check, as CU does); prints why the case is skipped when not.
bool device0_exports_vmm_fds() {
  int supported = 0;
  CUdevice dev0;
  CU(cuDeviceGet(&dev0, 0));
  CU(cuDeviceGetAttribute(&supported,
                          CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev0));
  if (supported == 0) {
    std::printf("note: device 0 cannot export VMM allocations as POSIX fds; case skipped\n");
  }
  return supported != 0;
}

}  // namespace

void ipc_checks() {
  // Two processes: the parent writes device memory, a fresh child imports it
  // (CUDA legacy IPC), checks the values and writes one back; the parent
  // sees the write and its reference come back.
  run("device memory to another process and back", [&] {
    hurray_buffer g = alloc({HURRAY_DEVICE_CUDA, 0}, kIpcN);
    hurray_buffer other = round_trip_through_child(&g);
    hurray_buffer_release(&other);
  });

  // The same with a CUDA VMM allocation made with the POSIX-fd handle type
  // (kind 2: the allocation travels as an fd); one made without it is
  // refused with nothing consumed.
  run("VMM allocation to another process and back", [&] {
    if (!device0_exports_vmm_fds()) return;
    std::atomic<int> releases{0};
    hurray_buffer plain{};
    CU(vmm_alloc(0, &releases, &plain));
    hurray_ipc_message m;
    const int32_t st = hurray_ipc_export(&plain, HURRAY_IPC_DEFAULT, &m);
    CHECK(st == HURRAY_ERR_UNSUPPORTED_DEVICE && plain.release_fn != nullptr,
          "an allocation without the fd type: %s %s", hurray_status_name(st), hurray_last_error());
    hurray_buffer_release(&plain);
    CHECK(releases.load() == 1, "the refused allocation's release ran %d times", releases.load());

    hurray_buffer g{};
    CU(vmm_alloc(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, &releases, &g));
    hurray_buffer other = round_trip_through_child(&g);
    CHECK(releases.load() == 1, "released early (%d)", releases.load());
    hurray_buffer_release(&other);
    CHECK(releases.load() == 2, "the producer's release ran %d times", releases.load() - 1);
  });

  // Stream-ordered pool memory (kinds 5 and 6): hurray_alloc_async with
  // HURRAY_ALLOC_SHAREABLE allocates from libhurray's IPC-capable pool;
  // the child imports the pool and the pointer, checks, writes, frees its
  // pointer before the parent's reference comes back. Memory of the
  // default pool (no option) is refused with nothing consumed.
  run("pool memory to another process and back", [&] {
    CUstream stream = nullptr;
    {
      CurrentContext in0(0);
      CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    }
    const int64_t shape[1] = {kIpcN};
    hurray_buffer plain{};
    CHECK_OK(hurray_alloc_async({HURRAY_DEVICE_CUDA, 0}, kF32, 1, shape, 0, stream, &plain));
    hurray_ipc_message m;
    int32_t st = hurray_ipc_export(&plain, HURRAY_IPC_DEFAULT, &m);
    if (st == HURRAY_OK) CHECK_OK(hurray_ipc_message_discard(&m));
    CHECK(st == HURRAY_ERR_UNSUPPORTED_DEVICE && plain.release_fn != nullptr,
          "default-pool memory: %s %s", hurray_status_name(st), hurray_last_error());
    hurray_buffer_release(&plain);
    hurray_buffer g{};
    st = hurray_alloc_async({HURRAY_DEVICE_CUDA, 0}, kF32, 1, shape, HURRAY_ALLOC_SHAREABLE, stream,
                            &g);
    CHECK(st == HURRAY_OK, "shareable pool allocation: %s %s", hurray_status_name(st),
          hurray_last_error());
    if (st != HURRAY_OK) return;
    {
      CurrentContext in0(0);
      CU(cuStreamSynchronize(stream));  // the allocation, before the legacy-stream copies
    }
    hurray_buffer other = round_trip_through_child(&g);
    hurray_buffer_release(&other);
    {
      CurrentContext in0(0);
      CU(cuStreamSynchronize(stream));  // the queued frees
      CU(cuStreamDestroy(stream));
    }
  });

  // Two VMM allocations mapped back to back in one reservation (PyTorch's
  // expandable segments): the second one's data must reach the child with
  // its own bytes (round_trip_through_child checks them; the first
  // allocation holds -5 everywhere), or be refused with the reason, never
  // carry the first's. Then a mapping of the second half of an allocation
  // (cuMemMap offset > 0, where the driver allows it): refused, since the
  // receiver would map the first half.
  run("VMM allocations back to back in one reservation", [&] {
    if (!device0_exports_vmm_fds()) return;
    CUmemAllocationProp prop;
    std::memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t gran = 0;
    CU(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    const size_t size = (kIpcN * 4 + gran - 1) / gran * gran;
    std::atomic<int> releases{0};
    {
      VmmRegion two(size, 2);
      CU(two.map_next(size, 0));
      CU(two.map_next(size, 0));
      {
        CurrentContext in0(0);
        CU(cuMemsetD32(two.at(0), 0xc0a00000u /* -5.0f */, size / 4));
      }
      hurray_buffer g = counted_view(two.at(1), &releases);
      hurray_buffer probe[2];
      CHECK_OK(hurray_share(&g, 2, probe));
      hurray_ipc_message m;
      const uint64_t returns = diagnostics().ipc_returns;
      const int32_t st = hurray_ipc_export(&probe[0], HURRAY_IPC_DEFAULT, &m);
      if (st != HURRAY_OK) {
        CHECK(st == HURRAY_ERR_UNSUPPORTED_DEVICE && probe[0].release_fn != nullptr,
              "the second allocation: %s %s", hurray_status_name(st), hurray_last_error());
        std::printf("note: the second allocation of a reservation was refused: %s\n",
                    hurray_last_error());
        hurray_buffer_release(&probe[0]);
        hurray_buffer_release(&probe[1]);
      } else {
        // The exported share's reference comes back (on the watcher
        // thread) before the round trip counts its own.
        CHECK_OK(hurray_ipc_message_discard(&m));
        for (int i = 0; i < 500 && diagnostics().ipc_returns != returns + 1; ++i) usleep(10000);
        CHECK(diagnostics().ipc_returns == returns + 1, "the discarded export did not come back");
        hurray_buffer other = round_trip_through_child(&probe[1]);
        hurray_buffer_release(&other);
      }
      CHECK(releases.load() == 1, "the producer's release ran %d times", releases.load());
    }
    VmmRegion part(size, 1);
    const CUresult mapped = part.map_next(2 * size, size);
    if (mapped != CUDA_SUCCESS) {
      std::printf("note: cuMemMap at an offset > 0 failed (CUresult %d); that part skipped\n",
                  static_cast<int>(mapped));
      return;
    }
    hurray_buffer h = counted_view(part.at(0), &releases);
    hurray_ipc_message m;
    const int32_t st = hurray_ipc_export(&h, HURRAY_IPC_DEFAULT, &m);
    if (st == HURRAY_OK) CHECK_OK(hurray_ipc_message_discard(&m));
    CHECK(st == HURRAY_ERR_UNSUPPORTED_DEVICE && h.release_fn != nullptr,
          "a mapping at an offset: %s %s", hurray_status_name(st), hurray_last_error());
    hurray_buffer_release(&h);
    CHECK(releases.load() == 2, "the producer's release ran %d times", releases.load() - 1);
  });
}

}  // namespace gpu_suite
