// SPDX-License-Identifier: Apache-2.0
// Probe commands for releases deferred during a graph capture
// (docs/impl/gpu.md §2), each in a process of its own because they fork or
// exit with libhurray's retirer thread running (deferred_free_test.cc
// runs them). CUDA only: HIP deferrals start no retirer.
//
//   probe deferred-fork    a blocking-class deferral is pending (retirer
//                          running) when the process forks: the child's
//                          GPU calls are refused, it frees nothing and
//                          makes no driver call (fork() waited for the
//                          retirer's pass, so no lock of the fake is held
//                          by a thread the child lacks); the
//                          parent's deferral is retired when its capture
//                          ends, with no further libhurray call
//   probe deferred-exit    one deferral retired by the retirer, then the
//                          process exits while another is pending (its
//                          capture never ends): no crash, nothing printed,
//                          and no driver call after the driver's teardown
//   probe deferred-hook    hurray_retire_deferred_frees called inside the
//                          diagnostic hook while the retirer waits to call
//                          the hook: returns instead of deadlocking
//
// Each check prints "check NAME ok|FAILED detail"; the exit status is the
// number of failed checks.
#include <dlfcn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "fake_control.h"
#include "hurray/hurray.h"

int run_deferred_command(const std::string &cmd);

namespace {

constexpr hurray_dtype kF32{2, 32, 1};
constexpr int kWaitMs = 20000;
int g_failures = 0;

void check(bool ok, const char *name, const char *fmt = "", ...)
    __attribute__((format(printf, 3, 4)));
void check(bool ok, const char *name, const char *fmt, ...) {
  char detail[256];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(detail, sizeof detail, fmt, args);
  va_end(args);
  char line[512];
  const int n =
      std::snprintf(line, sizeof line, "check %s %s %s\n", name, ok ? "ok" : "FAILED", detail);
  if (n > 0) (void)!write(1, line, static_cast<size_t>(n < 512 ? n : 511));
  if (!ok) ++g_failures;
}

void *control(const char *name) {
  const char *path = std::getenv("HURRAY_CUDA_DRIVER_PATH");
  if (path == nullptr) return nullptr;
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return nullptr;
  return dlsym(lib, (std::string("fake_cuda_") + name).c_str());
}
template <typename Fn>
Fn fn(const char *name) {
  return reinterpret_cast<Fn>(control(name));
}
int frees() { return fn<int (*)(void)>("frees")(); }
int wait_for_frees(int n) { return fn<int (*)(int, int)>("wait_for_frees")(n, kWaitMs); }
int logged_calls() {
  return fn<int (*)(const char *, fake_call *, int)>("calls")(nullptr, nullptr, 0);
}
void *blocking_stream(int d) { return fn<void *(*)(int, unsigned)>("stream_create_flags")(d, 0); }
void begin_capture(void *s) { fn<void (*)(void *)>("stream_begin_capture")(s); }
int end_capture(void *s) { return fn<int (*)(void *)>("stream_end_capture")(s); }

hurray_device cuda(int id) { return hurray_device{HURRAY_DEVICE_CUDA, id}; }

int32_t alloc(hurray_buffer *h, void *stream) {
  const int64_t shape[1] = {16};
  return hurray_alloc_async(cuda(1), kF32, 1, shape, 0, stream, h);
}

// Released on a thread of its own, as a consumer would.
void release_elsewhere(hurray_buffer *h) {
  std::thread([h] { (void)hurray_buffer_release(h); }).join();
}

uint64_t fork_skips() {
  hurray_diagnostics d{};
  d.struct_size = sizeof d;
  return hurray_get_diagnostics(&d) == HURRAY_OK ? d.fork_skipped_releases : 0;
}

int cmd_fork() {
  void *const s = blocking_stream(1);
  hurray_buffer a{}, plain{};
  if (alloc(&a, s) != HURRAY_OK || alloc(&plain, nullptr) != HURRAY_OK) {
    check(false, "alloc", "%s", hurray_last_error());
    return g_failures;
  }
  begin_capture(s);
  release_elsewhere(&a);  // deferred: the retirer runs from now on
  const int before = frees();
  check(before == frees(), "deferred");
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(3);  // the child must not wait for a retirer it does not have
    const int calls = logged_calls();
    size_t remaining = 77;
    const int32_t st = hurray_retire_deferred_frees(cuda(1), &remaining);
    const int32_t alloc_st = alloc(&a, nullptr);
    end_capture(s);  // the child's copy of the fake: the capture has ended there
    const uint64_t skips = fork_skips();
    (void)hurray_buffer_release(&plain);  // the parent's memory: never freed here
    int bad = 0;
    bad += st != HURRAY_ERR_UNSUPPORTED_DEVICE || remaining != 77;
    bad += alloc_st != HURRAY_ERR_UNSUPPORTED_DEVICE;
    bad += fork_skips() != skips + 1;
    bad += logged_calls() != calls;  // no driver call at all in the child
    bad += frees() != before;
    // The raw exit, as probe.cc's exit_forked_child: the sanitizers do not
    // support children of multi-threaded parents and would replace the
    // verdict with their own reports about the parent's threads.
    syscall(SYS_exit_group, bad);
    _exit(bad);
  }
  int status = 0;
  (void)waitpid(pid, &status, 0);
  check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child",
        "the child's GPU calls are refused and it frees nothing (status %d)", status);
  check(end_capture(s) == 1, "capture_valid");
  check(wait_for_frees(before + 1) == before + 1, "retired_in_parent",
        "the parent's deferral is retired once its capture ended");
  check(hurray_buffer_release(&plain) == HURRAY_OK, "release_plain");
  return g_failures;
}

