// SPDX-License-Identifier: Apache-2.0
// Helpers of the set-message tests (tests/ipc/ipc_set_*_test.cc,
// docs/impl/ipc.md §10): shareable groups, and a set exported and imported
// in one process.
#ifndef HURRAY_TESTS_SUPPORT_IPC_SET_SUPPORT_H_
#define HURRAY_TESTS_SUPPORT_IPC_SET_SUPPORT_H_

#include <fcntl.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "hurray/hurray.h"
#include "ipc_test_support.h"

namespace hurray_ipc_test {

// n float32 tensors of shape {i % 7 + 1} in one shareable group; element 0
// of member i is i.
inline std::vector<hurray_buffer> shareable_group(size_t n) {
  std::vector<int64_t> shapes(n);
  std::vector<hurray_tensor_desc> descs(n);
  for (size_t i = 0; i < n; ++i) {
    shapes[i] = static_cast<int64_t>(i % 7 + 1);
    descs[i] = hurray_tensor_desc{hurray_dtype{kDLFloat, 32, 1}, 1, &shapes[i], 0};
  }
  std::vector<hurray_buffer> hs(n);
  if (hurray_alloc_group(hurray_device{HURRAY_DEVICE_CPU, 0}, n, descs.data(),
                         HURRAY_ALLOC_SHAREABLE, nullptr, hs.data(), nullptr) != HURRAY_OK) {
    std::fprintf(stderr, "group alloc failed: %s\n", hurray_last_error());
    std::abort();
  }
  for (size_t i = 0; i < n; ++i) {
    static_cast<float *>(hs[i].data)[hs[i].byte_offset / 4] = static_cast<float>(i);
  }
  return hs;
}

// The first element of a float32 handle.
inline float first(const hurray_buffer &h) {
  return *reinterpret_cast<const float *>(static_cast<const char *>(h.data) + h.byte_offset);
}

// Exports hs as one set, then imports it here: the handles, and the
// message's fd count in *nfds.
inline std::vector<hurray_buffer> round_trip(std::vector<hurray_buffer> &hs, size_t *nfds,
                                             uint32_t options = 0) {
  hurray_ipc_set_message *m = nullptr;
  if (hurray_ipc_export_set(hs.data(), hs.size(), options, &m, nullptr) != HURRAY_OK) {
    std::fprintf(stderr, "export_set failed: %s\n", hurray_last_error());
    std::abort();
  }
  const uint8_t *bytes;
  size_t size;
  const int32_t *fds;
  if (hurray_ipc_set_message_parts(m, &bytes, &size, &fds, nfds) != HURRAY_OK) std::abort();
  // The import consumes its own copies of the fds; the message keeps its.
  std::vector<int32_t> mine(*nfds);
  for (size_t i = 0; i < *nfds; ++i) mine[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 0);
  std::vector<hurray_buffer> out(hs.size());
  size_t count = 0;
  if (hurray_ipc_import_set(bytes, size, mine.data(), mine.size(), out.data(), out.size(),
                            &count) != HURRAY_OK ||
      count != hs.size()) {
    std::fprintf(stderr, "import_set failed: %s\n", hurray_last_error());
    std::abort();
  }
  if (hurray_ipc_set_message_discard(m) != HURRAY_OK) std::abort();
  return out;
}

}  // namespace hurray_ipc_test

#endif  // HURRAY_TESTS_SUPPORT_IPC_SET_SUPPORT_H_
