// SPDX-License-Identifier: Apache-2.0
// A small program the scenario tests run in a child process, with the
// environment each scenario needs (which library, which fake settings):
// loading happens once per process, so each loading scenario needs its own.
//
//   probe alloc TYPE ID [N]    hurray_alloc of N elements (default 16) on
//                              (TYPE, ID) and on the CPU; prints status=,
//                              message=, cpu=
//   probe exit-teardown TYPE   keeps GPU memory in a static object whose
//                              destructor releases it after the driver tore
//                              itself down at exit; prints the counters then
//   probe teardown-now TYPE    driver torn down (fake control) before two
//                              releases; prints counters and driver calls
//   probe concurrent TYPE N    N threads make the first GPU request at once;
//                              prints ok= and init_count=
//   probe check-pointers       HIP pointer checks (run with the ROCm 5
//                              encoding); prints one verdict per line
//   probe which-hip            allocates HIP memory and prints the loaded
//                              libamdhip64 file
//   probe reentrant-hook TYPE  every free fails; the diagnostic hook releases
//                              another handle and swaps itself; prints what
//                              the hook saw (killed by SIGALRM on a deadlock)
//   probe fork-in-hook TYPE    forks while another thread runs the hook; the
//                              child sets a hook; prints child=<status>
//   probe fork-in-load TYPE    forks while another thread makes the first GPU
//                              request (run with FAKE_CUDA_INIT_DELAY_MS);
//                              the child's request must be refused; prints
//                              the child's answer and the driver's init count
//   probe ipc-COMMAND TYPE     GPU memory across processes (ipc_probe.cc)
//   probe deferred-COMMAND     releases deferred during a graph capture, with
//                              a fork or an exit (deferred_probe.cc)
#include <dlfcn.h>
#include <link.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fake_control.h"
#include "hurray/hurray.h"

