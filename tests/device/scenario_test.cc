// SPDX-License-Identifier: Apache-2.0
// Loading and teardown scenarios, each in a child process (probe.cc) with its
// own environment, since libhurray loads a GPU library once per process.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "support.h"

using namespace gpu_test;

namespace {

std::string str(int v) { return std::to_string(v); }

bool contains(const std::string &s, const std::string &part) {
  return s.find(part) != std::string::npos;
}

#define EXPECT_CONTAINS(s, part) \
  EXPECT_TRUE(contains(s, part)) << "missing \"" << (part) << "\" in:\n" << (s)

const std::string kCudaFake = HURRAY_FAKE_CUDA_PATH_OR_EMPTY;
const std::string kHipFake = HURRAY_FAKE_HIP_PATH_OR_EMPTY;
const std::string kCudaStub = HURRAY_CUDA_STUB_PATH_OR_EMPTY;

}  // namespace

// Skip the test (these must be macros: GTEST_SKIP returns from the caller).
#define SKIP_WITHOUT(path, what) \
  if ((path).empty()) GTEST_SKIP() << (what) << " is not built in this configuration"
#define SKIP_WITHOUT_VENDOR(flag, name) \
  if (!(flag)) GTEST_SKIP() << "this build of libhurray has no " name " support"

#ifdef HURRAY_TEST_WITH_CUDA
constexpr bool kWithCuda = true;
#else
constexpr bool kWithCuda = false;
#endif
#ifdef HURRAY_TEST_WITH_HIP
constexpr bool kWithHip = true;
#else
constexpr bool kWithHip = false;
#endif

// --- CUDA: the library cannot work -----------------------------------------