// Counts, at the very end of the process (registered first, so run last),
// the driver calls made after the driver's own teardown.
void after_everything() {
  fake_call calls[256];
  auto get = fn<int (*)(const char *, fake_call *, int)>("calls");
  const int n = get(nullptr, calls, 256);
  int after_teardown = 0;
  for (int i = 0; i < n && i < 256; ++i) after_teardown += calls[i].result == 4;  // DEINITIALIZED
  check(after_teardown == 0, "no_call_after_teardown", "%d calls", after_teardown);
  if (g_failures != 0) _exit(1);
}

int cmd_exit() {
  std::atexit(&after_everything);
  void *const s1 = blocking_stream(1);
  void *const s2 = blocking_stream(1);
  hurray_buffer a{}, b{};
  if (alloc(&a, s1) != HURRAY_OK || alloc(&b, s2) != HURRAY_OK) {
    check(false, "alloc", "%s", hurray_last_error());
    return g_failures;
  }
  fn<void (*)(void)>("reset")();  // the log from here on
  begin_capture(s1);
  const int before = frees();
  release_elsewhere(&a);
  check(end_capture(s1) == 1, "capture_valid");
  check(wait_for_frees(before + 1) == before + 1, "retired", "without any further call");
  begin_capture(s2);
  release_elsewhere(&b);  // deferred; its capture never ends
  check(frees() == before + 1, "pending_at_exit");
  return g_failures;  // exit() with the retirer polling
}

// deferred-hook: the retirer's free fails while the main thread runs the
// diagnostic hook (its own free failed too); inside the hook the main thread
// calls hurray_retire_deferred_frees while the retirer waits to call the
// hook. The call must not wait for the retirer (SIGALRM: a deadlock).
struct HookState {
  std::atomic<int> calls{0};  // the retirer's call comes on its own thread
  int32_t retire_status = -1;
  bool retirer_failed_first = false;
  void *stream = nullptr;
};
HookState g_hook;

void hook_that_retires(int32_t, const char *, void *) {
  if (++g_hook.calls != 1) return;  // the retirer's failure, after this one
  end_capture(g_hook.stream);       // the retirer's next pass frees, and fails
  auto count = fn<int (*)(const char *)>("call_count");
  for (int i = 0; i < kWaitMs && count("cuMemFreeAsync") == 0; ++i) usleep(1000);
  g_hook.retirer_failed_first = count("cuMemFreeAsync") == 1;
  size_t remaining = 0;
  g_hook.retire_status = hurray_retire_deferred_frees(cuda(1), &remaining);
}

int cmd_hook() {
  alarm(20);
  void *const s = blocking_stream(1);
  hurray_buffer a{}, plain{};
  if (alloc(&a, s) != HURRAY_OK || alloc(&plain, nullptr) != HURRAY_OK) {
    check(false, "alloc", "%s", hurray_last_error());
    return g_failures;
  }
  g_hook.stream = s;
  begin_capture(s);
  release_elsewhere(&a);  // deferred; the retirer polls
  fn<void (*)(void)>("reset")();
  auto inject = fn<void (*)(const char *, int, int)>("inject");
  inject("cuMemFreeAsync", 1, 1);  // the retirer's free: CUDA_ERROR_INVALID_VALUE, once
  inject("cuMemFree", 1, 1);       // this thread's free, once
  if (hurray_set_diagnostic_hook(&hook_that_retires, nullptr) != HURRAY_OK) return 1;
  (void)hurray_buffer_release(&plain);  // fails: the hook runs on this thread
  // The retirer's failure reaches the hook once this thread's call returned.
  for (int i = 0; i < kWaitMs && g_hook.calls < 2; ++i) usleep(1000);
  (void)hurray_set_diagnostic_hook(nullptr, nullptr);
  check(g_hook.retirer_failed_first, "retirer_in_hook_wait",
        "the retirer's free failed while this thread ran the hook");
  check(g_hook.retire_status == HURRAY_OK, "retire_in_hook", "status %d",
        static_cast<int>(g_hook.retire_status));
  check(g_hook.calls.load() == 2, "hook_calls", "%d", g_hook.calls.load());
  return g_failures;
}

}  // namespace

int run_deferred_command(const std::string &cmd) {
  if (cmd == "fork") return cmd_fork();
  if (cmd == "exit") return cmd_exit();
  if (cmd == "hook") return cmd_hook();
  std::fprintf(stderr, "unknown deferred command '%s'\n", cmd.c_str());
  return 64;
}