namespace {

constexpr hurray_dtype kF32{2, 32, 1};

void out(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void out(const char *fmt, ...) {
  // Straight to the fd: usable from exit-time destructors.
  char buf[1024];
  va_list args;
  va_start(args, fmt);
  const int n = std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  if (n > 0) (void)!write(1, buf, static_cast<size_t>(n < 1024 ? n : 1023));
}

bool is_cuda(int type) {
  return type == HURRAY_DEVICE_CUDA || type == HURRAY_DEVICE_CUDA_HOST ||
         type == HURRAY_DEVICE_CUDA_MANAGED;
}

// The fake's control function `name` (fake_cuda_ / fake_hip_ prefix chosen
// by the device type), from the library libhurray was pointed at.
void *control(int type, const char *name) {
  const char *path =
      std::getenv(is_cuda(type) ? "HURRAY_CUDA_DRIVER_PATH" : "HURRAY_HIP_LIBRARY_PATH");
  if (path == nullptr) return nullptr;
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return nullptr;
  std::string full = std::string(is_cuda(type) ? "fake_cuda_" : "fake_hip_") + name;
  return dlsym(lib, full.c_str());
}

hurray_diagnostics diag() {
  hurray_diagnostics d{};
  d.struct_size = sizeof d;
  if (hurray_get_diagnostics(&d) != HURRAY_OK) out("hurray_get_diagnostics failed\n");
  return d;
}

int32_t alloc(int type, int id, hurray_buffer *h, int64_t n = 16) {
  const int64_t shape[1] = {n};
  return hurray_alloc(hurray_device{type, id}, kF32, 1, shape, 0, h);
}

// exit-teardown: constructed before main, so destroyed after the atexit
// handlers that main's calls registered (the driver's teardown among them).
struct HeldUntilExit {
  hurray_buffer h{};
  bool armed = false;
  ~HeldUntilExit() {
    if (!armed) return;
    hurray_buffer_release(&h);
    hurray_diagnostics d = diag();
    out("after-exit teardown_leaks=%llu failed_releases=%llu\n",
        static_cast<unsigned long long>(d.teardown_leaks),
        static_cast<unsigned long long>(d.failed_releases));
  }
} g_held;

int cmd_alloc(int type, int id, int64_t n) {
  hurray_buffer h{};
  int32_t st = alloc(type, id, &h, n);
  out("status=%s\nmessage=%s\n", hurray_status_name(st), hurray_last_error());
  if (st == HURRAY_OK) hurray_buffer_release(&h);
  hurray_buffer c{};
  st = alloc(HURRAY_DEVICE_CPU, 0, &c);
  out("cpu=%s\n", hurray_status_name(st));
  if (st == HURRAY_OK) hurray_buffer_release(&c);
  return 0;
}

int cmd_exit_teardown(int type) {
  if (alloc(type, 0, &g_held.h) != HURRAY_OK) {
    out("alloc failed: %s\n", hurray_last_error());
    return 1;
  }
  g_held.armed = true;
  out("allocated\n");
  return 0;  // the release happens after exit() has torn the driver down
}

int cmd_teardown_now(int type) {
  hurray_buffer a{}, b{};
  if (alloc(type, 0, &a) != HURRAY_OK || alloc(type, 0, &b) != HURRAY_OK) {
    out("alloc failed: %s\n", hurray_last_error());
    return 1;
  }
  auto set_deinit = reinterpret_cast<void (*)(int)>(control(type, "set_deinitialized"));
  auto count = reinterpret_cast<int (*)(const char *)>(control(type, "call_count"));
  if (set_deinit == nullptr || count == nullptr) return 2;
  set_deinit(1);
  hurray_buffer_release(&a);
  const int calls_after_first = count(nullptr);
  hurray_buffer_release(&b);
  hurray_diagnostics d = diag();
  out("teardown_leaks=%llu failed_releases=%llu calls_for_second=%d\n",
      static_cast<unsigned long long>(d.teardown_leaks),
      static_cast<unsigned long long>(d.failed_releases), count(nullptr) - calls_after_first);
  return 0;
}

int cmd_concurrent(int type, int n) {
  std::atomic<int> ready{0}, ok{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&] {
      ready.fetch_add(1);
      while (ready.load() < n) {
      }
      hurray_buffer h{};
      if (alloc(type, 0, &h) == HURRAY_OK) {
        ok.fetch_add(1);
        hurray_buffer_release(&h);
      }
    });
  }
  for (auto &t : threads) t.join();
  auto init_count = reinterpret_cast<int (*)(void)>(control(type, "init_count"));
  out("ok=%d init_count=%d\n", ok.load(), init_count != nullptr ? init_count() : -1);
  return 0;
}

int cmd_check_pointers() {
  hurray_buffer dev1{}, pinned{};
  if (alloc(HURRAY_DEVICE_ROCM, 1, &dev1) != HURRAY_OK ||
      alloc(HURRAY_DEVICE_ROCM_HOST, 0, &pinned) != HURRAY_OK) {
    out("alloc failed: %s\n", hurray_last_error());
    return 1;
  }
  std::vector<float> host(16);
  struct Case {
    const char *name;
    void *data;
    int type, id;
  } cases[] = {{"device-as-own", dev1.data, HURRAY_DEVICE_ROCM, 1},
               {"device-as-other", dev1.data, HURRAY_DEVICE_ROCM, 0},
               {"pinned-as-host", pinned.data, HURRAY_DEVICE_ROCM_HOST, 0},
               {"pinned-as-device", pinned.data, HURRAY_DEVICE_ROCM, 0},
               {"malloc-as-device", host.data(), HURRAY_DEVICE_ROCM, 0}};
  for (const Case &c : cases) {
    // Export a handle describing the memory, claim the device, import back.
    hurray_buffer h{};
    h.version = HURRAY_BUFFER_VERSION;
    h.release_fn = [](void *) {};
    h.data = c.data;
    h.device = hurray_device{c.type, c.id};
    h.dtype = kF32;
    static const int64_t shape[1] = {4}, strides[1] = {1};
    h.ndim = 1;
    h.shape = shape;
    h.strides = strides;
    DLManagedTensor *t = nullptr;
    if (hurray_to_dlpack(&h, &t) != HURRAY_OK) return 3;
    hurray_buffer back{};
    const int32_t st = hurray_from_dlpack(t, HURRAY_IMPORT_CHECK_DEVICE_POINTER, &back);
    out("%s=%s\n", c.name, hurray_status_name(st));
    if (st == HURRAY_OK) {
      hurray_buffer_release(&back);
    } else {
      hurray_dlpack_delete(t);
    }
  }
  hurray_buffer_release(&dev1);
  hurray_buffer_release(&pinned);
  return 0;
}