TEST(CudaLoading, ToolkitStubGivesDeviceUnavailable) {
  SKIP_WITHOUT_VENDOR(kWithCuda, "CUDA");
  if (kCudaStub.empty())
    GTEST_SKIP() << "no CUDA toolkit stub libcuda.so was found at configure time";
  ProbeResult r =
      run_probe({"alloc", str(HURRAY_DEVICE_CUDA), "0"}, {{"HURRAY_CUDA_DRIVER_PATH", kCudaStub}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_CONTAINS(r.out, "status=HURRAY_ERR_UNSUPPORTED_DEVICE");
  EXPECT_CONTAINS(r.out, kCudaStub);                  // what was looked for
  EXPECT_CONTAINS(r.out, "CUDA_ERROR_STUB_LIBRARY");  // what went wrong
  EXPECT_CONTAINS(r.out, "stub");
  EXPECT_CONTAINS(r.out, "cpu=HURRAY_OK");
  EXPECT_EQ(r.err, "");
}

TEST(CudaLoading, MissingLibraryGivesDeviceUnavailable) {
  SKIP_WITHOUT_VENDOR(kWithCuda, "CUDA");
  ProbeResult r = run_probe({"alloc", str(HURRAY_DEVICE_CUDA_HOST), "0"},
                            {{"HURRAY_CUDA_DRIVER_PATH", "/nonexistent/libcuda.so.1"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_CONTAINS(r.out, "status=HURRAY_ERR_UNSUPPORTED_DEVICE");
  EXPECT_CONTAINS(r.out, "looked for /nonexistent/libcuda.so.1");
  EXPECT_CONTAINS(r.out, "dlopen failed");
  EXPECT_CONTAINS(r.out, "cpu=HURRAY_OK");
  EXPECT_EQ(r.err, "");
}

TEST(CudaLoading, LibraryThatIsNoDriverIsCalledSo) {
  SKIP_WITHOUT_VENDOR(kWithCuda, "CUDA");
  // A wrong HURRAY_CUDA_DRIVER_PATH that loads: not an "old driver".
  ProbeResult r = run_probe({"alloc", str(HURRAY_DEVICE_CUDA), "0"},
                            {{"HURRAY_CUDA_DRIVER_PATH", "libm.so.6"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_CONTAINS(r.out, "status=HURRAY_ERR_UNSUPPORTED_DEVICE");
  EXPECT_CONTAINS(r.out, "loaded libm.so.6 (from HURRAY_CUDA_DRIVER_PATH)");
  EXPECT_CONTAINS(r.out, "not a CUDA driver library");
  EXPECT_EQ(r.out.find("older than CUDA"), std::string::npos) << r.out;
  EXPECT_CONTAINS(r.out, "cpu=HURRAY_OK");
}

TEST(CudaLoading, DefaultNameIsLibcudaSo1OnTheSearchPath) {
  SKIP_WITHOUT(kCudaFake, "the fake CUDA driver");
  // No override: dlopen("libcuda.so.1") must find the fake by its soname.
  ProbeResult r =
      run_probe({"alloc", str(HURRAY_DEVICE_CUDA), "1"},
                {{"HURRAY_CUDA_DRIVER_PATH", ""}, {"LD_LIBRARY_PATH", dir_of(kCudaFake)}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_CONTAINS(r.out, "status=HURRAY_OK");
}

TEST(CudaLoading, NoDeviceGivesDeviceUnavailable) {
  SKIP_WITHOUT(kCudaFake, "the fake CUDA driver");
  ProbeResult r =
      run_probe({"alloc", str(HURRAY_DEVICE_CUDA), "0"},
                {{"HURRAY_CUDA_DRIVER_PATH", kCudaFake}, {"FAKE_CUDA_DEVICE_COUNT", "0"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_CONTAINS(r.out, "status=HURRAY_ERR_UNSUPPORTED_DEVICE");
  EXPECT_CONTAINS(r.out, "cuInit(0) failed with CUDA_ERROR_NO_DEVICE");
  EXPECT_CONTAINS(r.out, kCudaFake);
  EXPECT_CONTAINS(r.out, "cpu=HURRAY_OK");
}

TEST(CudaLoading, TooOldDriverGivesDeviceUnavailable) {
  SKIP_WITHOUT(kCudaFake, "the fake CUDA driver");
  ProbeResult r =
      run_probe({"alloc", str(HURRAY_DEVICE_CUDA), "0"},
                {{"HURRAY_CUDA_DRIVER_PATH", kCudaFake}, {"FAKE_CUDA_DRIVER_VERSION", "11020"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_CONTAINS(r.out, "status=HURRAY_ERR_UNSUPPORTED_DEVICE");
  EXPECT_CONTAINS(r.out, "driver version 11.2");
  EXPECT_CONTAINS(r.out, "11.3 or newer");
}

TEST(CudaLoading, ConcurrentFirstUseLoadsOnce) {
  SKIP_WITHOUT(kCudaFake, "the fake CUDA driver");
  ProbeResult r = run_probe({"concurrent", str(HURRAY_DEVICE_CUDA), "8"},
                            {{"HURRAY_CUDA_DRIVER_PATH", kCudaFake}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_CONTAINS(r.out, "ok=8 init_count=1");
}

TEST(CudaLoading, ZeroElementAllocationNeedsAWorkingDriverToo) {
  SKIP_WITHOUT_VENDOR(kWithCuda, "CUDA");
  // No memory is needed, but the answer must match a one-element request's.
  for (const char *count : {"0", "1"}) {
    SCOPED_TRACE(count);
    ProbeResult r = run_probe({"alloc", str(HURRAY_DEVICE_CUDA), "0", count},
                              {{"HURRAY_CUDA_DRIVER_PATH", "/nonexistent/libcuda.so.1"}});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_CONTAINS(r.out, "status=HURRAY_ERR_UNSUPPORTED_DEVICE");
    EXPECT_CONTAINS(r.out, "looked for /nonexistent/libcuda.so.1");
    EXPECT_CONTAINS(r.out, "cpu=HURRAY_OK");
  }
}

// --- Diagnostic hook ---------------------------------------------------------

// A hook that releases another GPU handle whose free fails too (say a Python
// hook whose allocation runs the garbage collector), and that installs a
// new hook, must not deadlock: the nested failure is counted, not sent.
TEST(DiagnosticHook, HookMayReleaseGpuMemoryAndReplaceItself) {
  struct Case {
    const std::string &fake;
    const char *env;
    int type;
  } cases[] = {{kCudaFake, "HURRAY_CUDA_DRIVER_PATH", HURRAY_DEVICE_CUDA},
               {kHipFake, "HURRAY_HIP_LIBRARY_PATH", HURRAY_DEVICE_ROCM}};
  int ran = 0;
  for (const Case &c : cases) {
    if (c.fake.empty()) continue;
    ++ran;
    SCOPED_TRACE(c.env);
    ProbeResult r = run_probe({"reentrant-hook", str(c.type)}, {{c.env, c.fake}});
    ASSERT_EQ(r.exit_code, 0) << "128 + 14 (SIGALRM) is a deadlock\n" << r.out << r.err;
    EXPECT_CONTAINS(r.out, "hook_calls=1 swapped_calls=1 failed_releases=3");
    EXPECT_CONTAINS(r.out,
                    "first=" + std::string(c.type == HURRAY_DEVICE_CUDA ? "cuMemFree" : "hipFree"));
    EXPECT_EQ(r.err, "");
  }
  if (ran == 0) GTEST_SKIP() << "no fake GPU library is built in this configuration";
}

// --- CUDA: teardown ----------------------------------------------------------

TEST(CudaTeardown, ReleaseAfterDriverTeardownAtExitLeaksQuietly) {
  SKIP_WITHOUT(kCudaFake, "the fake CUDA driver");
  for (int type : {HURRAY_DEVICE_CUDA, HURRAY_DEVICE_CUDA_HOST, HURRAY_DEVICE_CUDA_MANAGED}) {
    ProbeResult r =
        run_probe({"exit-teardown", str(type)}, {{"HURRAY_CUDA_DRIVER_PATH", kCudaFake}});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_CONTAINS(r.out, "after-exit teardown_leaks=1 failed_releases=0");
    EXPECT_EQ(r.err, "") << "nothing printed";
  }
}

TEST(CudaTeardown, AfterTheFirstDeinitializedNoDriverCallIsMade) {
  SKIP_WITHOUT(kCudaFake, "the fake CUDA driver");
  ProbeResult r = run_probe({"teardown-now", str(HURRAY_DEVICE_CUDA)},
                            {{"HURRAY_CUDA_DRIVER_PATH", kCudaFake}});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_CONTAINS(r.out, "teardown_leaks=2 failed_releases=0 calls_for_second=0");
  EXPECT_EQ(r.err, "");
}

// --- HIP ---------------------------------------------------------------------

TEST(HipLoading, MissingLibraryGivesDeviceUnavailable) {
  SKIP_WITHOUT_VENDOR(kWithHip, "HIP");
  ProbeResult r = run_probe({"alloc", str(HURRAY_DEVICE_ROCM), "0"},
                            {{"HURRAY_HIP_LIBRARY_PATH", "/nonexistent/libamdhip64.so"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_CONTAINS(r.out, "status=HURRAY_ERR_UNSUPPORTED_DEVICE");
  EXPECT_CONTAINS(r.out, "/nonexistent/libamdhip64.so");
  EXPECT_CONTAINS(r.out, "cpu=HURRAY_OK");
  EXPECT_EQ(r.err, "");
}

TEST(HipLoading, ZeroElementAllocationNeedsAWorkingRuntimeToo) {
  SKIP_WITHOUT_VENDOR(kWithHip, "HIP");
  for (const char *count : {"0", "1"}) {
    SCOPED_TRACE(count);
    ProbeResult r = run_probe({"alloc", str(HURRAY_DEVICE_ROCM_HOST), "0", count},
                              {{"HURRAY_HIP_LIBRARY_PATH", "/nonexistent/libamdhip64.so"}});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_CONTAINS(r.out, "status=HURRAY_ERR_UNSUPPORTED_DEVICE");
    EXPECT_CONTAINS(r.out, "/nonexistent/libamdhip64.so");
  }
}

TEST(HipLoading, NoDeviceGivesDeviceUnavailable) {
  SKIP_WITHOUT(kHipFake, "the fake HIP runtime");
  ProbeResult r =
      run_probe({"alloc", str(HURRAY_DEVICE_ROCM_HOST), "0"},
                {{"HURRAY_HIP_LIBRARY_PATH", kHipFake}, {"FAKE_HIP_DEVICE_COUNT", "0"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_CONTAINS(r.out, "status=HURRAY_ERR_UNSUPPORTED_DEVICE");
  EXPECT_CONTAINS(r.out, "hipErrorNoDevice");
}

TEST(HipLoading, SearchesRocm7Then6Then5ThenThePlainName) {
  SKIP_WITHOUT(kHipFake, "the fake HIP runtime");
  char tmpl[] = "/tmp/hurray-hipdir-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string six = dir + "/libamdhip64.so.6", seven = dir + "/libamdhip64.so.7";
  ASSERT_EQ(symlink(kHipFake.c_str(), six.c_str()), 0);
  ProbeResult r =
      run_probe({"which-hip"}, {{"HURRAY_HIP_LIBRARY_PATH", ""}, {"LD_LIBRARY_PATH", dir}});
  EXPECT_CONTAINS(r.out, "status=HURRAY_OK");
  EXPECT_CONTAINS(r.out, "loaded=" + six);
  ASSERT_EQ(symlink(kHipFake.c_str(), seven.c_str()), 0);
  r = run_probe({"which-hip"}, {{"HURRAY_HIP_LIBRARY_PATH", ""}, {"LD_LIBRARY_PATH", dir}});
  EXPECT_CONTAINS(r.out, "loaded=" + seven);
  unlink(six.c_str());
  unlink(seven.c_str());
  rmdir(dir.c_str());
}

TEST(HipLoading, RealRocmRuntimeWithoutAGpuGivesDeviceUnavailable) {
  SKIP_WITHOUT_VENDOR(kWithHip, "HIP");
  // Debian's libamdhip64-5 (ROCm 5.2), installed with libamdhip64-dev: in
  // the target's library directory, found by tests/device/CMakeLists.txt.
  const char *real = HURRAY_REAL_HIP_RUNTIME_OR_EMPTY;
  struct stat st;
  if (real[0] == '\0')
    GTEST_SKIP() << "no libamdhip64.so.5 was found for this target at configure time";
  if (stat(real, &st) != 0) GTEST_SKIP() << real << " is not installed";
  if (stat("/dev/kfd", &st) == 0) GTEST_SKIP() << "this machine may have an AMD GPU";
  ProbeResult r =
      run_probe({"alloc", str(HURRAY_DEVICE_ROCM), "0"}, {{"HURRAY_HIP_LIBRARY_PATH", real}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_CONTAINS(r.out, "status=HURRAY_ERR_UNSUPPORTED_DEVICE");
  EXPECT_CONTAINS(r.out, real);
  EXPECT_CONTAINS(r.out, "cpu=HURRAY_OK");
}

TEST(HipPointerCheck, Rocm5EncodingIsDecoded) {
  SKIP_WITHOUT(kHipFake, "the fake HIP runtime");
  ProbeResult r = run_probe({"check-pointers"}, {{"HURRAY_HIP_LIBRARY_PATH", kHipFake},
                                                 {"FAKE_HIP_RUNTIME_VERSION", "50221153"}});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_CONTAINS(r.out, "device-as-own=HURRAY_OK");
  EXPECT_CONTAINS(r.out, "device-as-other=HURRAY_ERR_INVALID_ARGUMENT");
  EXPECT_CONTAINS(r.out, "pinned-as-host=HURRAY_OK");
  EXPECT_CONTAINS(r.out, "pinned-as-device=HURRAY_ERR_INVALID_ARGUMENT");
  EXPECT_CONTAINS(r.out, "malloc-as-device=HURRAY_ERR_INVALID_ARGUMENT");
}

TEST(HipPointerCheck, Rocm6EncodingIsDecoded) {
  SKIP_WITHOUT(kHipFake, "the fake HIP runtime");
  ProbeResult r = run_probe({"check-pointers"}, {{"HURRAY_HIP_LIBRARY_PATH", kHipFake},
                                                 {"FAKE_HIP_RUNTIME_VERSION", "70000000"}});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_CONTAINS(r.out, "device-as-own=HURRAY_OK");
  EXPECT_CONTAINS(r.out, "device-as-other=HURRAY_ERR_INVALID_ARGUMENT");
  EXPECT_CONTAINS(r.out, "pinned-as-host=HURRAY_OK");
  EXPECT_CONTAINS(r.out, "pinned-as-device=HURRAY_ERR_INVALID_ARGUMENT");
  EXPECT_CONTAINS(r.out, "malloc-as-device=HURRAY_ERR_INVALID_ARGUMENT");
}

TEST(HipTeardown, ReleaseAfterRuntimeTeardownAtExitLeaksQuietly) {
  SKIP_WITHOUT(kHipFake, "the fake HIP runtime");
  for (int type : {HURRAY_DEVICE_ROCM, HURRAY_DEVICE_ROCM_HOST}) {
    ProbeResult r =
        run_probe({"exit-teardown", str(type)}, {{"HURRAY_HIP_LIBRARY_PATH", kHipFake}});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_CONTAINS(r.out, "after-exit teardown_leaks=1 failed_releases=0");
    EXPECT_EQ(r.err, "");
  }
  ProbeResult r =
      run_probe({"teardown-now", str(HURRAY_DEVICE_ROCM)}, {{"HURRAY_HIP_LIBRARY_PATH", kHipFake}});
  EXPECT_CONTAINS(r.out, "teardown_leaks=2 failed_releases=0 calls_for_second=0");
}

TEST(HipLoading, ConcurrentFirstUseLoadsOnce) {
  SKIP_WITHOUT(kHipFake, "the fake HIP runtime");
  ProbeResult r = run_probe({"concurrent", str(HURRAY_DEVICE_ROCM), "8"},
                            {{"HURRAY_HIP_LIBRARY_PATH", kHipFake}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_CONTAINS(r.out, "ok=8 init_count=1");
}

// --- Lifetime events: ROCm's static teardown, fork ---------------------------

// Defect 2: ROCm destroys its runtime in a static destructor; a release
// after that (a static object of the application, destroyed later) must not
// call into it.
TEST(HipTeardown, ReleasesAfterTheRuntimesStaticDestructionDoNotCallIt) {
  SKIP_WITHOUT(kHipFake, "the fake HIP runtime");
  for (int type : {HURRAY_DEVICE_ROCM, HURRAY_DEVICE_ROCM_HOST}) {
    SCOPED_TRACE(type);
    ProbeResult r = run_probe({"exit-teardown", str(type)}, {{"HURRAY_HIP_LIBRARY_PATH", kHipFake},
                                                             {"FAKE_HIP_STATIC_TEARDOWN", "1"}});
    EXPECT_EQ(r.exit_code, 0) << "86: a HIP call after the runtime was destroyed\n"
                              << r.out << r.err;
    EXPECT_CONTAINS(r.out, "after-exit teardown_leaks=1 failed_releases=0");
    EXPECT_EQ(r.err, "");
  }
}

// Defect 9: a fork while another thread runs the diagnostic hook; the
// child must be able to set a hook (it hung on the inherited locked mutex).
// The fork probes fork a multi-threaded process, which ThreadSanitizer does
// not support: it may report false races in the child, and the tsan preset's
// halt_on_error=1 would then kill the child with TSan's exit code 66. Without
// halting, a report in the parent still fails the probe (TSan's exit code at
// the parent's normal exit), while the child leaves through a raw exit that
// skips TSan's exit hook. No effect on other builds.
const std::pair<const std::string, std::string> kForkTsanOptions{
    "TSAN_OPTIONS", "halt_on_error=0:second_deadlock_stack=1"};

TEST(DiagnosticHook, ChildForkedWhileAnotherThreadRunsTheHookCanSetAHook) {
  struct Case {
    const std::string &fake;
    const char *env;
    int type;
  } cases[] = {{kCudaFake, "HURRAY_CUDA_DRIVER_PATH", HURRAY_DEVICE_CUDA},
               {kHipFake, "HURRAY_HIP_LIBRARY_PATH", HURRAY_DEVICE_ROCM}};
  int ran = 0;
  for (const Case &c : cases) {
    if (c.fake.empty()) continue;
    ++ran;
    SCOPED_TRACE(c.env);
    ProbeResult r = run_probe({"fork-in-hook", str(c.type)}, {{c.env, c.fake}, kForkTsanOptions});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_CONTAINS(r.out, "child=0");  // 142 = 128 + SIGALRM: the child hung
  }
  if (ran == 0) GTEST_SKIP() << "no fake GPU library is built in this configuration";
}

// Defect 9: a fork while another thread is in the middle of the very first
// GPU load: the child must be refused like any child of a GPU parent, not
// load (initialise) the driver again.
TEST(CudaLoading, ChildForkedDuringTheFirstLoadIsRefusedTheDriver) {
  SKIP_WITHOUT(kCudaFake, "the fake CUDA driver");
  ProbeResult r =
      run_probe({"fork-in-load", str(HURRAY_DEVICE_CUDA)}, {kForkTsanOptions,
                                                            {"HURRAY_CUDA_DRIVER_PATH", kCudaFake},
                                                            {"FAKE_CUDA_INIT_DELAY_MS", "600"}});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_CONTAINS(r.out, "child status=HURRAY_ERR_UNSUPPORTED_DEVICE init_count=1 fork_named=1");
  EXPECT_CONTAINS(r.out, "child=0");
  EXPECT_CONTAINS(r.out, "parent status=HURRAY_OK");
}
