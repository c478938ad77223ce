// SPDX-License-Identifier: Apache-2.0
// Helpers of support.h, and main(): points libhurray at the fake drivers
// built beside the tests (unless the environment already chose) before any
// test runs, so the first GPU request of this process loads them.
#include "support.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

extern char **environ;

namespace gpu_test {

hurray_buffer alloc_ok(hurray_device d, void *stream, const std::vector<int64_t> &shape) {
  hurray_buffer h{};
  EXPECT_EQ(hurray_alloc_async(d, kFloat32, static_cast<int32_t>(shape.size()), shape.data(), 0,
                               stream, &h),
            HURRAY_OK)
      << hurray_last_error();
  return h;
}

std::vector<fake_call> Fake::log(const char *fn) const {
  std::vector<fake_call> out;
  if (!loaded()) return out;
  const int n = calls(fn, nullptr, 0);
  out.resize(static_cast<size_t>(n));
  if (n > 0) calls(fn, out.data(), n);
  return out;
}

void *Fake::symbol(const char *name) const {
  if (!loaded()) return nullptr;
  return dlsym(lib, (prefix + name).c_str());
}

Fake open_fake(const char *path, const char *prefix) {
  Fake f;
  if (path == nullptr || path[0] == '\0') return f;
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return f;
  auto sym = [&](const char *name) { return dlsym(lib, (std::string(prefix) + name).c_str()); };
#define FAKE_SYM(field) f.field = reinterpret_cast<decltype(f.field)>(sym(#field))
  FAKE_SYM(reset);
  FAKE_SYM(call_count);
  FAKE_SYM(calls);
  FAKE_SYM(inject);
  FAKE_SYM(set_deinitialized);
  FAKE_SYM(live_allocations);
  FAKE_SYM(init_count);
  FAKE_SYM(current_device);
  FAKE_SYM(set_current_device);
  FAKE_SYM(primary_retains);
  FAKE_SYM(max_requested_version);
  FAKE_SYM(too_new_requests);
  FAKE_SYM(used_proc_address_v2);
#undef FAKE_SYM
  if (f.reset == nullptr) return Fake{};  // not a fake
  f.lib = lib;
  f.prefix = prefix;
  return f;
}

Fake &fake_cuda() {
  static Fake f = open_fake(std::getenv("HURRAY_CUDA_DRIVER_PATH"), "fake_cuda_");
  return f;
}

Fake &fake_hip() {
  static Fake f = open_fake(std::getenv("HURRAY_HIP_LIBRARY_PATH"), "fake_hip_");
  return f;
}

Diag diagnostics() {
  hurray_diagnostics d{};
  d.struct_size = sizeof d;
  EXPECT_EQ(hurray_get_diagnostics(&d), HURRAY_OK) << hurray_last_error();
  return Diag{d.failed_releases, d.teardown_leaks, d.fork_skipped_releases, d.context_reset_skips,
              d.stream_fallback_frees};
}

std::string dir_of(const std::string &path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

namespace {

std::string slurp(const std::string &path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

ProbeResult run_probe(const std::vector<std::string> &args,
                      const std::map<std::string, std::string> &env) {
  ProbeResult res;
  char dir_template[] = "/tmp/hurray-probe-XXXXXX";
  const char *dir = mkdtemp(dir_template);
  if (dir == nullptr) return res;
  const std::string out_path = std::string(dir) + "/out";
  const std::string err_path = std::string(dir) + "/err";

  // Environment: ours, with `env` applied.
  std::map<std::string, std::string> vars;
  for (char **e = environ; *e != nullptr; ++e) {
    const char *eq = std::strchr(*e, '=');
    if (eq != nullptr) vars[std::string(*e, static_cast<size_t>(eq - *e))] = eq + 1;
  }
  for (const auto &kv : env) {
    if (kv.second.empty()) {
      vars.erase(kv.first);
    } else {
      vars[kv.first] = kv.second;
    }
  }
  std::vector<std::string> env_strings;
  for (const auto &kv : vars) env_strings.push_back(kv.first + "=" + kv.second);
  std::vector<char *> envp;
  for (std::string &s : env_strings) envp.push_back(&s[0]);
  envp.push_back(nullptr);

  // The emulator first in a cross build (HURRAY_GPU_PROBE_EMULATOR: its
  // words joined by '|'; empty in a native build), then the probe.
  std::vector<std::string> argv_strings;
  for (std::string rest = HURRAY_GPU_PROBE_EMULATOR; !rest.empty();) {
    const size_t bar = rest.find('|');
    argv_strings.push_back(rest.substr(0, bar));
    rest = bar == std::string::npos ? std::string() : rest.substr(bar + 1);
  }
  argv_strings.push_back(HURRAY_GPU_PROBE_PATH);
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char *> argv;
  for (std::string &s : argv_strings) argv.push_back(&s[0]);
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  pid_t pid;
  const int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc == 0) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
    }
    res.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    res.out = slurp(out_path);
    res.err = slurp(err_path);
  }
  unlink(out_path.c_str());
  unlink(err_path.c_str());
  rmdir(dir);
  return res;
}

}  // namespace gpu_test

int main(int argc, char **argv) {
  fake_use_built_fakes();
  // The fakes number their GPUs by these, as the drivers do
  // (tests/fake_drivers/fake_devices.h): a value meant for a real GPU of the
  // machine running the tests is not for them (the probes inherit this).
  unsetenv("CUDA_VISIBLE_DEVICES");
  unsetenv("HIP_VISIBLE_DEVICES");
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