// reentrant-hook: the hook releases a second handle (whose free fails too)
// and installs another hook, both from inside the hook.
struct HookState {
  hurray_buffer other{};
  int calls = 0;
  int swapped_calls = 0;
  std::string first;
};
HookState g_hook_state;

void swapped_hook(int32_t, const char *, void *) { ++g_hook_state.swapped_calls; }

void reentrant_hook(int32_t, const char *message, void *) {
  HookState &s = g_hook_state;
  if (++s.calls == 1) s.first = message;
  if (s.other.release_fn != nullptr) hurray_buffer_release(&s.other);
  (void)hurray_set_diagnostic_hook(&swapped_hook, nullptr);
}

int cmd_reentrant_hook(int type) {
  hurray_buffer a{}, c{};
  if (alloc(type, 0, &a) != HURRAY_OK || alloc(type, 0, &g_hook_state.other) != HURRAY_OK ||
      alloc(type, 0, &c) != HURRAY_OK) {
    out("alloc failed: %s\n", hurray_last_error());
    return 1;
  }
  auto inject = reinterpret_cast<void (*)(const char *, int, int)>(control(type, "inject"));
  if (inject == nullptr) return 2;
  const bool cuda = is_cuda(type);
  const char *free_fn = type == HURRAY_DEVICE_CUDA_HOST   ? "cuMemFreeHost"
                        : cuda                            ? "cuMemFree"
                        : type == HURRAY_DEVICE_ROCM_HOST ? "hipHostFree"
                                                          : "hipFree";
  inject(free_fn, 700, -1);  // every free fails from now on (illegal address, both vendors)
  (void)hurray_set_diagnostic_hook(&reentrant_hook, nullptr);
  alarm(10);  // a deadlock ends the probe with SIGALRM
  hurray_buffer_release(&a);
  hurray_buffer_release(&c);  // goes to the hook installed from inside the hook
  alarm(0);
  (void)hurray_set_diagnostic_hook(nullptr, nullptr);
  hurray_diagnostics d = diag();
  out("hook_calls=%d swapped_calls=%d failed_releases=%llu\nfirst=%s\n", g_hook_state.calls,
      g_hook_state.swapped_calls, static_cast<unsigned long long>(d.failed_releases),
      g_hook_state.first.c_str());
  inject(free_fn, 0, 0);
  return 0;
}

std::atomic<int> g_in_hook{0};

void slow_hook(int32_t, const char *, void *) {
  g_in_hook.store(1);
  usleep(300 * 1000);  // still inside when the other thread forks
}

// Ends a child forked from a multi-threaded parent with `code`. ThreadSanitizer
// does not support such children (it reports the parent's other threads as
// leaked and their thread-local storage as raced) and would replace the
// status with its own; the raw exit keeps the child's verdict. Reports it
// prints still reach stderr.
[[noreturn]] void exit_forked_child(int code) {
  syscall(SYS_exit_group, code);
  _exit(code);
}

// Status of child `pid` as the scenario tests read it: exit code, or 128 +
// the signal.
int wait_child(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int cmd_fork_in_hook(int type) {
  hurray_buffer a{};
  if (alloc(type, 0, &a) != HURRAY_OK) {
    out("alloc failed: %s\n", hurray_last_error());
    return 1;
  }
  auto inject = reinterpret_cast<void (*)(const char *, int, int)>(control(type, "inject"));
  if (inject == nullptr) return 2;
  inject(is_cuda(type) ? "cuMemFree" : "hipFree", 700, 1);
  (void)hurray_set_diagnostic_hook(&slow_hook, nullptr);
  std::thread releaser([&] { hurray_buffer_release(&a); });
  while (g_in_hook.load() == 0) usleep(1000);
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(5);  // a hang ends the child with SIGALRM
    (void)hurray_set_diagnostic_hook(nullptr, nullptr);
    hurray_diagnostics d = diag();
    exit_forked_child(d.failed_releases == 1 ? 0 : 3);
  }
  releaser.join();
  out("child=%d\n", wait_child(pid));
  return 0;
}

