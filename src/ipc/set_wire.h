// SPDX-License-Identifier: Apache-2.0
// The descriptor of a set of handles in one message (docs/impl/ipc.md §10):
// a header, one record per region (a distinct allocation: one memfd and one
// lifetime fd), one entry per handle. Set wire version 1, magic "HRIS"; the
// single message (wire.h, version 2) is unchanged. Encoder and decoder are
// pure functions (no fd is touched); the decoder checks every count, size,
// offset and overflow before anything is used, and is fuzzed by
// tests/fuzz/ipc_descriptor_fuzz.cc.
#ifndef HURRAY_SRC_IPC_SET_WIRE_H_
#define HURRAY_SRC_IPC_SET_WIRE_H_

#include <cstddef>
#include <cstdint>

#include "hurray/hurray.h"
#include "ipc/wire.h"

namespace hurray::detail {

constexpr uint32_t kSetHeaderSize = 48;     // fixed part of the set descriptor
constexpr uint32_t kSetRegionSize = 32;     // bytes of one region record
constexpr uint32_t kSetEntryFixed = 48;     // bytes of an entry before its shape and strides
constexpr uint32_t kSetFdsPerRegion = 2;    // memfd, lifetime
constexpr uint32_t kSetRegionReadOnly = 1;  // region flag: a read-only open, mapped PROT_READ

// The counts of a set descriptor's header.
struct SetHeader {
  uint32_t total_size;
  uint32_t n_entries;  // 1..HURRAY_IPC_SET_MAX_HANDLES
  uint32_t n_regions;  // 1..n_entries
  uint32_t nfds;       // 2 * n_regions
};

// The largest GPU region descriptor: a single message (wire.h) of kind 5
// describing the allocation as a one-dimensional byte tensor.
constexpr uint32_t kSetGpuDescMax = wire_size(kKindCudaPoolFd, 1);

// One region record. Kind 1: a memfd range; kinds 2 to 6 (a GPU
// allocation): on the wire, offset and length name the region's single
// descriptor in the set's bytes (after the entries); decode_set sets them
// to the allocation's range (0, its bytes) and fills the fields below.
struct SetRegion {
  uint32_t kind;     // kKindCpuMemfd, or a GPU kind (is_gpu_ipc_kind)
  uint32_t flags;    // kSetRegionReadOnly or 0 (GPU: 0)
  uint64_t offset;   // first byte of the memfd the receiver maps
  uint64_t length;   // bytes it maps (> 0)
  uint32_t entries;  // handles into this region (>= 1)
  uint32_t seen;     // decode_set: entries found so far (not on the wire)
  // decode_set (not on the wire): its first fd in the message, its first
  // entry; GPU kinds: where its descriptor lies and the device it names.
  uint32_t fd_at;
  uint32_t first;
  uint64_t desc_at;
  uint32_t desc_size;
  hurray_device device;
};

// What the encoder writes of one handle.
struct SetEntry {
  uint32_t region;
  uint64_t flags;
  hurray_dtype dtype;
  int32_t ndim;
  uint64_t byte_offset;
  uint64_t data_offset;  // offset in the region's memfd (GPU: allocation) of the handle's data
  hurray_device device;  // kDLCPU 0, or the GPU handle's (the sender's ordinal)
  const int64_t *shape;
  const int64_t *strides;  // in elements, never NULL when ndim > 0
};

// Bytes of one entry of `ndim` dimensions.
constexpr uint32_t set_entry_size(int32_t ndim) {
  return kSetEntryFixed + 16u * static_cast<uint32_t>(ndim);
}

// The header of out[0..kSetHeaderSize) and the region records after it;
// the entries are written one by one with encode_set_entry.
void encode_set_header(const SetHeader &h, uint8_t *out);
void encode_set_region(const SetRegion &r, uint32_t index, uint8_t *out);
// Writes `e` at out (set_entry_size(e.ndim) bytes).
void encode_set_entry(const SetEntry &e, uint8_t *out);

// The header of bytes[0..size): at least kSetHeaderSize bytes (more may
// follow: total_size is checked against size only when `whole`), magic,
// set version (HURRAY_ERR_UNSUPPORTED_VERSION), header size, the counts and
// their limits, the record sizes, reserved words, and total_size between the
// smallest and the largest size the counts allow. Status and message as
// hurray_ipc_import_set documents; *out written only on success.
int32_t decode_set_header(const uint8_t *bytes, size_t size, bool whole, SetHeader *out);

// The whole descriptor, which carries `nfds` fds: the header, every region
// record (regions[0..n_regions)), every entry (its offset in entry_at[i],
// i < n_entries), each checked as ipc.md §10.2 lists, in order. The arrays
// are the caller's, sized from decode_set_header's counts.
int32_t decode_set(const uint8_t *bytes, size_t size, size_t nfds, const SetHeader &h,
                   SetRegion *regions, uint32_t *entry_at);

// Entry i of a descriptor decode_set accepted (its offset entry_at[i]) as a
// kind-1 WireDesc with its region's offset and length; *region its region.
void read_set_entry(const uint8_t *bytes, uint32_t at, const SetRegion *regions, WireDesc *d,
                    uint32_t *region);

}  // namespace hurray::detail

#endif  // HURRAY_SRC_IPC_SET_WIRE_H_
