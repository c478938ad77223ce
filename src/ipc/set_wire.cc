// SPDX-License-Identifier: Apache-2.0
// Encoder and decoder of the set descriptor, set wire version 1
// (docs/impl/ipc.md §10.1). Every integer is little-endian at a fixed
// offset; the decoder reads bytes, never casts the buffer to a struct, and
// checks each count and offset in 64-bit arithmetic before it reads what
// the count or offset names.
#include "ipc/set_wire.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "common/error.h"
#include "handle/layout.h"
#include "ipc/le_bytes.h"

namespace hurray::detail {
namespace {

// Header.
enum : size_t {
  kHOffMagic = 0,
  kHOffVersion = 4,
  kHOffHeaderSize = 8,
  kHOffTotalSize = 12,
  kHOffEntries = 16,
  kHOffRegions = 20,
  kHOffNfds = 24,
  kHOffRegionSize = 28,
  kHOffEntrySize = 32,
  kHOffReserved32 = 36,
  kHOffReserved64 = 40,
};
static_assert(kHOffReserved64 + 8 == kSetHeaderSize, "set header of version 1");
// Region record.
enum : size_t {
  kROffKind = 0,
  kROffFlags = 4,
  kROffOffset = 8,
  kROffLength = 16,
  kROffEntries = 24,
  kROffReserved = 28,
};
static_assert(kROffReserved + 4 == kSetRegionSize, "set region record of version 1");
// Entry (shape, then strides, follow the fixed part).
enum : size_t {
  kEOffRegion = 0,
  kEOffNdim = 4,
  kEOffFlags = 8,
  kEOffDtypeCode = 16,
  kEOffDtypeBits = 17,
  kEOffDtypeLanes = 18,
  kEOffDeviceType = 20,
  kEOffDeviceId = 24,
  kEOffReserved = 28,
  kEOffByteOffset = 32,
  kEOffDataOffset = 40,
};
static_assert(kEOffDataOffset + 8 == kSetEntryFixed, "set entry of version 1");

// The smallest and the largest descriptor of n entries and r regions.
uint64_t min_size(uint64_t n, uint64_t r) {
  return kSetHeaderSize + kSetRegionSize * r + kSetEntryFixed * n;
}
uint64_t max_size(uint64_t n, uint64_t r) {
  return kSetHeaderSize + (kSetRegionSize + kSetGpuDescMax) * r +
         set_entry_size(HURRAY_MAX_NDIM) * n;
}

}  // namespace

void encode_set_header(const SetHeader &h, uint8_t *out) {
  std::memset(out, 0, kSetHeaderSize);
  put_u32(out + kHOffMagic, kWireSetMagic);
  put_u32(out + kHOffVersion, HURRAY_IPC_SET_WIRE_VERSION);
  put_u32(out + kHOffHeaderSize, kSetHeaderSize);
  put_u32(out + kHOffTotalSize, h.total_size);
  put_u32(out + kHOffEntries, h.n_entries);
  put_u32(out + kHOffRegions, h.n_regions);
  put_u32(out + kHOffNfds, h.nfds);
  put_u32(out + kHOffRegionSize, kSetRegionSize);
  put_u32(out + kHOffEntrySize, kSetEntryFixed);
}

void encode_set_region(const SetRegion &r, uint32_t index, uint8_t *out) {
  uint8_t *p = out + kSetHeaderSize + static_cast<size_t>(kSetRegionSize) * index;
  std::memset(p, 0, kSetRegionSize);
  put_u32(p + kROffKind, r.kind);
  put_u32(p + kROffFlags, r.flags);
  put_u64(p + kROffOffset, r.offset);
  put_u64(p + kROffLength, r.length);
  put_u32(p + kROffEntries, r.entries);
}

void encode_set_entry(const SetEntry &e, uint8_t *out) {
  std::memset(out, 0, kSetEntryFixed);
  put_u32(out + kEOffRegion, e.region);
  put_u32(out + kEOffNdim, static_cast<uint32_t>(e.ndim));
  put_u64(out + kEOffFlags, e.flags);
  out[kEOffDtypeCode] = e.dtype.code;
  out[kEOffDtypeBits] = e.dtype.bits;
  put_u16(out + kEOffDtypeLanes, e.dtype.lanes);
  put_u32(out + kEOffDeviceType, static_cast<uint32_t>(e.device.device_type));
  put_u32(out + kEOffDeviceId, static_cast<uint32_t>(e.device.device_id));
  put_u64(out + kEOffByteOffset, e.byte_offset);
  put_u64(out + kEOffDataOffset, e.data_offset);
  for (int32_t i = 0; i < e.ndim; ++i) {
    put_u64(out + kSetEntryFixed + 8 * static_cast<size_t>(i), static_cast<uint64_t>(e.shape[i]));
    put_u64(out + kSetEntryFixed + 8 * static_cast<size_t>(e.ndim + i),
            static_cast<uint64_t>(e.strides[i]));
  }
}

int32_t decode_set_header(const uint8_t *bytes, size_t size, bool whole, SetHeader *out) {
  if (size < kWirePrefixSize) {
    return fail(HURRAY_ERR_IPC, "set descriptor truncated: %zu bytes (at least %" PRIu32 ")", size,
                kWirePrefixSize);
  }
  const uint32_t magic = get_u32(bytes + kHOffMagic);
  if (magic == kWireMagic) {
    return fail(HURRAY_ERR_IPC,
                "set descriptor magic is 0x%08" PRIx32
                " (\"HRIP\"): a single handle's "
                "message, which hurray_ipc_import / hurray_ipc_recv read",
                magic);
  }
  if (magic != kWireSetMagic) {
    return fail(HURRAY_ERR_IPC,
                "set descriptor magic is 0x%08" PRIx32 ", not 0x%08" PRIx32
                " (not a hurray set message)",
                magic, kWireSetMagic);
  }
  const uint32_t version = get_u32(bytes + kHOffVersion);
  if (version != HURRAY_IPC_SET_WIRE_VERSION) {
    return fail(HURRAY_ERR_UNSUPPORTED_VERSION,
                "set descriptor version is %" PRIu32
                "; this libhurray reads set version %u only (the sender runs %s libhurray: both "
                "processes need the same set version, docs/impl/ipc.md §10)",
                version, HURRAY_IPC_SET_WIRE_VERSION,
                version < HURRAY_IPC_SET_WIRE_VERSION ? "an older" : "a newer");
  }
  const uint32_t header_size = get_u32(bytes + kHOffHeaderSize);
  if (header_size != kSetHeaderSize) {
    return fail(HURRAY_ERR_IPC,
                "set descriptor header_size is %" PRIu32 " (version 1: %" PRIu32 ")", header_size,
                kSetHeaderSize);
  }
  const uint32_t total = get_u32(bytes + kHOffTotalSize);
  if (whole && total != size) {
    return fail(HURRAY_ERR_IPC,
                "set descriptor total_size is %" PRIu32 " but the message has %zu bytes%s", total,
                size, size < total ? " (truncated)" : "");
  }
  if (size < kSetHeaderSize) {
    return fail(HURRAY_ERR_IPC, "set descriptor truncated: %zu bytes (header: %" PRIu32 ")", size,
                kSetHeaderSize);
  }
  SetHeader h;
  h.total_size = total;
  h.n_entries = get_u32(bytes + kHOffEntries);
  h.n_regions = get_u32(bytes + kHOffRegions);
  h.nfds = get_u32(bytes + kHOffNfds);
  if (h.n_entries == 0 || h.n_entries > HURRAY_IPC_SET_MAX_HANDLES) {
    return fail(HURRAY_ERR_IPC, "set descriptor has %" PRIu32 " entries (1..%d)", h.n_entries,
                HURRAY_IPC_SET_MAX_HANDLES);
  }
  if (h.n_regions == 0 || h.n_regions > h.n_entries) {
    return fail(HURRAY_ERR_IPC,
                "set descriptor has %" PRIu32 " regions for %" PRIu32 " entries (1..entries)",
                h.n_regions, h.n_entries);
  }
  if (h.nfds < h.n_regions ||
      static_cast<uint64_t>(h.nfds) > uint64_t{kSetFdsPerRegion} * h.n_regions) {
    return fail(HURRAY_ERR_IPC,
                "set descriptor says %" PRIu32 " fds for %" PRIu32
                " regions (1 or 2 each, as each region's kind has)",
                h.nfds, h.n_regions);
  }
  const uint32_t region_size = get_u32(bytes + kHOffRegionSize);
  const uint32_t entry_size = get_u32(bytes + kHOffEntrySize);
  if (region_size != kSetRegionSize || entry_size != kSetEntryFixed) {
    return fail(HURRAY_ERR_IPC,
                "set descriptor record sizes are %" PRIu32 " (region) and %" PRIu32
                " (entry); version 1 has %" PRIu32 " and %" PRIu32,
                region_size, entry_size, kSetRegionSize, kSetEntryFixed);
  }
  if (get_u32(bytes + kHOffReserved32) != 0 || get_u64(bytes + kHOffReserved64) != 0) {
    return fail(HURRAY_ERR_IPC, "set descriptor bytes 36..47 (reserved) are not 0");
  }
  const uint64_t lo = min_size(h.n_entries, h.n_regions), hi = max_size(h.n_entries, h.n_regions);
  if (total < lo || total > hi) {
    return fail(HURRAY_ERR_IPC,
                "set descriptor total_size %" PRIu32 " is outside %" PRIu64 "..%" PRIu64
                " (what %" PRIu32 " entries in %" PRIu32 " regions take)",
                total, lo, hi, h.n_entries, h.n_regions);
  }
  *out = h;
  return HURRAY_OK;
}

int32_t decode_set(const uint8_t *bytes, size_t size, size_t nfds, const SetHeader &h,
                   SetRegion *regions, uint32_t *entry_at) {
  if (nfds != h.nfds) {
    return fail(HURRAY_ERR_IPC,
                "set descriptor says %" PRIu32
                " fds, the message carries %zu (each region's kind says how many: 2 for a "
                "memfd, 1 or 2 for a GPU allocation)",
                h.nfds, nfds);
  }
  // decode_set_header checked size >= the smallest size of the counts, so
  // the region records are all there.
  uint64_t sum = 0, fds = 0;
  WireDesc d;
  for (uint32_t r = 0; r < h.n_regions; ++r) {
    const uint8_t *p = bytes + kSetHeaderSize + static_cast<size_t>(kSetRegionSize) * r;
    SetRegion g;
    g.kind = get_u32(p + kROffKind);
    g.flags = get_u32(p + kROffFlags);
    g.offset = get_u64(p + kROffOffset);
    g.length = get_u64(p + kROffLength);
    g.entries = get_u32(p + kROffEntries);
    g.seen = 0;
    g.fd_at = static_cast<uint32_t>(fds);
    g.first = 0;
    g.desc_at = 0;
    g.desc_size = 0;
    g.device = hurray_device{HURRAY_DEVICE_CPU, 0};
    if (g.kind != kKindCpuMemfd && !is_gpu_ipc_kind(g.kind)) {
      return fail(HURRAY_ERR_IPC,
                  "set region %" PRIu32 " has kind %" PRIu32
                  " (1, CPU memfd, or 2 to 6, a GPU allocation)",
                  r, g.kind);
    }
    const uint32_t allowed = g.kind == kKindCpuMemfd ? kSetRegionReadOnly : 0u;
    if ((g.flags & ~allowed) != 0 || get_u32(p + kROffReserved) != 0) {
      return fail(HURRAY_ERR_IPC,
                  "set region %" PRIu32 " has flags 0x%" PRIx32
                  " or a reserved word not 0 (bit 0, read-only, is the only flag, of kind 1 only)",
                  r, g.flags);
    }
    if (g.entries == 0) {
      return fail(HURRAY_ERR_IPC, "set region %" PRIu32 " has no entries", r);
    }
    fds += wire_fds(g.kind);
    if (g.kind != kKindCpuMemfd) {
      // Its descriptor: a single message of its kind describing the whole
      // allocation as bytes, checked as hurray_ipc_import checks one.
      const uint32_t want = wire_size(g.kind, 1);
      if (g.length != want || g.offset > size || size - g.offset < g.length) {
        return fail(HURRAY_ERR_IPC,
                    "set region %" PRIu32 " (kind %" PRIu32 ") names descriptor bytes [%" PRIu64
                    ", +%" PRIu64 ") (kind %" PRIu32 " takes %" PRIu32
                    " bytes, within the %zu of the message)",
                    r, g.kind, g.offset, g.length, g.kind, want, size);
      }
      int32_t st =
          decode_descriptor(bytes + g.offset, static_cast<size_t>(g.length), wire_fds(g.kind), &d);
      if (st != HURRAY_OK) {
        char why[256];
        std::snprintf(why, sizeof why, "%s", hurray_last_error());
        return fail(st, "set region %" PRIu32 "'s descriptor: %s", r, why);
      }
      if (d.kind != g.kind || d.ndim != 1 || d.dtype.code != kDLUInt || d.dtype.bits != 8 ||
          d.dtype.lanes != 1 || d.flags != 0 || d.byte_offset != 0 || d.data_offset != 0 ||
          d.strides[0] != 1 || static_cast<uint64_t>(d.shape[0]) != d.region_length) {
        return fail(HURRAY_ERR_IPC,
                    "set region %" PRIu32 "'s descriptor (kind %" PRIu32
                    ") does not describe its whole allocation as bytes (kind %" PRIu32
                    ", kDLUInt 8 x 1, shape {allocation bytes}, offsets and flags 0)",
                    r, d.kind, g.kind);
      }
      g.desc_at = g.offset;
      g.desc_size = static_cast<uint32_t>(g.length);
      g.device = d.device;
      g.offset = 0;
      g.length = d.region_length;
    } else {
      uint64_t end;
      if (g.length == 0 || __builtin_add_overflow(g.offset, g.length, &end) ||
          end > static_cast<uint64_t>(INT64_MAX)) {
        return fail(HURRAY_ERR_IPC,
                    "set region %" PRIu32 " [%" PRIu64 ", +%" PRIu64
                    ") is empty or beyond the largest file offset",
                    r, g.offset, g.length);
      }
    }
    sum += g.entries;
    regions[r] = g;
  }
  if (sum != h.n_entries) {
    return fail(HURRAY_ERR_IPC,
                "set regions hold %" PRIu64 " entries together, the header says %" PRIu32, sum,
                h.n_entries);
  }
  if (fds != h.nfds) {
    return fail(HURRAY_ERR_IPC,
                "set regions' kinds take %" PRIu64 " fds together, the header says %" PRIu32, fds,
                h.nfds);
  }
  uint64_t at = kSetHeaderSize + static_cast<uint64_t>(kSetRegionSize) * h.n_regions;
  for (uint32_t i = 0; i < h.n_entries; ++i) {
    if (at + kSetEntryFixed > size) {
      return fail(HURRAY_ERR_IPC,
                  "set entry %" PRIu32 " at byte %" PRIu64 " is cut off (%zu bytes in all)", i, at,
                  size);
    }
    const uint8_t *p = bytes + at;
    const uint32_t region = get_u32(p + kEOffRegion);
    const int32_t ndim = static_cast<int32_t>(get_u32(p + kEOffNdim));
    if (region >= h.n_regions) {
      return fail(HURRAY_ERR_IPC, "set entry %" PRIu32 " names region %" PRIu32 " of %" PRIu32, i,
                  region, h.n_regions);
    }
    if (ndim < 0 || ndim > HURRAY_MAX_NDIM) {
      return fail(HURRAY_ERR_INVALID_ARGUMENT, "set entry %" PRIu32 " has ndim %" PRId32 " (0..%d)",
                  i, ndim, HURRAY_MAX_NDIM);
    }
    if (at + set_entry_size(ndim) > size) {
      return fail(HURRAY_ERR_IPC,
                  "set entry %" PRIu32 " of ndim %" PRId32 " at byte %" PRIu64
                  " is cut off (%zu bytes in all)",
                  i, ndim, at, size);
    }
    SetRegion &g = regions[region];
    const int32_t type = static_cast<int32_t>(get_u32(p + kEOffDeviceType));
    const int32_t id = static_cast<int32_t>(get_u32(p + kEOffDeviceId));
    if (g.kind == kKindCpuMemfd && (type != HURRAY_DEVICE_CPU || id != 0)) {
      return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                  "set entry %" PRIu32 " is on %s %" PRId32 "; its region %" PRIu32
                  " (kind 1, a memfd) holds kDLCPU 0",
                  i, device_type_name(type), id, region);
    }
    if (g.kind != kKindCpuMemfd && (type != g.device.device_type || id != g.device.device_id)) {
      return fail(HURRAY_ERR_IPC,
                  "set entry %" PRIu32 " is on %s %" PRId32 "; its region %" PRIu32
                  "'s descriptor names %s %" PRId32,
                  i, device_type_name(type), id, region, device_type_name(g.device.device_type),
                  g.device.device_id);
    }
    if (get_u32(p + kEOffReserved) != 0) {
      return fail(HURRAY_ERR_IPC, "set entry %" PRIu32 " has a reserved word (bytes 28..31) not 0",
                  i);
    }
    uint32_t ignored;
    read_set_entry(bytes, static_cast<uint32_t>(at), regions, &d, &ignored);
    char who[40];
    std::snprintf(who, sizeof who, "set entry %" PRIu32, i);
    const int32_t st = check_tensor_in_region(d, who);
    if (st != HURRAY_OK) return st;
    uint64_t start;
    if (__builtin_add_overflow(d.data_offset, d.byte_offset, &start) ||
        start > static_cast<uint64_t>(INT64_MAX)) {
      return fail(HURRAY_ERR_IPC,
                  "set entry %" PRIu32 ": data_offset %" PRIu64 " plus byte_offset %" PRIu64
                  " is beyond the largest file offset",
                  i, d.data_offset, d.byte_offset);
    }
    if ((g.flags & kSetRegionReadOnly) != 0 && (d.flags & HURRAY_FLAG_READ_ONLY) == 0) {
      return fail(HURRAY_ERR_IPC,
                  "set entry %" PRIu32 " lacks HURRAY_FLAG_READ_ONLY but its region %" PRIu32
                  " is read-only",
                  i, region);
    }
    if (g.seen == 0) g.first = i;
    if (++g.seen > g.entries) {
      return fail(HURRAY_ERR_IPC,
                  "set region %" PRIu32 " says %" PRIu32 " entries; entry %" PRIu32 " is one more",
                  region, g.entries, i);
    }
    entry_at[i] = static_cast<uint32_t>(at);
    at += set_entry_size(ndim);
  }
  // The GPU regions' descriptors follow the entries, in region order, each
  // right after the one before.
  for (uint32_t r = 0; r < h.n_regions; ++r) {
    const SetRegion &g = regions[r];
    if (g.kind == kKindCpuMemfd) continue;
    if (g.desc_at != at) {
      return fail(HURRAY_ERR_IPC,
                  "set region %" PRIu32 "'s descriptor is at byte %" PRIu64 ", not at %" PRIu64
                  " (after the entries and the GPU regions' descriptors "
                  "before it)",
                  r, g.desc_at, at);
    }
    at += g.desc_size;
  }
  if (at != size) {
    return fail(HURRAY_ERR_IPC, "set descriptor has %" PRIu64 " bytes after its last %s",
                static_cast<uint64_t>(size) - at, "entry or GPU region descriptor");
  }
  return HURRAY_OK;
}

