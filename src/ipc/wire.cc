// SPDX-License-Identifier: Apache-2.0
// Descriptor encoder and decoder, wire version 2 (docs/impl/ipc.md §3).
// Every integer is little-endian at a fixed offset; the decoder reads bytes,
// never casts the buffer to a struct, so alignment and host order do not
// matter.
#include "ipc/wire.h"

#include <cinttypes>
#include <cstring>

#include "common/error.h"
#include "handle/layout.h"
#include "ipc/le_bytes.h"

namespace hurray::detail {
namespace {

// Byte offsets of the fixed part.
enum : size_t {
  kOffMagic = 0,
  kOffVersion = 4,
  kOffHeaderSize = 8,
  kOffTotalSize = 12,
  kOffKind = 16,
  kOffNfds = 20,
  kOffFlags = 24,
  kOffDeviceType = 32,
  kOffDeviceId = 36,
  kOffDtypeCode = 40,
  kOffDtypeBits = 41,
  kOffDtypeLanes = 42,
  kOffNdim = 44,
  kOffByteOffset = 48,
  kOffDataOffset = 56,
  kOffRegionOffset = 64,
  kOffRegionLength = 72,
};
static_assert(kOffRegionLength + 8 == kWireHeaderSize, "fixed part of wire version 2");

// The GPU part `g` (at byte `at` of the descriptor) into d, every field
// checked (ipc.md §6.1).
int32_t decode_gpu_part(const uint8_t *g, uint32_t at, WireDesc *d) {
  std::memcpy(d->gpu_uuid, g + kGpuOffUuid, kWireGpuUuidSize);
  d->sender.pid = get_u32(g + kGpuOffSender);
  const uint32_t reserved = get_u32(g + kGpuOffSender + 4);
  d->sender.start_time = get_u64(g + kGpuOffSender + 8);
  d->gpu_flags = get_u64(g + kGpuOffFlags);
  std::memcpy(d->gpu_handle, g + kGpuOffHandle, kWireGpuHandleSize);
  std::memcpy(d->gpu_event, g + kGpuOffEvent, kWireGpuEventSize);
  bool uuid_set = false;
  for (uint32_t i = 0; i < kWireGpuUuidSize; ++i) uuid_set = uuid_set || d->gpu_uuid[i] != 0;
  if (!uuid_set) {
    return fail(HURRAY_ERR_IPC,
                "descriptor bytes %" PRIu32 "..%" PRIu32
                " (the device's UUID) are all zero: no device is named",
                at + kGpuOffUuid, at + kGpuOffUuid + kWireGpuUuidSize - 1);
  }
  if (d->sender.pid == 0 || d->sender.pid > static_cast<uint32_t>(INT32_MAX) || reserved != 0) {
    return fail(HURRAY_ERR_IPC,
                "descriptor sender is pid %" PRIu32 " with reserved word %" PRIu32
                " (a pid in 1..2^31-1 and 0 expected, bytes %" PRIu32 "..%" PRIu32 ")",
                d->sender.pid, reserved, at + kGpuOffSender, at + kGpuOffSender + 7);
  }
  if ((d->gpu_flags & ~kGpuFlagEvent) != 0) {
    return fail(HURRAY_ERR_IPC,
                "descriptor GPU flags are 0x%" PRIx64 ": bits other than 0x%" PRIx64
                " are reserved (0)",
                d->gpu_flags, kGpuFlagEvent);
  }
  if ((d->gpu_flags & kGpuFlagEvent) != 0) {
    bool event_set = false;
    for (uint32_t i = 0; i < kWireGpuEventSize; ++i) event_set = event_set || d->gpu_event[i] != 0;
    if (!event_set) {
      return fail(HURRAY_ERR_IPC,
                  "descriptor GPU flag 0x%" PRIx64
                  " says an IPC event is present, but bytes %" PRIu32 "..%" PRIu32
                  " (its handle) are all zero",
                  kGpuFlagEvent, at + kGpuOffEvent, at + kGpuOffEvent + kWireGpuEventSize - 1);
    }
  }
  auto zero = [&](const uint8_t *p, uint32_t n, uint32_t off, const char *what) {
    for (uint32_t i = 0; i < n; ++i) {
      if (p[i] != 0) {
        return fail(HURRAY_ERR_IPC, "descriptor byte %" PRIu32 " (%s) is %u (must be 0)",
                    at + off + i, what, static_cast<unsigned>(p[i]));
      }
    }
    return static_cast<int32_t>(HURRAY_OK);
  };
  int32_t st = HURRAY_OK;
  if ((d->gpu_flags & kGpuFlagEvent) == 0) {
    st = zero(d->gpu_event, kWireGpuEventSize, kGpuOffEvent,
              "the IPC event handle, with no event flagged");
  }
  if (st == HURRAY_OK && d->kind == kKindCudaVmmFd) {
    st = zero(d->gpu_handle, kWireGpuHandleSize, kGpuOffHandle, "kind 2's unused IPC handle");
  }
  return st;
}

}  // namespace

uint32_t encode_descriptor(const WireDesc &d, uint8_t *out) {
  const uint32_t size = wire_size(d.kind, d.ndim);
  std::memset(out, 0, kWireHeaderSize);
  put_u32(out + kOffMagic, kWireMagic);
  put_u32(out + kOffVersion, HURRAY_IPC_WIRE_VERSION);
  put_u32(out + kOffHeaderSize, kWireHeaderSize);
  put_u32(out + kOffTotalSize, size);
  put_u32(out + kOffKind, d.kind);
  put_u32(out + kOffNfds, d.nfds);
  put_u64(out + kOffFlags, d.flags);
  put_u32(out + kOffDeviceType, static_cast<uint32_t>(d.device.device_type));
  put_u32(out + kOffDeviceId, static_cast<uint32_t>(d.device.device_id));
  out[kOffDtypeCode] = d.dtype.code;
  out[kOffDtypeBits] = d.dtype.bits;
  put_u16(out + kOffDtypeLanes, d.dtype.lanes);
  put_u32(out + kOffNdim, static_cast<uint32_t>(d.ndim));
  put_u64(out + kOffByteOffset, d.byte_offset);
  put_u64(out + kOffDataOffset, d.data_offset);
  put_u64(out + kOffRegionOffset, d.region_offset);
  put_u64(out + kOffRegionLength, d.region_length);
  for (int32_t i = 0; i < d.ndim; ++i) {
    put_u64(out + kWireHeaderSize + 8 * static_cast<size_t>(i), static_cast<uint64_t>(d.shape[i]));
    put_u64(out + kWireHeaderSize + 8 * static_cast<size_t>(d.ndim + i),
            static_cast<uint64_t>(d.strides[i]));
  }
  if (is_gpu_ipc_kind(d.kind)) {
    uint8_t *g = out + wire_size(d.ndim);
    std::memset(g, 0, kWireGpuPartSize);
    std::memcpy(g + kGpuOffUuid, d.gpu_uuid, kWireGpuUuidSize);
    put_u32(g + kGpuOffSender, d.sender.pid);
    put_u64(g + kGpuOffSender + 8, d.sender.start_time);
    put_u64(g + kGpuOffFlags, d.gpu_flags);
    std::memcpy(g + kGpuOffHandle, d.gpu_handle, kWireGpuHandleSize);
    std::memcpy(g + kGpuOffEvent, d.gpu_event, kWireGpuEventSize);
  }
  if (is_pool_kind(d.kind)) put_u64(out + wire_size(d.ndim) + kWireGpuPartSize, d.pool_id);
  return size;
}

int32_t decode_descriptor(const uint8_t *bytes, size_t size, uint32_t nfds, WireDesc *out) {
  if (size < kWirePrefixSize) {
    return fail(HURRAY_ERR_IPC, "descriptor truncated: %zu bytes (at least %" PRIu32 ")", size,
                kWirePrefixSize);
  }
  const uint32_t magic = get_u32(bytes + kOffMagic);
  if (magic == kWireSetMagic) {
    return fail(HURRAY_ERR_IPC,
                "descriptor magic is 0x%08" PRIx32
                " (\"HRIS\"): a set of handles, which "
                "hurray_ipc_import_set / hurray_ipc_recv_set read (docs/impl/ipc.md §10)",
                magic);
  }
  if (magic != kWireMagic) {
    return fail(HURRAY_ERR_IPC,
                "descriptor magic is 0x%08" PRIx32 ", not 0x%08" PRIx32 " (not a hurray message)",
                magic, kWireMagic);
  }
  const uint32_t version = get_u32(bytes + kOffVersion);
  if (version != HURRAY_IPC_WIRE_VERSION) {
    return fail(HURRAY_ERR_UNSUPPORTED_VERSION,
                "descriptor wire version is %" PRIu32 "; this libhurray reads version %u only%s",
                version, HURRAY_IPC_WIRE_VERSION,
                version < HURRAY_IPC_WIRE_VERSION
                    ? " (the sender runs an older libhurray: both processes need the same wire "
                      "version; version 2 names GPUs by UUID, docs/impl/ipc.md §3)"
                    : " (the sender runs a newer libhurray)");
  }
  const uint32_t header_size = get_u32(bytes + kOffHeaderSize);
  const uint32_t total_size = get_u32(bytes + kOffTotalSize);
  if (header_size != kWireHeaderSize) {
    return fail(HURRAY_ERR_IPC, "descriptor header_size is %" PRIu32 " (version 2: %" PRIu32 ")",
                header_size, kWireHeaderSize);
  }
  if (total_size != size) {
    return fail(HURRAY_ERR_IPC,
                "descriptor total_size is %" PRIu32 " but the message has %zu bytes%s", total_size,
                size, size < total_size ? " (truncated)" : "");
  }
  if (size < kWireHeaderSize) {
    return fail(HURRAY_ERR_IPC, "descriptor truncated: %zu bytes (header: %" PRIu32 ")", size,
                kWireHeaderSize);
  }
  WireDesc d;
  d.kind = get_u32(bytes + kOffKind);
  d.nfds = get_u32(bytes + kOffNfds);
  d.flags = get_u64(bytes + kOffFlags);
  d.device.device_type = static_cast<int32_t>(get_u32(bytes + kOffDeviceType));
  d.device.device_id = static_cast<int32_t>(get_u32(bytes + kOffDeviceId));
  d.dtype.code = bytes[kOffDtypeCode];
  d.dtype.bits = bytes[kOffDtypeBits];
  d.dtype.lanes = get_u16(bytes + kOffDtypeLanes);
  d.ndim = static_cast<int32_t>(get_u32(bytes + kOffNdim));
  d.byte_offset = get_u64(bytes + kOffByteOffset);
  d.data_offset = get_u64(bytes + kOffDataOffset);
  d.region_offset = get_u64(bytes + kOffRegionOffset);
  d.region_length = get_u64(bytes + kOffRegionLength);

  int32_t st = HURRAY_OK;
  const bool gpu = is_gpu_ipc_kind(d.kind);
  if (d.kind != kKindCpuMemfd && !gpu) {
    return fail(HURRAY_ERR_IPC,
                "descriptor kind %" PRIu32
                " is unknown (this libhurray reads kinds 1 to 6; the sender may run a newer one)",
                d.kind);
  }
  if (d.ndim < 0 || d.ndim > HURRAY_MAX_NDIM) {
    return fail(HURRAY_ERR_INVALID_ARGUMENT, "descriptor ndim is %" PRId32 " (0..%d)", d.ndim,
                HURRAY_MAX_NDIM);
  }
  if (size != wire_size(d.kind, d.ndim)) {
    return fail(HURRAY_ERR_IPC,
                "descriptor has %zu bytes; ndim %" PRId32 " of kind %" PRIu32 " takes %" PRIu32,
                size, d.ndim, d.kind, wire_size(d.kind, d.ndim));
  }
  const uint32_t want_fds = wire_fds(d.kind);
  if (d.nfds != want_fds || nfds != want_fds) {
    return fail(HURRAY_ERR_IPC,
                "descriptor says %" PRIu32 " fds, the message carries %" PRIu32 " (kind %" PRIu32
                " takes %" PRIu32 ": %s)",
                d.nfds, nfds, d.kind, want_fds,
                d.kind == kKindCudaVmmFd    ? "lifetime, allocation"
                : d.kind == kKindCudaPoolFd ? "lifetime, pool"
                : gpu                       ? "lifetime"
                                            : "memfd, lifetime");
  }
  if (!gpu && (d.device.device_type != HURRAY_DEVICE_CPU || d.device.device_id != 0)) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "descriptor device is %s %" PRId32 "; kind 1 is kDLCPU 0",
                device_type_name(d.device.device_type), d.device.device_id);
  }
  if (gpu) {
    // Kinds 5 and 6 are pool memory of either vendor (ipc.md §6.1): the
    // device type says whose export data the handle is.
    const int32_t want = d.kind == kKindHipIpc ? HURRAY_DEVICE_ROCM : HURRAY_DEVICE_CUDA;
    const bool pool_of_rocm = is_pool_kind(d.kind) && d.device.device_type == HURRAY_DEVICE_ROCM;
    if ((d.device.device_type != want && !pool_of_rocm) || d.device.device_id < 0) {
      return fail(HURRAY_ERR_IPC, "descriptor device is %s %" PRId32 "; kind %" PRIu32 " is %s%s",
                  device_type_name(d.device.device_type), d.device.device_id, d.kind,
                  device_type_name(want), is_pool_kind(d.kind) ? " or kDLROCM" : "");
    }
    if (d.region_offset != 0) {
      return fail(HURRAY_ERR_IPC,
                  "descriptor region_offset is %" PRIu64 "; kind %" PRIu32
                  " maps a whole allocation (0)",
                  d.region_offset, d.kind);
    }
    st = decode_gpu_part(bytes + wire_size(d.ndim), wire_size(d.ndim), &d);
    if (st != HURRAY_OK) return st;
  }
  d.pool_id = 0;
  if (is_pool_kind(d.kind)) {
    const uint32_t at = wire_size(d.ndim) + kWireGpuPartSize;
    d.pool_id = get_u64(bytes + at);
    if (d.pool_id == 0) {
      return fail(HURRAY_ERR_IPC,
                  "descriptor bytes %" PRIu32 "..%" PRIu32 " (kind %" PRIu32
                  "'s pool number) are 0: no pool is named",
                  at, at + kWirePoolPartSize - 1, d.kind);
    }
  }
  for (int32_t i = 0; i < d.ndim; ++i) {
    d.shape[i] =
        static_cast<int64_t>(get_u64(bytes + kWireHeaderSize + 8 * static_cast<size_t>(i)));
    d.strides[i] = static_cast<int64_t>(
        get_u64(bytes + kWireHeaderSize + 8 * static_cast<size_t>(d.ndim + i)));
  }
  st = check_tensor_in_region(d, "descriptor");
  if (st != HURRAY_OK) return st;
  *out = d;
  return HURRAY_OK;
}

