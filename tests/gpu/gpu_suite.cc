// SPDX-License-Identifier: Apache-2.0
// Real-GPU suite for libhurray's CUDA back end (run by tests/gpu/run.sh on a
// machine with an NVIDIA GPU). It uses the driver API directly only to make
// streams and read the thread's context; everything else goes through
// libhurray. Prints one line per check and a closing "N passed, M failed".
//
// `gpu_suite --exit-release` is the child the static-destructor check runs:
// it keeps GPU memory in a static object released after exit() began.
// `gpu_suite --ipc-child FD` is the receiver of the two-process cases
// (legacy IPC and VMM fds, docs/impl/ipc.md §6): a fresh process (exec'd, since a child forked
// after cuInit cannot use CUDA) that receives device memory on socket FD.
//
// This file holds main, the harness (gpu_suite.h) and the single-process
// checks; gpu_suite_strided.cc the non-contiguous copies and
// gpu_suite_ipc.cc the two-process cases.
#include <cuda.h>
#include <hurray/dlpack.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hurray/hurray.h"
#include "gpu_suite.h"

namespace gpu_suite {

namespace {
int g_passed = 0, g_failed = 0;
}  // namespace

void run(const char *name, const std::function<void()> &fn) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    fn();
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("PASS %-44s %9.1f ms\n", name, ms);
    ++g_passed;
  } catch (const Failure &f) {
    std::printf("FAIL %-44s %s\n", name, f.why.c_str());
    ++g_failed;
  }
  std::fflush(stdout);
}

hurray_buffer alloc(hurray_device d, int64_t n, void *stream) {
  hurray_buffer h{};
  CHECK_OK(hurray_alloc_async(d, kF32, 1, &n, 0, stream, &h));
  return h;
}

hurray_buffer iota_cpu(int64_t n, float scale) {
  hurray_buffer h = alloc({HURRAY_DEVICE_CPU, 0}, n);
  for (int64_t i = 0; i < n; ++i) static_cast<float *>(h.data)[i] = scale * static_cast<float>(i);
  return h;
}

void expect_iota(const hurray_buffer &gpu, int64_t n, float scale) {
  hurray_buffer back{};
  CHECK_OK(hurray_copy(&gpu, {HURRAY_DEVICE_CPU, 0}, &back));
  for (int64_t i = 0; i < n; ++i) {
    const float v = static_cast<float *>(back.data)[i];
    if (v != scale * static_cast<float>(i)) {
      hurray_buffer_release(&back);
      CHECK(false, "element %lld is %g, expected %g", static_cast<long long>(i), v,
            scale * static_cast<float>(i));
    }
  }
  hurray_buffer_release(&back);
}

uint64_t failed_releases() {
  hurray_diagnostics d{};
  d.struct_size = sizeof d;
  if (hurray_get_diagnostics(&d) != HURRAY_OK) return ~0ull;
  return d.failed_releases + d.teardown_leaks;
}

hurray_diagnostics diagnostics() {
  hurray_diagnostics d{};
  d.struct_size = sizeof d;
  if (hurray_get_diagnostics(&d) != HURRAY_OK) std::memset(&d, 0xff, sizeof d);
  return d;
}

}  // namespace gpu_suite

using namespace gpu_suite;  // NOLINT: the checks below use the harness throughout