int cmd_fork_in_load(int type) {
  auto init_count = reinterpret_cast<int (*)(void)>(control(type, "init_count"));
  if (init_count == nullptr) return 2;
  std::thread first([&] {
    hurray_buffer h{};
    if (alloc(type, 0, &h) == HURRAY_OK) hurray_buffer_release(&h);
  });
  // Fork once the first request is inside the driver's initialisation: the
  // fake counts cuInit on entry, then sleeps FAKE_CUDA_INIT_DELAY_MS. No
  // fixed sleep: a slow machine (an emulator, a sanitizer) may take longer
  // than any guess to get there. At most 10 s.
  for (int i = 0; i < 10000 && init_count() == 0; ++i) usleep(1000);
  if (init_count() == 0) {
    out("the first request never reached cuInit\n");
    first.join();
    return 1;
  }
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(5);
    hurray_buffer h{};
    const int32_t st = alloc(type, 0, &h);
    out("child status=%s init_count=%d fork_named=%d\n", hurray_status_name(st),
        init_count != nullptr ? init_count() : -1,
        std::strstr(hurray_last_error(), "fork") != nullptr ? 1 : 0);
    exit_forked_child(0);
  }
  first.join();
  out("child=%d\n", wait_child(pid));
  hurray_buffer h{};
  out("parent status=%s\n", hurray_status_name(alloc(type, 0, &h)));
  if (h.release_fn != nullptr) hurray_buffer_release(&h);
  return 0;
}

int cmd_which_hip() {
  hurray_buffer h{};
  const int32_t st = alloc(HURRAY_DEVICE_ROCM, 0, &h);
  out("status=%s\nmessage=%s\n", hurray_status_name(st), hurray_last_error());
  if (st == HURRAY_OK) hurray_buffer_release(&h);
  dl_iterate_phdr(
      [](dl_phdr_info *info, size_t, void *) {
        if (info->dlpi_name != nullptr && std::strstr(info->dlpi_name, "libamdhip64") != nullptr) {
          out("loaded=%s\n", info->dlpi_name);
        }
        return 0;
      },
      nullptr);
  return 0;
}

}  // namespace

int run_ipc_command(const std::string &cmd, int type);  // ipc_probe.cc
int run_deferred_command(const std::string &cmd);       // deferred_probe.cc

int main(int argc, char **argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  const int a = argc > 2 ? std::atoi(argv[2]) : 0;
  const int b = argc > 3 ? std::atoi(argv[3]) : 0;
  if (cmd == "alloc") return cmd_alloc(a, b, argc > 4 ? std::atoll(argv[4]) : 16);
  if (cmd == "exit-teardown") return cmd_exit_teardown(a);
  if (cmd == "teardown-now") return cmd_teardown_now(a);
  if (cmd == "concurrent") return cmd_concurrent(a, b);
  if (cmd == "check-pointers") return cmd_check_pointers();
  if (cmd == "which-hip") return cmd_which_hip();
  if (cmd == "reentrant-hook") return cmd_reentrant_hook(a);
  if (cmd == "fork-in-hook") return cmd_fork_in_hook(a);
  if (cmd == "fork-in-load") return cmd_fork_in_load(a);
  if (cmd.rfind("ipc-", 0) == 0) return run_ipc_command(cmd.substr(4), a);
  if (cmd.rfind("deferred-", 0) == 0) return run_deferred_command(cmd.substr(9));
  std::fprintf(stderr, "unknown command '%s'\n", cmd.c_str());
  return 64;
}
