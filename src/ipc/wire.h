// SPDX-License-Identifier: Apache-2.0
// The descriptor of a cross-process message, wire version 1
// (docs/impl/ipc.md §3): what it holds, how it is written, and the decoder
// that checks every field before anything is used (fuzzed by
// tests/fuzz/ipc_descriptor_fuzz.cc). Pure functions: no fd is touched.
#ifndef HURRAY_SRC_IPC_WIRE_H_
#define HURRAY_SRC_IPC_WIRE_H_

#include <cstddef>
#include <cstdint>

#include "hurray/hurray.h"

namespace hurray::detail {

constexpr uint32_t kWireMagic = 0x50495248u;  // "HRIP" in little-endian byte order
constexpr uint32_t kWireHeaderSize = 80;      // fixed part; shape and strides follow
constexpr uint32_t kWirePrefixSize = 16;      // magic, version, header size, total size

// Kinds of memory (the `kind` field), docs/impl/ipc.md §3.1 and §6.1.
enum WireKind : uint32_t {
  kKindCpuMemfd = 1,       // fds: [memfd, lifetime]
  kKindCudaVmmFd = 2,      // fds: [lifetime, allocation fd]; 64 zero bytes after the strides
  kKindCudaLegacyIpc = 3,  // fds: [lifetime]; cuIpcGetMemHandle's 64 bytes after the strides
  kKindHipIpc = 4,         // fds: [lifetime]; hipIpcGetMemHandle's 64 bytes after the strides
};
constexpr uint32_t kCpuMemfdFds = 2;
constexpr uint32_t kGpuIpcFds = 1;
constexpr uint32_t kCudaVmmFds = 2;
constexpr uint32_t kWireGpuHandleSize = 64;  // kind-specific data of kinds 2, 3 and 4

// The GPU kinds: device memory, a lifetime fd first, 64 kind-specific bytes.
constexpr bool is_gpu_ipc_kind(uint32_t kind) {
  return kind == kKindCudaVmmFd || kind == kKindCudaLegacyIpc || kind == kKindHipIpc;
}
constexpr uint32_t wire_fds(uint32_t kind) {
  return kind == kKindCudaLegacyIpc || kind == kKindHipIpc ? kGpuIpcFds
         : kind == kKindCudaVmmFd                          ? kCudaVmmFds
                                                           : kCpuMemfdFds;
}

// A decoded (or to-be-encoded) descriptor.
struct WireDesc {
  uint32_t kind;
  uint32_t nfds;
  uint64_t flags;
  hurray_device device;
  hurray_dtype dtype;
  int32_t ndim;
  uint64_t byte_offset;    // as in the handle
  uint64_t data_offset;    // offset in the memfd (GPU: the allocation) of the handle's `data`
  uint64_t region_offset;  // byte range of the memfd to map (GPU: 0)
  uint64_t region_length;  // (GPU: the allocation's size)
  int64_t shape[HURRAY_MAX_NDIM];
  int64_t strides[HURRAY_MAX_NDIM];        // in elements
  uint8_t gpu_handle[kWireGpuHandleSize];  // kinds 3 and 4: the vendor's IPC handle; 2: zero
};

// Bytes a descriptor of `ndim` dimensions takes (kind 1).
constexpr uint32_t wire_size(int32_t ndim) {
  return kWireHeaderSize + 16u * static_cast<uint32_t>(ndim);
}
// Bytes a descriptor of `kind` with `ndim` dimensions takes.
constexpr uint32_t wire_size(uint32_t kind, int32_t ndim) {
  return wire_size(ndim) + (is_gpu_ipc_kind(kind) ? kWireGpuHandleSize : 0u);
}
static_assert(wire_size(kKindCudaLegacyIpc, HURRAY_MAX_NDIM) <= HURRAY_IPC_DESCRIPTOR_MAX,
              "the largest descriptor fits in hurray_ipc_message::bytes");

// Writes `d` (already valid) into out[0..wire_size(d.kind, d.ndim)); returns the size.
uint32_t encode_descriptor(const WireDesc &d, uint8_t *out);

// Reads and checks bytes[0..size) against wire version 1, and that the
// message carries `nfds` fds: every field, the dtype/shape/strides as a
// handle would be checked, and that the elements lie within the region
// (data_offset + lowest >= region_offset, data_offset + highest <=
// region_offset + region_length, without overflow). The memfd itself is
// not looked at (import does that). Status and message as
// hurray_ipc_import documents; *out written only on success.
int32_t decode_descriptor(const uint8_t *bytes, size_t size, uint32_t nfds, WireDesc *out);

// The handle a received descriptor describes, for both kinds of import:
// data is where element 0 minus byte_offset lies in this process; `dims`
// (2 * d.ndim entries, owned by the import's block) receives shape then
// strides, which the handle points at.
hurray_buffer received_handle(const WireDesc &d, hurray_release_fn release, void *user_data,
                              void *data, int64_t *dims);

}  // namespace hurray::detail

#endif  // HURRAY_SRC_IPC_WIRE_H_