namespace {

// --exit-release: constructed before main, so destroyed after the atexit
// handlers registered during main (the driver's among them).
struct HeldUntilExit {
  hurray_buffer h[3]{};
  bool armed = false;
  ~HeldUntilExit() {
    if (!armed) return;
    for (hurray_buffer &b : h) hurray_buffer_release(&b);
    const hurray_diagnostics d = diagnostics();
    std::printf("exit-release done failed_releases=%llu teardown_leaks=%llu\n",
                static_cast<unsigned long long>(d.failed_releases),
                static_cast<unsigned long long>(d.teardown_leaks));
    std::fflush(stdout);
  }
} g_held;

int exit_release_child() {
  int64_t n = 1024;
  const hurray_device kinds[3] = {
      {HURRAY_DEVICE_CUDA, 0}, {HURRAY_DEVICE_CUDA_HOST, 0}, {HURRAY_DEVICE_CUDA_MANAGED, 0}};
  for (int i = 0; i < 3; ++i) {
    if (hurray_alloc(kinds[i], kF32, 1, &n, 0, &g_held.h[i]) != HURRAY_OK) {
      std::printf("exit-release alloc failed: %s\n", hurray_last_error());
      return 1;
    }
  }
  g_held.armed = true;
  return 0;
}

size_t free_bytes(int device) {
  CUcontext ctx;
  CUdevice dev;
  size_t free = 0, total = 0;
  if (cuDeviceGet(&dev, device) != CUDA_SUCCESS) return 0;
  if (cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS) return 0;
  cuCtxPushCurrent(ctx);
  cuMemGetInfo(&free, &total);
  cuCtxPopCurrent(&ctx);
  cuDevicePrimaryCtxRelease(dev);
  return free;
}

// Runs this program again as a child with `arg` (fork, then execv of the
// file /proc/self/exe names, resolved before the fork: no shell, which would
// resolve /proc/self/exe to itself), its stdout and stderr collected in
// *out. Returns the child's wait status, or -1 when it could not be started.
int run_self(const char *arg, std::string *out) {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return -1;
  exe[n] = '\0';
  int fds[2];
  if (pipe(fds) != 0) return -1;
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return -1;
  }
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    char *const argv[] = {exe, const_cast<char *>(arg), nullptr};
    execv(exe, argv);
    _exit(127);
  }
  close(fds[1]);
  char buf[256];
  ssize_t got;
  while ((got = read(fds[0], buf, sizeof buf)) > 0 || (got < 0 && errno == EINTR)) {
    if (got > 0) out->append(buf, static_cast<size_t>(got));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc > 1 && std::strcmp(argv[1], "--exit-release") == 0) return exit_release_child();
  if (argc > 2 && std::strcmp(argv[1], "--ipc-child") == 0) return ipc_child(std::atoi(argv[2]));
  std::printf("libhurray real-GPU suite (CUDA)\n");
  hurray_buffer probe{};
  const int64_t one = 1;
  if (hurray_alloc({HURRAY_DEVICE_CUDA, 0}, kF32, 1, &one, 0, &probe) != HURRAY_OK) {
    std::printf("SKIP: no usable CUDA device: %s\n", hurray_last_error());
    return 77;
  }
  hurray_buffer_release(&probe);
  int devices = 0;
  cuInit(0);
  cuDeviceGetCount(&devices);
  std::printf("devices: %d\n", devices);
  const uint64_t failures_at_start = failed_releases();

  std::vector<hurray_device> kinds;
  for (int d = 0; d < devices && d < 2; ++d) kinds.push_back({HURRAY_DEVICE_CUDA, d});
  kinds.push_back({HURRAY_DEVICE_CUDA_HOST, 0});
  kinds.push_back({HURRAY_DEVICE_CUDA_MANAGED, 0});

  for (const hurray_device &k : kinds) {
    const std::string name =
        std::string("alloc/copy/DLPack ") +
        (k.device_type == HURRAY_DEVICE_CUDA        ? "kDLCUDA:" + std::to_string(k.device_id)
         : k.device_type == HURRAY_DEVICE_CUDA_HOST ? "kDLCUDAHost"
                                                    : "kDLCUDAManaged");
    run(name.c_str(), [&] {
      hurray_buffer cpu = iota_cpu(kN, 0.5f);
      hurray_buffer g{};
      CHECK_OK(hurray_copy(&cpu, k, &g));
      CHECK(g.device.device_type == k.device_type && g.device.device_id == k.device_id, "device");
      // Round trip through both DLPack structs, with the pointer check.
      DLManagedTensorVersioned *tv = nullptr;
      CHECK_OK(hurray_to_dlpack_versioned(&g, &tv));
      CHECK(static_cast<int>(tv->dl_tensor.device.device_type) == k.device_type &&
                tv->dl_tensor.device.device_id == k.device_id,
            "exported device");
      CHECK_OK(hurray_from_dlpack_versioned(tv, HURRAY_IMPORT_CHECK_DEVICE_POINTER, &g));
      DLManagedTensor *tl = nullptr;
      CHECK_OK(hurray_to_dlpack(&g, &tl));
      CHECK_OK(hurray_from_dlpack(tl, HURRAY_IMPORT_CHECK_DEVICE_POINTER, &g));
      expect_iota(g, kN, 0.5f);
      // Share across threads; each consumer copies and checks, then releases.
      hurray_buffer out[8];
      CHECK_OK(hurray_share(&g, 8, out));
      std::atomic<int> bad{0};
      std::vector<std::thread> threads;
      for (hurray_buffer &b : out) {
        threads.emplace_back([&b, &bad] {
          hurray_buffer c{};
          if (hurray_copy(&b, {HURRAY_DEVICE_CPU, 0}, &c) != HURRAY_OK ||
              static_cast<float *>(c.data)[kN - 1] != 0.5f * static_cast<float>(kN - 1)) {
            bad.fetch_add(1);
          }
          hurray_buffer_release(&c);
          CUcontext before = nullptr, after = nullptr;
          cuCtxGetCurrent(&before);
          hurray_buffer_release(&b);
          cuCtxGetCurrent(&after);
          if (before != after) bad.fetch_add(100);
        });
      }
      for (auto &t : threads) t.join();
      CHECK(bad.load() == 0, "%d consumer checks failed", bad.load());
      hurray_buffer_release(&cpu);
    });
  }

  run("pointer check rejects a lie", [&] {
    hurray_buffer g = alloc({HURRAY_DEVICE_CUDA, 0}, 64);
    std::vector<float> host(64);
    int64_t shape = 64, stride = 1;
    DLManagedTensor t{};
    t.dl_tensor.data = host.data();
    t.dl_tensor.device = {kDLCUDA, 0};
    t.dl_tensor.ndim = 1;
    t.dl_tensor.dtype = {kDLFloat, 32, 1};
    t.dl_tensor.shape = &shape;
    t.dl_tensor.strides = &stride;
    hurray_buffer out{};
    CHECK(hurray_from_dlpack(&t, HURRAY_IMPORT_CHECK_DEVICE_POINTER, &out) ==
              HURRAY_ERR_INVALID_ARGUMENT,
          "host memory passed as kDLCUDA");
    t.dl_tensor.data = g.data;
    t.dl_tensor.device = {kDLCUDAHost, 0};
    CHECK(hurray_from_dlpack(&t, HURRAY_IMPORT_CHECK_DEVICE_POINTER, &out) ==
              HURRAY_ERR_INVALID_ARGUMENT,
          "device memory passed as kDLCUDAHost");
    hurray_buffer_release(&g);
  });

  run("stream-ordered alloc, copy, wait, cross-thread free", [&] {
    CUcontext ctx;
    CUdevice dev;
    CU(cuDeviceGet(&dev, 0));
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxPushCurrent(ctx));
    CUstream producer, consumer;
    CU(cuStreamCreate(&producer, CU_STREAM_NON_BLOCKING));
    CU(cuStreamCreate(&consumer, CU_STREAM_NON_BLOCKING));
    hurray_buffer cpu = iota_cpu(kN, 3.0f);
    hurray_buffer g{};
    CHECK_OK(hurray_copy_async(&cpu, {HURRAY_DEVICE_CUDA, 0}, producer, &g));
    CHECK_OK(hurray_stream_wait({HURRAY_DEVICE_CUDA, 0}, producer, consumer));
    hurray_buffer back{};
    CHECK_OK(hurray_copy_async(&g, {HURRAY_DEVICE_CPU, 0}, consumer, &back));
    for (int64_t i = 0; i < kN; i += 4099) {
      CHECK(static_cast<float *>(back.data)[i] == 3.0f * static_cast<float>(i), "element %lld",
            static_cast<long long>(i));
    }
    std::thread([&] { hurray_buffer_release(&g); }).join();  // cuMemFreeAsync on `producer`
    CU(cuStreamSynchronize(producer));
    CU(cuStreamSynchronize(consumer));
    CU(cuStreamDestroy(producer));
    CU(cuStreamDestroy(consumer));
    CU(cuCtxPopCurrent(&ctx));
    CU(cuDevicePrimaryCtxRelease(dev));
    hurray_buffer_release(&back);
    hurray_buffer_release(&cpu);
  });

  run("release on a thread without a context", [&] {
    hurray_buffer g = alloc({HURRAY_DEVICE_CUDA, devices > 1 ? 1 : 0}, 1024);
    CUcontext after = reinterpret_cast<CUcontext>(1);
    std::thread([&] {
      hurray_buffer_release(&g);
      cuCtxGetCurrent(&after);
    }).join();
    CHECK(after == nullptr, "the thread was left with a context");
  });

  run("100000 share/release cycles across 4 threads", [&] {
    const size_t free_before = free_bytes(0);
    std::mutex mu;
    std::vector<hurray_buffer> handoff;
    std::atomic<int> bad{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        std::vector<hurray_buffer> mine;
        for (int i = 0; i < 25000; ++i) {
          int64_t n = 256;
          hurray_buffer h{};
          if (hurray_alloc({HURRAY_DEVICE_CUDA, (t + i) % (devices > 1 ? 2 : 1)}, kF32, 1, &n, 0,
                           &h) != HURRAY_OK) {
            bad.fetch_add(1);
            continue;
          }
          hurray_buffer two[2];
          if (hurray_share(&h, 2, two) != HURRAY_OK) bad.fetch_add(1);
          hurray_buffer_release(&two[0]);
          {
            std::lock_guard<std::mutex> lock(mu);
            handoff.push_back(two[1]);
            if (handoff.size() >= 64) mine.swap(handoff);
          }
          for (hurray_buffer &b : mine) hurray_buffer_release(&b);  // someone else's, often
          mine.clear();
        }
      });
    }
    for (auto &t : threads) t.join();
    for (hurray_buffer &b : handoff) hurray_buffer_release(&b);
    CHECK(bad.load() == 0, "%d cycles failed", bad.load());
    const size_t free_after = free_bytes(0);
    CHECK(free_after + (64u << 20) >= free_before, "device 0 lost %zu bytes",
          free_before - free_after);
  });

  pinned_pending_check();
  strided_checks(devices);

  run("release during another thread's graph capture", [&] {
    hurray_buffer target = alloc({HURRAY_DEVICE_CUDA, 0}, 4096);
    std::atomic<int> phase{0};
    CUresult begin = CUDA_SUCCESS, end = CUDA_SUCCESS;
    std::thread capturer([&] {
      CUcontext ctx;
      CUdevice dev;
      cuDeviceGet(&dev, 0);
      cuDevicePrimaryCtxRetain(&ctx, dev);
      cuCtxPushCurrent(ctx);
      CUstream s;
      cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
      begin = cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL);
      cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(target.data), 0, 4096, s);
      phase.store(1);
      while (phase.load() != 2) std::this_thread::yield();
      CUgraph graph = nullptr;
      end = cuStreamEndCapture(s, &graph);
      if (graph != nullptr) cuGraphDestroy(graph);
      cuStreamDestroy(s);
      cuCtxPopCurrent(&ctx);
      cuDevicePrimaryCtxRelease(dev);
    });
    while (phase.load() != 1) std::this_thread::yield();
    const uint64_t failed = diagnostics().failed_releases;
    bool ok = true;
    {
      hurray_buffer cpu = iota_cpu(4096, 1.0f);
      hurray_buffer g{}, pinned{};
      int64_t n = 4096;
      ok = hurray_copy(&cpu, {HURRAY_DEVICE_CUDA, 0}, &g) == HURRAY_OK &&
           hurray_alloc({HURRAY_DEVICE_CUDA_HOST, 0}, kF32, 1, &n, 0, &pinned) == HURRAY_OK;
      hurray_buffer_release(&g);
      hurray_buffer_release(&pinned);
      hurray_buffer_release(&cpu);
    }
    phase.store(2);
    capturer.join();
    hurray_buffer_release(&target);
    CHECK(begin == CUDA_SUCCESS, "cuStreamBeginCapture: %d", static_cast<int>(begin));
    CHECK(ok, "allocation or copy failed during the capture: %s", hurray_last_error());
    CHECK(end == CUDA_SUCCESS, "the capture was invalidated: cuStreamEndCapture %d",
          static_cast<int>(end));
    CHECK(diagnostics().failed_releases == failed, "a release failed during the capture");
  });

  run("forked child skips releases and is refused the GPU", [&] {
    hurray_buffer g = alloc({HURRAY_DEVICE_CUDA, 0}, 1024);
    const uint64_t skips = diagnostics().fork_skipped_releases;
    std::fflush(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
      alarm(20);
      hurray_buffer copy = g;
      hurray_buffer_release(&copy);
      int code = diagnostics().fork_skipped_releases == skips + 1 ? 0 : 1;
      int64_t n = 4;
      hurray_buffer x{};
      if (hurray_alloc({HURRAY_DEVICE_CUDA, 0}, kF32, 1, &n, 0, &x) !=
          HURRAY_ERR_UNSUPPORTED_DEVICE) {
        code |= 2;
      }
      _exit(code);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    hurray_buffer_release(&g);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status 0x%x", status);
  });

  run("releases from static destructors at exit", [&] {
    std::string out;
    const int status = run_self("--exit-release", &out);
    CHECK(status != -1, "could not start the child: %s", std::strerror(errno));
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status 0x%x: %s", status,
          out.c_str());
    CHECK(out.find("exit-release done failed_releases=0") != std::string::npos, "%s", out.c_str());
  });

  // Defect 7: the per-thread default stream and a destination on another
  // device. The copying thread queues a peer copy on its own per-thread
  // stream in device 0's context and more work behind it; another thread
  // releases the destination at once, which must wait for device 0's
  // context first (run under compute-sanitizer, a free before the copy
  // finished would be reported).
  if (devices > 1) {
    run("stream-2 copy to device 1, freed on another thread", [&] {
      void *const per_thread = reinterpret_cast<void *>(2);  // CU_STREAM_PER_THREAD
      hurray_buffer cpu = iota_cpu(kN, 5.0f);
      hurray_buffer src{}, dst{}, check{};
      CHECK_OK(hurray_copy(&cpu, {HURRAY_DEVICE_CUDA, 0}, &src));
      const uint64_t failed = failed_releases();
      std::string copier_failed;  // a CHECK must not throw out of a thread
      std::thread([&] {
        try {
          for (int i = 0; i < 8; ++i) {
            hurray_buffer peer{};
            CHECK_OK(hurray_copy_async(&src, {HURRAY_DEVICE_CUDA, 1}, per_thread, &peer));
            if (i == 0) {
              // The peer copy is ordered on this thread's per-thread stream
              // of device 0 only: wait for it there before reading.
              CUdevice d0;
              CUcontext c0;
              CU(cuDeviceGet(&d0, 0));
              CU(cuDevicePrimaryCtxRetain(&c0, d0));
              CU(cuCtxPushCurrent(c0));
              CU(cuStreamSynchronize(CU_STREAM_PER_THREAD));
              CU(cuCtxPopCurrent(&c0));
              CU(cuDevicePrimaryCtxRelease(d0));
              CHECK_OK(hurray_copy(&peer, {HURRAY_DEVICE_CUDA, 1}, &check));
              expect_iota(check, kN, 5.0f);
            }
            if (i == 7) {
              dst = peer;  // released below, on yet another thread, right away
            } else {
              std::thread([&] { hurray_buffer_release(&peer); }).join();
            }
          }
        } catch (const Failure &f) {
          copier_failed = f.why;
        }
      }).join();
      CHECK(copier_failed.empty(), "copying thread: %s", copier_failed.c_str());
      CUcontext after = reinterpret_cast<CUcontext>(1);
      std::thread([&] {
        hurray_buffer_release(&dst);
        cuCtxGetCurrent(&after);
      }).join();
      CHECK(after == nullptr, "the releasing thread was left with a context");
      CHECK(failed_releases() == failed, "a release failed");
      hurray_buffer_release(&check);
      hurray_buffer_release(&src);
      hurray_buffer_release(&cpu);
    });
  } else {
    std::printf("SKIP %-44s needs two devices\n",
                "stream-2 copy to device 1, freed on another thread");
  }

  // A release while the memory's stream is being captured must
  // not touch the stream (cuStreamQuery, cuStreamSynchronize or a free node
  // of memory from outside the graph would invalidate the capture): the
  // free is deferred. The stream is non-blocking, so the deferral keeps it
  // and hurray_retire_deferred_frees, called after the capture ended and
  // before the stream is destroyed, makes the free, on s (docs/impl/gpu.md
  // §2). A copy into kDLCPU memory on the capturing stream is refused up
  // front.
  run("release and copy during a capture of the stream", [&] {
    CUstream s;
    {
      CurrentContext in0(0);
      CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    }
    hurray_buffer g = alloc({HURRAY_DEVICE_CUDA, 0}, kN, s);
    hurray_buffer src = alloc({HURRAY_DEVICE_CUDA, 0}, 1024);
    const hurray_diagnostics before = diagnostics();
    CUresult begin, end;
    CUgraph graph = nullptr;
    {
      CurrentContext in0(0);
      begin = cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL);
    }
    std::thread([&] { hurray_buffer_release(&g); }).join();
    hurray_buffer out{};
    const int32_t refused = hurray_copy_async(&src, {HURRAY_DEVICE_CPU, 0}, s, &out);
    {
      CurrentContext in0(0);
      end = cuStreamEndCapture(s, &graph);
      if (graph != nullptr) cuGraphDestroy(graph);
    }
    size_t remaining = 99;
    const int32_t retired = hurray_retire_deferred_frees({HURRAY_DEVICE_CUDA, 0}, &remaining);
    {
      CurrentContext in0(0);
      CU(cuStreamSynchronize(s));
      CU(cuStreamDestroy(s));
    }
    hurray_buffer_release(&src);
    CHECK(begin == CUDA_SUCCESS, "cuStreamBeginCapture: %d", static_cast<int>(begin));
    CHECK(end == CUDA_SUCCESS, "the capture was invalidated: cuStreamEndCapture %d",
          static_cast<int>(end));
    CHECK(refused == HURRAY_ERR_INVALID_ARGUMENT, "the copy to the CPU gave %s: %s",
          hurray_status_name(refused), hurray_last_error());
    CHECK(retired == HURRAY_OK && remaining == 0, "hurray_retire_deferred_frees gave %s, %zu left",
          hurray_status_name(retired), remaining);
    CHECK(diagnostics().failed_releases == before.failed_releases, "a release failed");
  });

  // The same with a blocking stream, destroyed right after its capture:
  // the deferral keeps no stream, and libhurray's retirer frees the memory
  // on the legacy stream (cuMemFreeAsync) once no blocking stream captures.
  run("release during a capture of a blocking stream destroyed at once", [&] {
    CUstream s;
    {
      CurrentContext in0(0);
      CU(cuStreamCreate(&s, CU_STREAM_DEFAULT));
    }
    hurray_buffer g = alloc({HURRAY_DEVICE_CUDA, 0}, kN, s);
    const hurray_diagnostics before = diagnostics();
    CUresult begin, end;
    CUgraph graph = nullptr;
    {
      CurrentContext in0(0);
      begin = cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL);
    }
    std::thread([&] { hurray_buffer_release(&g); }).join();
    {
      CurrentContext in0(0);
      end = cuStreamEndCapture(s, &graph);
      if (graph != nullptr) cuGraphDestroy(graph);
      CU(cuStreamDestroy(s));  // at once: the deferral must not name s again
    }
    // Retired by the retirer or, should this come first, by the call; the
    // free is on the legacy stream either way.
    size_t remaining = 1;
    const int32_t retired = hurray_retire_deferred_frees({HURRAY_DEVICE_CUDA, 0}, &remaining);
    {
      CurrentContext in0(0);
      CU(cuStreamSynchronize(CU_STREAM_LEGACY));
    }
    CHECK(begin == CUDA_SUCCESS, "cuStreamBeginCapture: %d", static_cast<int>(begin));
    CHECK(end == CUDA_SUCCESS, "the capture was invalidated: cuStreamEndCapture %d",
          static_cast<int>(end));
    CHECK(retired == HURRAY_OK && remaining == 0, "%s, %zu deferred releases still kept",
          hurray_status_name(retired), remaining);
    CHECK(diagnostics().failed_releases == before.failed_releases, "a release failed");
  });

  // The legacy default stream in a copy to another device: the
  // destination's release waits for device 0's legacy stream (where the
  // copy is queued), not the releasing thread's current context's.
  if (devices > 1) {
    run("legacy-stream copy to device 1, freed on another thread", [&] {
      void *const legacy = reinterpret_cast<void *>(1);  // CU_STREAM_LEGACY
      hurray_buffer cpu = iota_cpu(kN, 4.0f);
      hurray_buffer src{}, dst{};
      CHECK_OK(hurray_copy(&cpu, {HURRAY_DEVICE_CUDA, 0}, &src));
      const uint64_t failed = failed_releases();
      CHECK_OK(hurray_copy_async(&src, {HURRAY_DEVICE_CUDA, 1}, legacy, &dst));
      std::thread([&] { hurray_buffer_release(&dst); }).join();
      CHECK(failed_releases() == failed, "a release failed");
      hurray_buffer_release(&src);
      hurray_buffer_release(&cpu);
    });
  }

  // The two-process cases (gpu_suite_ipc.cc).
  ipc_checks();

  // Last: it destroys everything on device 0.
  run("release after a primary context reset", [&] {
    hurray_buffer g = alloc({HURRAY_DEVICE_CUDA, 0}, kN);
    hurray_buffer pinned = alloc({HURRAY_DEVICE_CUDA_HOST, 0}, 1024);
    const hurray_diagnostics before = diagnostics();
    CUdevice dev;
    CU(cuDeviceGet(&dev, 0));
    CU(cuDevicePrimaryCtxReset(dev));  // what cudaDeviceReset() does
    std::thread([&] {
      hurray_buffer_release(&g);
      hurray_buffer_release(&pinned);
    }).join();
    const hurray_diagnostics after = diagnostics();
    CHECK(after.context_reset_skips == before.context_reset_skips + 2, "skips %llu -> %llu",
          static_cast<unsigned long long>(before.context_reset_skips),
          static_cast<unsigned long long>(after.context_reset_skips));
    CHECK(after.failed_releases == before.failed_releases, "a release failed");
    // New work retains the context again.
    hurray_buffer cpu = iota_cpu(kN, 2.0f);
    hurray_buffer again{};
    CHECK_OK(hurray_copy(&cpu, {HURRAY_DEVICE_CUDA, 0}, &again));
    expect_iota(again, kN, 2.0f);
    hurray_buffer_release(&again);
    hurray_buffer_release(&cpu);
    CHECK(diagnostics().failed_releases == before.failed_releases, "a release failed after");
  });

  run("no failed or leaked releases", [&] {
    CHECK(failed_releases() == failures_at_start, "diagnostics counted %llu",
          static_cast<unsigned long long>(failed_releases() - failures_at_start));
  });

  std::printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