void read_set_entry(const uint8_t *bytes, uint32_t at, const SetRegion *regions, WireDesc *d,
                    uint32_t *region) {
  const uint8_t *p = bytes + at;
  *region = get_u32(p + kEOffRegion);
  d->kind = regions[*region].kind;
  d->nfds = wire_fds(d->kind);
  d->flags = get_u64(p + kEOffFlags);
  d->device = hurray_device{static_cast<int32_t>(get_u32(p + kEOffDeviceType)),
                            static_cast<int32_t>(get_u32(p + kEOffDeviceId))};
  d->dtype.code = p[kEOffDtypeCode];
  d->dtype.bits = p[kEOffDtypeBits];
  d->dtype.lanes = get_u16(p + kEOffDtypeLanes);
  d->ndim = static_cast<int32_t>(get_u32(p + kEOffNdim));
  d->byte_offset = get_u64(p + kEOffByteOffset);
  d->data_offset = get_u64(p + kEOffDataOffset);
  d->region_offset = regions[*region].offset;
  d->region_length = regions[*region].length;
  for (int32_t i = 0; i < d->ndim; ++i) {
    d->shape[i] = static_cast<int64_t>(get_u64(p + kSetEntryFixed + 8 * static_cast<size_t>(i)));
    d->strides[i] =
        static_cast<int64_t>(get_u64(p + kSetEntryFixed + 8 * static_cast<size_t>(d->ndim + i)));
  }
  d->pool_id = 0;
  d->gpu_flags = 0;
}

}  // namespace hurray::detail
