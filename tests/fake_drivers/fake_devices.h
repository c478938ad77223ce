// SPDX-License-Identifier: Apache-2.0
// Per-process device visibility for both fakes: a fixed set of "physical"
// fake GPUs, each with a fixed 16-byte UUID, of which a process sees the
// ones its CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES names, numbered in
// the order named. Two fake processes can so number the same GPU
// differently, as one-worker-per-GPU deployments do.
//
// Modelled on the CUDA C Programming Guide, "CUDA Environment Variables"
// (CUDA_VISIBLE_DEVICES: a comma-separated sequence of GPU identifiers,
// integer indices or UUID strings "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx",
// a unique prefix of one accepted, enumerated in the order of the sequence;
// only the devices before the first invalid identifier are visible; unset:
// every device in the driver's order) and on the ROCm docs' "GPU isolation
// techniques" (HIP_VISIBLE_DEVICES: the same comma list of indices). The
// UUIDs are what cuDeviceGetUuid / cuDeviceGetUuid_v2 ("Device Management"
// in the CUDA Driver API reference: 16 bytes identifying the device) and
// hipDeviceGetUuid answer for a visible ordinal.
#ifndef HURRAY_TESTS_FAKES_FAKE_DEVICES_H_
#define HURRAY_TESTS_FAKES_FAKE_DEVICES_H_

#include <strings.h>

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fake {

constexpr int kPhysicalGpus = 8;

// The UUID of physical fake GPU `p` (0 <= p < kPhysicalGpus): fixed bytes,
// distinct per GPU and per vendor.
inline void physical_uuid(int p, bool amd, uint8_t out[16]) {
  for (int i = 0; i < 16; ++i) out[i] = static_cast<uint8_t>(0x10 * (i % 16) + i);
  out[0] = amd ? 0xa4 : 0xc7;
  out[15] = static_cast<uint8_t>(0xe0 + p);
}

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (41 bytes with the NUL).
inline void uuid_string(const uint8_t u[16], char out[41]) {
  char *o = out + std::snprintf(out, 41, "GPU-");
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) *o++ = '-';
    o += std::snprintf(o, 3, "%02x", u[i]);
  }
  *o = '\0';
}

// What a process sees: `count` devices, ordinal i being physical GPU
// physical[i].
struct Visibility {
  int count = 0;
  int physical[kPhysicalGpus] = {};
};

// The physical GPU `id` (one identifier of the list, whitespace trimmed)
// names among the first `installed`, or -1 when it is invalid.
inline int parse_identifier(const char *id, size_t n, int installed, bool amd) {
  while (n > 0 && std::isspace(static_cast<unsigned char>(*id))) ++id, --n;
  while (n > 0 && std::isspace(static_cast<unsigned char>(id[n - 1]))) --n;
  if (n == 0) return -1;
  if (std::isdigit(static_cast<unsigned char>(id[0]))) {
    int v = 0;
    for (size_t i = 0; i < n; ++i) {
      if (!std::isdigit(static_cast<unsigned char>(id[i])) || v > 1000) return -1;
      v = v * 10 + (id[i] - '0');
    }
    return v < installed ? v : -1;
  }
  // A UUID string or a unique prefix of one ("GPU-" included).
  int found = -1;
  for (int p = 0; p < installed; ++p) {
    uint8_t u[16];
    char s[41];
    physical_uuid(p, amd, u);
    uuid_string(u, s);
    if (n <= std::strlen(s) && strncasecmp(s, id, n) == 0) {
      if (found >= 0) return -1;  // ambiguous
      found = p;
    }
  }
  return found;
}

// The visibility `env` (CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES) gives
// over `installed` physical GPUs (clamped to kPhysicalGpus). A GPU named
// twice is an invalid identifier, as the drivers treat it.
inline Visibility visible_devices(const char *env, int installed, bool amd) {
  Visibility v;
  if (installed > kPhysicalGpus) installed = kPhysicalGpus;
  if (installed < 0) installed = 0;
  const char *list = std::getenv(env);
  if (list == nullptr) {
    v.count = installed;
    for (int i = 0; i < installed; ++i) v.physical[i] = i;
    return v;
  }
  const char *p = list;
  while (v.count < kPhysicalGpus) {
    const char *comma = std::strchr(p, ',');
    const size_t n = comma != nullptr ? static_cast<size_t>(comma - p) : std::strlen(p);
    const int g = parse_identifier(p, n, installed, amd);
    bool dup = false;
    for (int i = 0; i < v.count; ++i) dup = dup || v.physical[i] == g;
    if (g < 0 || dup) break;
    v.physical[v.count++] = g;
    if (comma == nullptr) break;
    p = comma + 1;
  }
  return v;
}

}  // namespace fake

#endif  // HURRAY_TESTS_FAKES_FAKE_DEVICES_H_
