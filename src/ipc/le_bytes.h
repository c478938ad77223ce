// SPDX-License-Identifier: Apache-2.0
// Little-endian integers at a byte address, for the wire formats
// (docs/impl/ipc.md §3.1 and §10): byte by byte, so neither the alignment
// of the address nor the host's byte order matters.
#ifndef HURRAY_SRC_IPC_LE_BYTES_H_
#define HURRAY_SRC_IPC_LE_BYTES_H_

#include <cstdint>

namespace hurray::detail {

inline void put_u16(uint8_t *p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
inline void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint16_t get_u16(const uint8_t *p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
inline uint32_t get_u32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
inline uint64_t get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace hurray::detail

#endif  // HURRAY_SRC_IPC_LE_BYTES_H_
