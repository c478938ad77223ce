// SPDX-License-Identifier: Apache-2.0
// The descriptor of a cross-process message, wire version 2
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
// A set of handles in one message (set_wire.h, docs/impl/ipc.md §10) has
// a magic of its own and the same 16-byte prefix.
constexpr uint32_t kWireSetMagic = 0x53495248u;  // "HRIS" in little-endian byte order

// Kinds of memory (the `kind` field), docs/impl/ipc.md §3.1 and §6.1.
enum WireKind : uint32_t {
  kKindCpuMemfd = 1,       // fds: [memfd, lifetime]
  kKindCudaVmmFd = 2,      // fds: [lifetime, allocation fd]; the GPU part, handle zero
  kKindCudaLegacyIpc = 3,  // fds: [lifetime]; the GPU part with cuIpcGetMemHandle's 64 bytes
  kKindHipIpc = 4,         // fds: [lifetime]; the GPU part with hipIpcGetMemHandle's 64 bytes
  // Stream-ordered pool memory, kDLCUDA or kDLROCM: the GPU part with
  // cuMemPoolExportPointer's / hipMemPoolExportPointer's 64 bytes, then the
  // pool part (the pool's number in the sending process).
  kKindCudaPoolFd = 5,  // fds: [lifetime, the pool's fd]
  kKindCudaPool = 6,    // fds: [lifetime]; the pool went earlier on the same connection
};
constexpr uint32_t kCpuMemfdFds = 2;
constexpr uint32_t kGpuIpcFds = 1;
constexpr uint32_t kCudaVmmFds = 2;
constexpr uint32_t kCudaPoolFdFds = 2;
constexpr uint32_t kCudaPoolFds = 1;
// The pool part of kinds 5 and 6, after the GPU part: the pool's number,
// which the sender gives each pool it sends from (> 0).
constexpr uint32_t kWirePoolPartSize = 8;

// The GPU part of kinds 2, 3 and 4, after the strides (ipc.md §6.1): the
// device's UUID, the sending process, a flags word, the vendor's IPC handle
// and room for an IPC event handle.
constexpr uint32_t kWireGpuUuidSize = 16;    // cuDeviceGetUuid_v2 / hipDeviceGetUuid
constexpr uint32_t kWireSenderSize = 16;     // pid, reserved 0, start time
constexpr uint32_t kWireGpuHandleSize = 64;  // CUipcMemHandle / hipIpcMemHandle_t; kind 2: zero
constexpr uint32_t kWireGpuEventSize = 64;   // CUipcEventHandle; zero unless flagged
enum : uint32_t {
  kGpuOffUuid = 0,
  kGpuOffSender = 16,
  kGpuOffFlags = 32,
  kGpuOffHandle = 40,
  kGpuOffEvent = 104,
  kWireGpuPartSize = 168,
};
static_assert(kGpuOffHandle + kWireGpuHandleSize == kGpuOffEvent &&
                  kGpuOffEvent + kWireGpuEventSize == kWireGpuPartSize,
              "GPU part of wire version 2");
// Bits of the GPU part's flags word.
constexpr uint64_t kGpuFlagEvent = 1;  // the event handle is set (not all zero)

// The GPU kinds: device memory, a lifetime fd first, the GPU part.
constexpr bool is_pool_kind(uint32_t kind) {
  return kind == kKindCudaPoolFd || kind == kKindCudaPool;
}
constexpr bool is_gpu_ipc_kind(uint32_t kind) {
  return kind == kKindCudaVmmFd || kind == kKindCudaLegacyIpc || kind == kKindHipIpc ||
         is_pool_kind(kind);
}
constexpr uint32_t wire_fds(uint32_t kind) {
  return kind == kKindCudaLegacyIpc || kind == kKindHipIpc || kind == kKindCudaPool ? kGpuIpcFds
         : kind == kKindCudaVmmFd                                                   ? kCudaVmmFds
         : kind == kKindCudaPoolFd                                                  ? kCudaPoolFdFds
                                                                                    : kCpuMemfdFds;
}

// The process that made an export (ipc.md §6.1): its pid and its start
// time in clock ticks since boot (field 22 of /proc/PID/stat). A reused pid
// comes with a later start time, a forked child has a pid of its own.
struct WireSender {
  uint32_t pid;         // > 0
  uint64_t start_time;  // 0 where /proc could not be read
};

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
  int64_t strides[HURRAY_MAX_NDIM];  // in elements
  // The GPU part (kinds 2, 3, 4), ipc.md §6.1.
  uint8_t gpu_uuid[kWireGpuUuidSize];      // the device, as every process names it
  WireSender sender;                       // the exporting process
  uint64_t gpu_flags;                      // kGpuFlag*
  uint8_t gpu_handle[kWireGpuHandleSize];  // kinds 3 and 4: the vendor's IPC handle; 2: zero
  uint8_t gpu_event[kWireGpuEventSize];    // zero unless kGpuFlagEvent
  uint64_t pool_id;                        // kinds 5 and 6: the sender's number of the pool (> 0)
};

// Bytes a descriptor of `ndim` dimensions takes (kind 1).
constexpr uint32_t wire_size(int32_t ndim) {
  return kWireHeaderSize + 16u * static_cast<uint32_t>(ndim);
}
// Bytes a descriptor of `kind` with `ndim` dimensions takes.
constexpr uint32_t wire_size(uint32_t kind, int32_t ndim) {
  return wire_size(ndim) + (is_gpu_ipc_kind(kind) ? kWireGpuPartSize : 0u) +
         (is_pool_kind(kind) ? kWirePoolPartSize : 0u);
}
static_assert(wire_size(kKindCudaPoolFd, HURRAY_MAX_NDIM) <= HURRAY_IPC_DESCRIPTOR_MAX,
              "the largest descriptor fits in hurray_ipc_message::bytes");

// Writes `d` (already valid) into out[0..wire_size(d.kind, d.ndim)); returns the size.
uint32_t encode_descriptor(const WireDesc &d, uint8_t *out);

// Reads and checks bytes[0..size) against wire version 2, and that the
// message carries `nfds` fds: every field, the dtype/shape/strides as a
// handle would be checked, and that the elements lie within the region
// (data_offset + lowest >= region_offset, data_offset + highest <=
// region_offset + region_length, without overflow), and the GPU part
// (a UUID not all zero, a sender pid > 0, reserved and unflagged bytes
// zero, an event handle not all zero when flagged, all zero when not). The memfd itself is
// not looked at (import does that). Status and message as
// hurray_ipc_import documents; *out written only on success.
int32_t decode_descriptor(const uint8_t *bytes, size_t size, uint32_t nfds, WireDesc *out);

// The tensor part of a decoded descriptor (kind 1, or a set's entry with
// its region filled in): dtype, shape and strides as a handle would be
// checked (`who` names it in the message), the region non-empty and within
// signed 64-bit file offsets, data_offset inside it and every byte the
// elements touch inside it (ipc.md §3.2, steps 7 and 8). Pure.
int32_t check_tensor_in_region(const WireDesc &d, const char *who);

// The handle a received descriptor describes, for both kinds of import:
// data is where element 0 minus byte_offset lies in this process; `dims`
// (2 * d.ndim entries, owned by the import's block) receives shape then
// strides, which the handle points at.
hurray_buffer received_handle(const WireDesc &d, hurray_release_fn release, void *user_data,
                              void *data, int64_t *dims);

}  // namespace hurray::detail

#endif  // HURRAY_SRC_IPC_WIRE_H_
