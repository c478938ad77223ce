// SPDX-License-Identifier: Apache-2.0
// FUZZ_CHECK: the fuzz target's assertion. A failed check prints what was
// expected and where, then aborts, which libFuzzer records as a crash and
// saves the input (crash-<sha1>) for replay.
#ifndef HURRAY_TESTS_FUZZ_FUZZ_CHECK_H_
#define HURRAY_TESTS_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond, ...)                                                                  \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      std::fprintf(stderr, "\nFUZZ CHECK FAILED at %s:%d: %s\n  ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                                       \
      std::fprintf(stderr, "\n  last libhurray error: %s\n", hurray_last_error());             \
      std::abort();                                                                            \
    }                                                                                          \
  } while (0)

#endif  // HURRAY_TESTS_FUZZ_FUZZ_CHECK_H_