int32_t check_tensor_in_region(const WireDesc &d, const char *who) {
  int32_t st = HURRAY_OK;
  // The tensor as a handle would be checked; any non-NULL address stands in
  // for the mapping not made yet.
  static char placeholder;
  const Desc desc{&placeholder,
                  d.byte_offset,
                  d.device.device_type,
                  d.device.device_id,
                  d.dtype,
                  d.ndim,
                  d.shape,
                  d.strides,
                  d.flags};
  hurray_extent e;
  st = check_desc_exact(desc, who, true, &e);
  if (st != HURRAY_OK) return st;

  if (d.region_length == 0) return fail(HURRAY_ERR_IPC, "%s region_length is 0", who);
  uint64_t region_end;
  if (__builtin_add_overflow(d.region_offset, d.region_length, &region_end) ||
      region_end > static_cast<uint64_t>(INT64_MAX)) {
    return fail(HURRAY_ERR_IPC,
                "%s region [%" PRIu64 ", +%" PRIu64 ") is beyond the largest file offset", who,
                d.region_offset, d.region_length);
  }
  if (d.data_offset < d.region_offset || d.data_offset > region_end) {
    return fail(HURRAY_ERR_IPC,
                "%s data_offset %" PRIu64 " is outside the region [%" PRIu64 ", +%" PRIu64 ")", who,
                d.data_offset, d.region_offset, d.region_length);
  }
  // Bytes [data_offset + lowest, data_offset + highest) within the region;
  // each bound compared in the direction it points (no overflow).
  const uint64_t below = d.data_offset - d.region_offset, above = region_end - d.data_offset;
  auto fits = [&](int64_t v) {
    return v >= 0 ? static_cast<uint64_t>(v) <= above
                  : uint64_t{0} - static_cast<uint64_t>(v) <= below;
  };
  if (e.numel > 0 && !(fits(e.lowest) && fits(e.highest))) {
    return fail(HURRAY_ERR_IPC,
                "%s elements span bytes [%lld, %lld) of data, outside the region "
                "[%" PRIu64 ", +%" PRIu64 ") with data at %" PRIu64,
                who, static_cast<long long>(e.lowest), static_cast<long long>(e.highest),
                d.region_offset, d.region_length, d.data_offset);
  }
  return HURRAY_OK;
}

hurray_buffer received_handle(const WireDesc &d, hurray_release_fn release, void *user_data,
                              void *data, int64_t *dims) {
  for (int32_t i = 0; i < d.ndim; ++i) {
    dims[i] = d.shape[i];
    dims[d.ndim + i] = d.strides[i];
  }
  hurray_buffer h;
  std::memset(&h, 0, sizeof h);
  h.version = HURRAY_BUFFER_VERSION;
  h.release_fn = release;
  h.user_data = user_data;
  h.flags = d.flags;
  h.data = data;
  h.byte_offset = d.byte_offset;
  h.device = d.device;
  h.dtype = d.dtype;
  h.ndim = d.ndim;
  h.shape = d.ndim > 0 ? dims : nullptr;
  h.strides = d.ndim > 0 ? dims + d.ndim : nullptr;
  return h;
}

}  // namespace hurray::detail
