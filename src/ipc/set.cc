// SPDX-License-Identifier: Apache-2.0
// A set of handles in one message (docs/impl/ipc.md §10): export, import
// and discard; the socket forms are in socket.cc.
//
// Export: the handles are grouped by the allocation their memory lies in
// (the MemfdBlock behind them, through shares and views: a tensor group's
// members, shares and views of one buffer are one region); each region
// travels as one memfd and one lifetime fd, whatever the number of handles
// in it, and its watch holds all their references (a bundle released once,
// at the lifetime pipe's end of file). Every CPU handle whose memory is not
// shareable is copied into ONE new memfd (each at a 256-byte aligned
// offset), one more region. All or nothing: nothing is consumed until every
// region's fds and watch exist.
//
// Import: the descriptor is decoded and checked in full (set_wire.cc), then
// every region's fds, then each region is mapped once and its mapping
// becomes one handle shared as many ways as the region has entries, each
// share turned into a view of its entry: one count per region, the
// mapping and fds closed (the sender's reference returned) once, after the
// last of them.
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "api/view.h"
#include "checking/checking.h"
#include "common/block_cache.h"
#include "common/diagnostics.h"
#include "common/error.h"
#include "copy/host.h"
#include "copy/plan.h"
#include "device/memfd_block.h"
#include "handle/handle.h"
#include "handle/layout.h"
#include "handle/share_block.h"
#include "device/gpu_ipc.h"
#include "ipc/message.h"
#include "ipc/pool_peers.h"
#include "ipc/set.h"
#include "ipc/set_wire.h"
#include "ipc/watcher.h"

namespace hurray::detail {
namespace {

constexpr uint32_t kKnownOptions = HURRAY_IPC_ZERO_COPY_ONLY;
constexpr uint64_t kCopyAlign = HURRAY_GROUP_ALIGNMENT;

// The references of several handles of one region, released together.
struct Bundle {
  size_t n;
  int64_t dims[2];      // a GPU region's handle: shape and strides of its bytes
  hurray_buffer hs[1];  // flexible tail
};

void bundle_release(void *p) {
  auto *b = static_cast<Bundle *>(p);
  for (size_t i = 0; i < b->n; ++i) (void)hurray_buffer_release(&b->hs[i]);
  std::free(b);
}

// Same as export.cc's: every byte the handle touches lies in b's mapping.
bool within_mapping(const hurray_buffer &h, const hurray_extent &e, const MemfdBlock &b) {
  const uintptr_t map = reinterpret_cast<uintptr_t>(b.map);
  const uintptr_t end = map + static_cast<uintptr_t>(b.map_length);
  const uintptr_t data = reinterpret_cast<uintptr_t>(h.data);
  if (e.numel == 0) return true;
  if (data < map || data > end) return false;
  const uint64_t below = data - map, above = end - data;
  auto fits = [&](int64_t v) {
    return v >= 0 ? static_cast<uint64_t>(v) <= above
                  : uint64_t{0} - static_cast<uint64_t>(v) <= below;
  };
  return fits(e.lowest) && fits(e.highest);
}

int32_t errno_fail(const char *call) {
  const int err = errno;
  return fail(HURRAY_ERR_IPC, "%s for an IPC set export failed: %s", call, std::strerror(err));
}

// Per handle of the set.
struct Member {
  hurray_extent e;
  uint32_t region;
  bool copied;
  uint64_t copy_offset;  // copied: where in the copy region its bytes start
  uint64_t copy_bytes;
  uint64_t gpu_offset;  // GPU: its data minus its allocation's base
};

// Per region of the set.
struct Region {
  const MemfdBlock *block;  // the memory (the copy region: the copy's block); GPU: NULL
  uint32_t count;           // handles in it
  bool read_only;           // every handle in it has HURRAY_FLAG_READ_ONLY
  Watch *watch;             // NULL until made
  hurray_buffer held;       // what the watch releases
  Bundle *bundle;           // held's block, when more than one handle (GPU: always)
  // A GPU allocation (ipc.md §10): its base and bytes on `device`, and its
  // export (prepare_gpu_set_region; gpu_made once it exists: its fds are
  // the message's then, its watch holds `held`).
  bool gpu;
  uintptr_t base;
  uint64_t bytes;
  hurray_device device;
  bool gpu_made;
  PreparedExport gx;
};

// Open addressing over MemfdBlock pointers: block -> region.
struct RegionIndex {
  const MemfdBlock **keys;
  uint32_t *values;
  size_t cap;  // power of two
  uint32_t *find(const MemfdBlock *b, bool *found) {
    size_t i = (reinterpret_cast<uintptr_t>(b) >> 4) * 0x9E3779B97F4A7C15ull & (cap - 1);
    while (keys[i] != nullptr && keys[i] != b) i = (i + 1) & (cap - 1);
    *found = keys[i] == b;
    keys[i] = b;
    return &values[i];
  }
};

// Everything an export of a set made before it is committed.
struct PreparedSet {
  hurray_buffer *hs = nullptr;  // the handles (untracked: the producers' own)
  Member *members = nullptr;
  Region *regions = nullptr;
  uint32_t n_regions = 0;
  bool has_copy = false;  // the last region is the copy region
  uint32_t gx_kind = 0;   // export_gpu_region: the kind of the region it made
  hurray_buffer copy{};   // the copy region's handle (watched by its region)
  hurray_ipc_set_message *msg = nullptr;
};

void free_set_message(hurray_ipc_set_message *m) { std::free(m); }

// hurray_share of an untracked handle without tracking its n references
// (the import tracks only the views it returns).
int32_t share_untracked(hurray_buffer *src, uint32_t n, hurray_buffer *out) {
  HandleChunks h = load_chunks(src);
  if (n > 1) {
    void *mem = LibraryBlocks::get();
    if (mem == nullptr) {
      return fail(HURRAY_ERR_OUT_OF_MEMORY, "allocating the %zu-byte share block failed",
                  sizeof(ShareBlock));
    }
    auto *b = new (mem) ShareBlock;
    b->refs.store(n, std::memory_order_relaxed);
    store_chunks(&b->source, h);
    h = with_owner(h, &share_release, b);
  }
  clear(src);
  for (uint32_t i = 0; i < n; ++i) store_chunks(&out[i], h);
  return HURRAY_OK;
}

hurray_ipc_set_message *new_set_message(size_t size, size_t nfds) {
  const size_t bytes = sizeof(hurray_ipc_set_message) + sizeof(int32_t) * nfds + size;
  auto *m = static_cast<hurray_ipc_set_message *>(std::malloc(bytes));
  if (m == nullptr) {
    fail(HURRAY_ERR_OUT_OF_MEMORY, "allocating the %zu-byte set message failed", bytes);
    return nullptr;
  }
  m->fds = reinterpret_cast<int32_t *>(m + 1);
  m->bytes = reinterpret_cast<uint8_t *>(m->fds + nfds);
  m->size = size;
  m->nfds = nfds;
  for (size_t i = 0; i < nfds; ++i) m->fds[i] = -1;
  return m;
}

void close_fds_once(int32_t *fds, size_t n) {
  // A hostile message may name one fd twice: close each once (a second
  // close could hit an fd another thread opened meanwhile).
  int32_t *sorted = static_cast<int32_t *>(std::malloc(sizeof(int32_t) * (n > 0 ? n : 1)));
  if (sorted != nullptr) {
    std::memcpy(sorted, fds, sizeof(int32_t) * n);
    std::sort(sorted, sorted + n);
    for (size_t i = 0; i < n; ++i) {
      if (sorted[i] >= 0 && (i == 0 || sorted[i] != sorted[i - 1])) close(sorted[i]);
    }
    std::free(sorted);
  } else {
    for (size_t i = 0; i < n; ++i) {
      bool seen = false;
      for (size_t j = 0; j < i && !seen; ++j) seen = fds[j] == fds[i];
      if (fds[i] >= 0 && !seen) close(fds[i]);
    }
  }
  for (size_t i = 0; i < n; ++i) fds[i] = -1;
}

// Undoes what prepare_set made (every region's watch taken back before its
// write end closes), leaving the handles in p->hs untouched.
void abort_set(PreparedSet *p) {
  for (uint32_t r = 0; r < p->n_regions; ++r) {
    Region &g = p->regions[r];
    if (g.watch != nullptr) unwatch_export(g.watch);
    g.watch = nullptr;
    // A GPU export: its watch taken back (its event destroyed with it); its
    // fds are the message's, closed below.
    if (g.gpu && g.gpu_made) abort_export(&g.gx);
    g.gpu_made = false;
    std::free(g.bundle);  // the references in it are the callers' still
    g.bundle = nullptr;
  }
  if (p->msg != nullptr) {
    close_fds_once(p->msg->fds, p->msg->nfds);
    free_set_message(p->msg);
    p->msg = nullptr;
  }
  if (p->has_copy) (void)hurray_buffer_release(&p->copy);
  p->has_copy = false;
}

void free_prepared(PreparedSet *p) {
  std::free(p->members);
  std::free(p->regions);
  p->members = nullptr;
  p->regions = nullptr;
}

// The copy region: each member marked `copied` at its offset, compact.
int32_t make_copies(PreparedSet *p, size_t n, uint64_t total) {
  const hurray_dtype u8{kDLUInt, 8, 1};
  const int64_t shape[1] = {static_cast<int64_t>(total)};
  int32_t st = shareable_cpu_alloc(u8, 1, shape, 0, total, &p->copy);
  if (st != HURRAY_OK) return st;
  p->has_copy = true;
  auto *base = static_cast<char *>(p->copy.data);
  for (size_t i = 0; i < n; ++i) {
    const Member &m = p->members[i];
    if (!m.copied || m.e.numel == 0) continue;
    const hurray_buffer &h = p->hs[i];
    char *dst = base + m.copy_offset;
    if (m.e.contiguous) {
      std::memcpy(dst,
                  reinterpret_cast<const void *>(reinterpret_cast<uintptr_t>(h.data) +
                                                 static_cast<uintptr_t>(m.e.lowest)),
                  static_cast<size_t>(m.copy_bytes));
      continue;
    }
    int64_t dst_strides[HURRAY_MAX_NDIM];
    compact_strides(h.ndim, h.shape, dst_strides);
    CopyPlan plan;
    st = make_copy_plan(h.ndim, h.shape, h.strides, dst_strides, m.e.itemsize_bits / 8, &plan);
    if (st != HURRAY_OK) return st;
    copy_plan_host(plan,
                   reinterpret_cast<const void *>(reinterpret_cast<uintptr_t>(h.data) +
                                                  static_cast<uintptr_t>(h.byte_offset)),
                   dst);
  }
  return HURRAY_OK;
}

// srcs[i] on a GPU (checked): into the region of its allocation (found by
// the vendor's address range; ipc.md §10), a new one when it is the first.
int32_t group_gpu(PreparedSet *p, size_t i, RegionIndex *index, uint32_t *gpu_regions) {
  const hurray_buffer &h = p->hs[i];
  Member &m = p->members[i];
  m.copied = false;
  const GpuIpc *ipc = gpu_ipc_for(h.device.device_type);
  if (ipc == nullptr) {
    char why[256];
    std::snprintf(why, sizeof why, "%s", hurray_last_error());
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE, "srcs[%zu]: %s", i, why);
  }
  if (m.e.numel == 0 || h.data == nullptr) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "srcs[%zu]: a %s tensor without elements has no device allocation to send to "
                "another process",
                i, device_type_name(h.device.device_type));
  }
  uintptr_t base = 0;
  uint64_t bytes = 0;
  int32_t st = ipc->address_range == nullptr ? HURRAY_ERR_UNSUPPORTED_DEVICE
                                             : ipc->address_range(h.device, h.data, &base, &bytes);
  if (st != HURRAY_OK) {
    char why[256];
    std::snprintf(why, sizeof why, "%s", hurray_last_error());
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "srcs[%zu]: the %s allocation holding its data (%p) cannot be found: %s", i,
                device_type_name(h.device.device_type), h.data, why);
  }
  // Every byte it touches lies in that allocation (what a receiver checks).
  const uintptr_t data = reinterpret_cast<uintptr_t>(h.data);
  const uint64_t off = data - base;
  if (data < base || off > bytes ||
      (m.e.lowest < 0 && uint64_t{0} - static_cast<uint64_t>(m.e.lowest) > off) ||
      (m.e.highest > 0 && static_cast<uint64_t>(m.e.highest) > bytes - off) ||
      bytes > static_cast<uint64_t>(INT64_MAX)) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "srcs[%zu]: this %s tensor's elements do not lie in the one allocation holding "
                "its data (%" PRIu64 " bytes at 0x%" PRIxPTR ")",
                i, device_type_name(h.device.device_type), bytes, base);
  }
  bool found = false;
  uint32_t *slot = index->find(reinterpret_cast<const MemfdBlock *>(base), &found);
  if (!found) {
    *slot = p->n_regions;
    Region &g = p->regions[p->n_regions++];
    g = Region{};
    g.gpu = true;
    g.base = base;
    g.bytes = bytes;
    g.device = h.device;
    ++*gpu_regions;
  }
  Region &g = p->regions[*slot];
  if (g.device.device_type != h.device.device_type || g.device.device_id != h.device.device_id) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "srcs[%zu] is on %s %d, but its allocation (at 0x%" PRIxPTR
                ") is one an earlier handle has on %s %d",
                i, device_type_name(h.device.device_type), static_cast<int>(h.device.device_id),
                base, device_type_name(g.device.device_type), static_cast<int>(g.device.device_id));
  }
  m.region = *slot;
  m.gpu_offset = off;
  ++g.count;
  return HURRAY_OK;
}

// GPU region r: the handle of its whole allocation (a bundle of its
// handles' references), exported as a single message of its kind
// (prepare_gpu_set_region), that message's descriptor at byte `desc_at`
// of the set's and its fds at fds[fd_at]; its record. p->gx_kind: its kind.
int32_t export_gpu_region(PreparedSet *p, size_t n, uint32_t r, uint64_t conn, uint64_t desc_at,
                          size_t fd_at) {
  Region &g = p->regions[r];
  g.bundle =
      static_cast<Bundle *>(std::malloc(sizeof(Bundle) + sizeof(hurray_buffer) * (g.count - 1)));
  if (g.bundle == nullptr) {
    return fail(HURRAY_ERR_OUT_OF_MEMORY, "allocating a set region's bookkeeping failed");
  }
  g.bundle->n = 0;
  size_t member = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!p->members[i].copied && p->members[i].region == r) {
      if (g.bundle->n == 0) member = i;
      g.bundle->hs[g.bundle->n++] = p->hs[i];
    }
  }
  const int64_t len = static_cast<int64_t>(g.bytes);
  g.held = compact_handle(&bundle_release, g.bundle, reinterpret_cast<void *>(g.base), g.device,
                          hurray_dtype{kDLUInt, 8, 1}, 1, &len, g.bundle->dims, 0);
  int32_t st = prepare_gpu_set_region(p->hs[member], g.held, conn, &g.gx);
  if (st != HURRAY_OK) {
    char why[512];
    std::snprintf(why, sizeof why, "%s", hurray_last_error());
    return fail(st, "srcs[%zu] (a set region of %" PRIu32 " handles): %s", member, g.count, why);
  }
  g.gpu_made = true;
  WireDesc d;
  const uint32_t kind =
      decode_descriptor(g.gx.msg.bytes, g.gx.msg.size, g.gx.msg.nfds, &d) == HURRAY_OK ? d.kind : 0;
  if (kind == 0 || g.gx.msg.size != wire_size(kind, 1) || g.gx.msg.size > kSetGpuDescMax) {
    return fail(HURRAY_ERR_IPC, "srcs[%zu]: its region's descriptor is not one a set carries",
                member);
  }
  // The message's fds now (closed by the set's abort or discard).
  for (uint32_t f = 0; f < g.gx.msg.nfds; ++f) {
    p->msg->fds[fd_at + f] = g.gx.msg.fds[f];
    g.gx.msg.fds[f] = -1;
  }
  g.gx.msg.nfds = 0;
  std::memcpy(p->msg->bytes + desc_at, g.gx.msg.bytes, g.gx.msg.size);
  const SetRegion sr{kind,
                     0u,
                     desc_at,
                     g.gx.msg.size,
                     g.count,
                     0,
                     0,
                     0,
                     0,
                     0,
                     hurray_device{HURRAY_DEVICE_CPU, 0}};
  encode_set_region(sr, r, p->msg->bytes);
  p->gx_kind = kind;
  return HURRAY_OK;
}

// Checks every handle, groups them into regions, makes the copies, the fds,
// the watches and the descriptor. On failure everything made is undone,
// *failed names the handle (or HURRAY_BATCH_NO_INDEX) and p->hs is
// untouched.
int32_t prepare_set(PreparedSet *p, size_t n, uint32_t options, uint64_t conn, size_t *failed) {
  if ((options & ~kKnownOptions) != 0) {
    return fail(HURRAY_ERR_INVALID_ARGUMENT, "options 0x%" PRIx32 " has unknown bits", options);
  }
  p->members = static_cast<Member *>(std::malloc(sizeof(Member) * n));
  p->regions = static_cast<Region *>(std::malloc(sizeof(Region) * (n + 1)));
  size_t cap = 16;
  while (cap < 2 * n) cap *= 2;
  void *index_mem = std::calloc(cap, sizeof(void *) + sizeof(uint32_t));
  if (p->members == nullptr || p->regions == nullptr || index_mem == nullptr) {
    std::free(index_mem);
    return fail(HURRAY_ERR_OUT_OF_MEMORY, "allocating the bookkeeping of a %zu-handle set", n);
  }
  void *gpu_index_mem = std::calloc(cap, sizeof(void *) + sizeof(uint32_t));
  if (gpu_index_mem == nullptr) {
    std::free(index_mem);
    return fail(HURRAY_ERR_OUT_OF_MEMORY, "allocating the bookkeeping of a %zu-handle set", n);
  }
  RegionIndex index{
      static_cast<const MemfdBlock **>(index_mem),
      reinterpret_cast<uint32_t *>(static_cast<char *>(index_mem) + cap * sizeof(void *)), cap};
  // GPU allocations by base address (one address space: UVA).
  RegionIndex gpu_index{
      static_cast<const MemfdBlock **>(gpu_index_mem),
      reinterpret_cast<uint32_t *>(static_cast<char *>(gpu_index_mem) + cap * sizeof(void *)), cap};
  uint32_t gpu_regions = 0;
  uint64_t copy_total = 0;
  bool any_copy = false, copy_read_only = true;
  uint32_t copies = 0;
  int32_t st = HURRAY_OK;
  for (size_t i = 0; i < n && st == HURRAY_OK; ++i) {
    Member &m = p->members[i];
    const hurray_buffer &h = p->hs[i];
    char who[32];
    std::snprintf(who, sizeof who, "srcs[%zu]", i);
    st = check_handle(&h, who, &m.e);
    if (st != HURRAY_OK) {
      *failed = i;
      break;
    }
    if (h.device.device_type != HURRAY_DEVICE_CPU) {
      st = group_gpu(p, i, &gpu_index, &gpu_regions);
      if (st != HURRAY_OK) {
        *failed = i;
        break;
      }
      continue;
    }
    const MemfdBlock *b = memfd_block_of(h);
    m.copied = b == nullptr || !within_mapping(h, m.e, *b);
    if (!m.copied) {
      bool found = false;
      uint32_t *slot = index.find(b, &found);
      if (!found) {
        *slot = p->n_regions;
        Region &g = p->regions[p->n_regions++];
        g = Region{};
        g.block = b;
        g.read_only = true;
      }
      Region &g = p->regions[*slot];
      m.region = *slot;
      ++g.count;
      g.read_only = g.read_only && (h.flags & HURRAY_FLAG_READ_ONLY) != 0;
      continue;
    }
    if ((options & HURRAY_IPC_ZERO_COPY_ONLY) != 0) {
      *failed = i;
      st = fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "srcs[%zu]: HURRAY_IPC_ZERO_COPY_ONLY: this CPU memory is not shareable (allocate "
                "it with hurray_alloc and HURRAY_ALLOC_SHAREABLE, or send without the option to "
                "copy it once)",
                i);
      break;
    }
    if (!m.e.contiguous && m.e.itemsize_bits % 8 != 0) {
      *failed = i;
      st = fail(HURRAY_ERR_UNSUPPORTED_DTYPE,
                "srcs[%zu]: sending a non-contiguous tensor of packed %lld-bit elements needs a "
                "copy, which is not supported; make it contiguous first",
                i, static_cast<long long>(m.e.itemsize_bits));
      break;
    }
    m.copy_bytes = m.e.contiguous ? static_cast<uint64_t>(m.e.highest - m.e.lowest)
                                  : static_cast<uint64_t>(m.e.numel) *
                                        static_cast<uint64_t>(m.e.itemsize_bits / 8);
    const uint64_t start = (copy_total + kCopyAlign - 1) / kCopyAlign * kCopyAlign;
    if (m.copy_bytes > (uint64_t{1} << 62) - start) {
      *failed = i;
      st = fail(HURRAY_ERR_OVERFLOW, "srcs[%zu]: the set's copies pass 2^62 bytes", i);
      break;
    }
    m.copy_offset = start;
    copy_total = start + m.copy_bytes;
    any_copy = true;
    ++copies;
    copy_read_only = copy_read_only && (h.flags & HURRAY_FLAG_READ_ONLY) != 0;
  }
  std::free(index_mem);
  std::free(gpu_index_mem);
  if (st != HURRAY_OK) return st;
  if (any_copy) {
    st = make_copies(p, n, copy_total);
    if (st != HURRAY_OK) {
      abort_set(p);
      return st;
    }
    const uint32_t r = p->n_regions++;
    p->regions[r] = Region{};
    p->regions[r].block = static_cast<const MemfdBlock *>(p->copy.user_data);
    p->regions[r].count = copies;
    p->regions[r].read_only = copy_read_only;
    for (size_t i = 0; i < n; ++i) {
      if (p->members[i].copied) p->members[i].region = r;
    }
  }

  // The descriptor's size, then the message.
  // GPU regions' descriptors and fds are counted at their largest (kind 5:
  // 272 bytes, 2 fds) and the message shrunk to what they took.
  uint64_t size = kSetHeaderSize + uint64_t{kSetRegionSize} * p->n_regions;
  for (size_t i = 0; i < n; ++i) size += set_entry_size(p->hs[i].ndim);
  const uint64_t entries_end = size;
  size += uint64_t{kSetGpuDescMax} * gpu_regions;
  const size_t nfds = size_t{kSetFdsPerRegion} * p->n_regions;
  p->msg = new_set_message(static_cast<size_t>(size), nfds);
  if (p->msg == nullptr) {
    abort_set(p);
    return HURRAY_ERR_OUT_OF_MEMORY;
  }

  // The descriptor, before any watch exists: what it reads of the handles
  // and blocks then happens before their release on the watcher's thread
  // as a thread checker sees it (the kernel's order, end of file only after
  // the write ends close, is invisible to one; watcher.h).
  uint8_t *at = p->msg->bytes + kSetHeaderSize + size_t{kSetRegionSize} * p->n_regions;
  int64_t compact[HURRAY_MAX_NDIM];
  for (size_t i = 0; i < n; ++i) {
    const hurray_buffer &h = p->hs[i];
    const Member &m = p->members[i];
    const Region &g = p->regions[m.region];
    SetEntry e;
    e.region = m.region;
    e.dtype = h.dtype;
    e.ndim = h.ndim;
    e.shape = h.shape;
    e.device = h.device;
    if (g.gpu) {
      e.flags = h.flags;
      e.byte_offset = h.byte_offset;
      e.data_offset = m.gpu_offset;
      e.strides = h.strides;
      encode_set_entry(e, at);
      at += set_entry_size(h.ndim);
      continue;
    }
    const MemfdBlock &b = *g.block;
    if (m.copied) {
      compact_strides(h.ndim, h.shape, compact);
      e.flags =
          HURRAY_FLAG_IS_COPIED | (h.flags & (HURRAY_FLAG_READ_ONLY | HURRAY_FLAG_SUBBYTE_PADDED));
      e.byte_offset = 0;
      e.data_offset = b.map_file_offset + m.copy_offset;
      e.strides = compact;
    } else {
      e.flags = h.flags;
      e.byte_offset = h.byte_offset;
      e.data_offset = m.e.numel == 0 ? b.map_file_offset
                                     : b.map_file_offset + (reinterpret_cast<uintptr_t>(h.data) -
                                                            reinterpret_cast<uintptr_t>(b.map));
      e.strides = h.strides;
    }
    encode_set_entry(e, at);
    at += set_entry_size(h.ndim);
  }
  // Each region: its fds and its watch, which holds the region's handles;
  // its record; a GPU region's descriptor after the entries.
  uint64_t desc_at = entries_end;
  size_t fd_at = 0;
  for (uint32_t r = 0; r < p->n_regions; ++r) {
    Region &g = p->regions[r];
    if (g.gpu) {
      st = export_gpu_region(p, n, r, conn, desc_at, fd_at);
      if (st != HURRAY_OK) {
        abort_set(p);
        return st;
      }
      desc_at += g.gx.msg.size;
      fd_at += wire_fds(p->gx_kind);
      continue;
    }
    const SetRegion sr{kKindCpuMemfd,
                       g.read_only ? kSetRegionReadOnly : 0u,
                       g.block->map_file_offset,
                       g.block->map_length,
                       g.count,
                       0,
                       0,
                       0,
                       0,
                       0,
                       hurray_device{HURRAY_DEVICE_CPU, 0}};
    encode_set_region(sr, r, p->msg->bytes);
    const bool is_copy = p->has_copy && r + 1 == p->n_regions;
    if (is_copy) {
      g.held = p->copy;
    } else if (g.count == 1) {
      for (size_t i = 0; i < n; ++i) {
        if (!p->members[i].copied && p->members[i].region == r) g.held = p->hs[i];
      }
    } else {
      g.bundle = static_cast<Bundle *>(
          std::malloc(sizeof(Bundle) + sizeof(hurray_buffer) * (g.count - 1)));
      if (g.bundle == nullptr) {
        abort_set(p);
        return fail(HURRAY_ERR_OUT_OF_MEMORY, "allocating a set region's bookkeeping failed");
      }
      g.bundle->n = 0;
      for (size_t i = 0; i < n; ++i) {
        if (!p->members[i].copied && p->members[i].region == r) {
          g.bundle->hs[g.bundle->n++] = p->hs[i];
        }
      }
      g.held = g.bundle->hs[0];
      g.held.release_fn = &bundle_release;
      g.held.user_data = g.bundle;
    }
    int pipe_fds[2];
    if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
      st = errno_fail("pipe2");
      abort_set(p);
      return st;
    }
    int memfd;
    if (g.read_only) {
      char path[40];
      std::snprintf(path, sizeof path, "/proc/self/fd/%d", g.block->memfd);
      memfd = open(path, O_RDONLY | O_CLOEXEC);
    } else {
      memfd = fcntl(g.block->memfd, F_DUPFD_CLOEXEC, 0);
    }
    if (memfd < 0) {
      st = errno_fail(g.read_only ? "open(/proc/self/fd/N, O_RDONLY) of the memfd (a read-only "
                                    "region is sent read-only; is /proc mounted?)"
                                  : "fcntl(F_DUPFD_CLOEXEC) of the memfd");
      close(pipe_fds[0]);
      close(pipe_fds[1]);
      abort_set(p);
      return st;
    }
    p->msg->fds[fd_at] = memfd;
    p->msg->fds[fd_at + 1] = pipe_fds[1];
    fd_at += kSetFdsPerRegion;
    g.watch = watch_export(pipe_fds[0], g.held, &st);  // closes pipe_fds[0] on failure
    if (g.watch == nullptr) {
      abort_set(p);
      return st;
    }
  }
  // The header, with what the GPU regions took.
  p->msg->size = static_cast<size_t>(desc_at);
  p->msg->nfds = fd_at;
  const SetHeader hd{static_cast<uint32_t>(desc_at), static_cast<uint32_t>(n), p->n_regions,
                     static_cast<uint32_t>(fd_at)};
  encode_set_header(hd, p->msg->bytes);

  return HURRAY_OK;
}

// The export happened: the references live on in the watches (the copied
// handles are released now: their copies went).
void commit_set(PreparedSet *p, size_t n) {
  for (uint32_t r = 0; r < p->n_regions; ++r) {
    Region &g = p->regions[r];
    g.bundle = nullptr;  // the watch's
    if (!g.gpu) continue;
    // The pool's fd went on this connection (pool_peers.h).
    if (g.gx.pool_conn != 0) mark_pool_sent(g.gx.pool_conn, g.gx.pool_id);
    // A forwarded region: the message holds the original sender's
    // reference, the region's handles are done.
    if (g.gx.forwarded) (void)hurray_buffer_release(&g.held);
  }
  p->has_copy = false;
  for (size_t i = 0; i < n; ++i) {
    if (p->members[i].copied) {
      count_ipc_copy();
      (void)hurray_buffer_release(&p->hs[i]);
    } else {
      clear(&p->hs[i]);
    }
  }
}

}  // namespace

// The export of srcs[0..n) as one prepared message; on success *msg is the
// message and srcs are consumed; `send`, when given, runs on the message
// before the commit and its failure undoes the export.
int32_t export_set(hurray_buffer *srcs, size_t n, uint32_t options, size_t *failed_index,
                   const char *name, int32_t (*send)(const hurray_ipc_set_message &, void *),
                   void *ctx, hurray_ipc_set_message **msg, uint64_t conn) {
  size_t failed = HURRAY_BATCH_NO_INDEX;
  auto done = [&](int32_t st) {
    if (st != HURRAY_OK && failed_index != nullptr) *failed_index = failed;
    return st;
  };
  if (n == 0)
    return done(
        fail(HURRAY_ERR_INVALID_ARGUMENT, "%s: n is 0 (a set has at least one handle)", name));
  if (srcs == nullptr) return done(fail(HURRAY_ERR_INVALID_ARGUMENT, "%s: srcs is NULL", name));
  if (n > HURRAY_IPC_SET_MAX_HANDLES) {
    return done(fail(HURRAY_ERR_INVALID_ARGUMENT,
                     "%s: n is %zu (at most HURRAY_IPC_SET_MAX_HANDLES, %d)", name, n,
                     HURRAY_IPC_SET_MAX_HANDLES));
  }
  PreparedSet p;
  p.hs = static_cast<hurray_buffer *>(std::malloc((sizeof(hurray_buffer) + 1) * n));
  if (p.hs == nullptr) {
    return done(
        fail(HURRAY_ERR_OUT_OF_MEMORY, "allocating the bookkeeping of a %zu-handle set", n));
  }
  bool *was_tracked = reinterpret_cast<bool *>(p.hs + n);
  // Tracked handles (checking mode) are taken out of the checker first, as
  // every consuming step does; a failure below tracks them again.
  int32_t st = HURRAY_OK;
  for (size_t i = 0; i < n; ++i) {
    was_tracked[i] = false;
    if (st != HURRAY_OK || !check::is_tracked(&srcs[i])) {
      p.hs[i] = srcs[i];
      continue;
    }
    st = check::consume(
        &srcs[i], name,
        [](hurray_buffer *inner, void *ctx2) {
          *static_cast<hurray_buffer *>(ctx2) = *inner;
          clear(inner);
          return static_cast<int32_t>(HURRAY_OK);
        },
        &p.hs[i], nullptr, 0);
    if (st != HURRAY_OK) {
      failed = i;
    } else {
      was_tracked[i] = true;
    }
  }
  if (st == HURRAY_OK) st = prepare_set(&p, n, options, conn, &failed);
  if (st == HURRAY_OK && send != nullptr) {
    st = send(*p.msg, ctx);
    if (st != HURRAY_OK) abort_set(&p);
  }
  if (st != HURRAY_OK) {
    // Nothing consumed: the tracked ones go back under new records.
    for (size_t i = 0; i < n; ++i) {
      if (was_tracked[i]) {
        srcs[i] = p.hs[i];
        check::track(&srcs[i], 1, name);
      }
    }
    free_prepared(&p);
    std::free(p.hs);
    return done(st);
  }
  commit_set(&p, n);
  for (size_t i = 0; i < n; ++i) clear(&srcs[i]);
  *msg = p.msg;
  free_prepared(&p);
  std::free(p.hs);
  return HURRAY_OK;
}

namespace {

// GPU region r (decoded, g) of a set: its descriptor imported as one
// message of its kind (import_gpu: the device by UUID, one open, the wait
// on the sender's event, the same-process return), its fds taken from
// fds[g.fd_at..] (-1 there on success; the caller's to close on failure).
// *out: the handle of the whole allocation.
int32_t import_gpu_region(const uint8_t *bytes, const SetRegion &g, uint32_t r, int32_t *fds,
                          uint64_t conn, hurray_buffer *out) {
  hurray_ipc_message m;
  std::memset(&m, 0, sizeof m);
  std::memcpy(m.bytes, bytes + g.desc_at, g.desc_size);
  m.size = g.desc_size;
  m.nfds = wire_fds(g.kind);
  for (uint32_t i = 0; i < HURRAY_IPC_MAX_FDS; ++i) m.fds[i] = i < m.nfds ? fds[g.fd_at + i] : -1;
  WireDesc d;
  int32_t st = decode_descriptor(m.bytes, m.size, m.nfds, &d);
  if (st == HURRAY_OK) st = import_gpu(d, &m, nullptr, conn, out);
  if (st != HURRAY_OK) {
    char why[512];
    std::snprintf(why, sizeof why, "%s", hurray_last_error());
    return fail(st, "set entry %" PRIu32 " (region %" PRIu32 ", %" PRIu32 " handles): %s", g.first,
                r, g.entries, why);
  }
  // import_gpu took what it keeps and closed the rest.
  for (uint32_t i = 0; i < wire_fds(g.kind); ++i) fds[g.fd_at + i] = -1;
  return HURRAY_OK;
}

}  // namespace

int32_t import_set(const uint8_t *bytes, size_t size, int32_t *fds, size_t nfds, hurray_buffer *out,
                   size_t capacity, size_t *count, uint64_t conn) {
  auto refuse = [&](int32_t st) {
    if (fds != nullptr) close_fds_once(fds, nfds);
    return st;
  };
  if (fds == nullptr && nfds > 0) {
    return fail(HURRAY_ERR_INVALID_ARGUMENT, "fds is NULL while nfds is %zu", nfds);
  }
  if (count == nullptr) return refuse(fail(HURRAY_ERR_INVALID_ARGUMENT, "count is NULL"));
  if (bytes == nullptr) return refuse(fail(HURRAY_ERR_INVALID_ARGUMENT, "bytes is NULL"));
  if (out == nullptr && capacity > 0) {
    return refuse(fail(HURRAY_ERR_INVALID_ARGUMENT, "out is NULL while capacity is %zu", capacity));
  }
  if (nfds > HURRAY_IPC_SET_MAX_FDS) {
    return refuse(fail(HURRAY_ERR_INVALID_ARGUMENT,
                       "nfds is %zu (at most HURRAY_IPC_SET_MAX_FDS, %d)", nfds,
                       HURRAY_IPC_SET_MAX_FDS));
  }
  // Kept fds never pass to programs this process starts (ipc.md §4).
  for (size_t i = 0; i < nfds; ++i) {
    if (fds[i] >= 0) (void)fcntl(fds[i], F_SETFD, FD_CLOEXEC);
  }
  SetHeader h;
  int32_t st = decode_set_header(bytes, size, true, &h);
  if (st != HURRAY_OK) return refuse(st);
  if (h.n_entries > capacity) {
    *count = h.n_entries;
    return refuse(fail(HURRAY_ERR_INVALID_ARGUMENT,
                       "the set has %" PRIu32 " handles, out has room for %zu (*count says how "
                       "many; every fd was closed)",
                       h.n_entries, capacity));
  }
  // Bookkeeping: regions, entry offsets, the regions' handles (one per
  // region, then one share per entry).
  const size_t need = sizeof(SetRegion) * h.n_regions + sizeof(uint32_t) * h.n_entries +
                      sizeof(hurray_buffer) * (h.n_regions + h.n_entries) +
                      sizeof(uint32_t) * h.n_regions;
  void *mem = std::malloc(need);
  if (mem == nullptr) {
    return refuse(fail(HURRAY_ERR_OUT_OF_MEMORY, "allocating %zu bytes to import a set", need));
  }
  auto *regions = static_cast<SetRegion *>(mem);
  auto *shares = reinterpret_cast<hurray_buffer *>(regions + h.n_regions);
  auto *bases = shares + h.n_entries;
  auto *entry_at = reinterpret_cast<uint32_t *>(bases + h.n_regions);
  auto *next = entry_at + h.n_entries;  // per region: its next share
  auto cleanup = [&](int32_t s) {
    std::free(mem);
    return s;
  };
  st = decode_set(bytes, size, nfds, h, regions, entry_at);
  if (st != HURRAY_OK) return cleanup(refuse(st));
  // Each fd once, each region's memfd and lifetime fd as single import
  // checks them, the regions' bytes together within the map limit.
  {
    int32_t *sorted = reinterpret_cast<int32_t *>(shares);  // scratch, enough room
    std::memcpy(sorted, fds, sizeof(int32_t) * nfds);
    std::sort(sorted, sorted + nfds);
    for (size_t i = 1; i < nfds; ++i) {
      if (sorted[i] == sorted[i - 1]) {
        return cleanup(refuse(fail(
            HURRAY_ERR_IPC, "the message names fd %d twice (each region has its own)", sorted[i])));
      }
    }
  }
  bool from_env = false;
  const uint64_t limit = map_limit(&from_env);
  uint64_t total = 0;
  for (uint32_t r = 0; r < h.n_regions; ++r) {
    // A GPU region's fds are checked by its single import (import_gpu).
    if (regions[r].kind != kKindCpuMemfd) continue;
    const uint32_t f = regions[r].fd_at;
    WireDesc d;
    d.flags = (regions[r].flags & kSetRegionReadOnly) != 0 ? HURRAY_FLAG_READ_ONLY : 0;
    d.region_offset = regions[r].offset;
    d.region_length = regions[r].length;
    st = check_memfd(fds[f], f, d, limit, from_env);
    if (st == HURRAY_OK) st = check_lifetime_fd(fds[f + 1], static_cast<int>(f + 1));
    if (st != HURRAY_OK) return cleanup(refuse(st));
    total += regions[r].length;  // each <= limit (checked), so no overflow below 2^63 * 2^17
    if (total > limit) {
      return cleanup(refuse(fail(
          HURRAY_ERR_IPC,
          "the set's regions are %" PRIu64 " bytes together by region %" PRIu32
          ", more than %s (%" PRIu64 " bytes): refused before mapping",
          total, r, from_env ? "HURRAY_IPC_MAX_BYTES" : "this machine's physical memory", limit)));
    }
  }
  // Map each region once; its handle is one byte tensor over the mapping.
  const uint64_t page = page_size();
  uint32_t mapped = 0;
  for (; mapped < h.n_regions; ++mapped) {
    const SetRegion &g = regions[mapped];
    const uint32_t f = g.fd_at;
    if (g.kind != kKindCpuMemfd) {
      st = import_gpu_region(bytes, g, mapped, fds, conn, &bases[mapped]);
      if (st != HURRAY_OK) break;
      continue;
    }
    MemfdBlock *b = new_memfd_block(1);
    if (b == nullptr) {
      st = HURRAY_ERR_OUT_OF_MEMORY;
      break;
    }
    const uint64_t map_off = g.offset / page * page;
    const uint64_t map_len = g.offset + g.length - map_off;
    const bool ro = (g.flags & kSetRegionReadOnly) != 0;
    void *p = mmap(nullptr, static_cast<size_t>(map_len), ro ? PROT_READ : PROT_READ | PROT_WRITE,
                   MAP_SHARED, fds[f], static_cast<off_t>(map_off));
    if (p == MAP_FAILED) {
      const int err = errno;
      std::free(b);
      st = fail(err == ENOMEM ? HURRAY_ERR_OUT_OF_MEMORY : HURRAY_ERR_IPC,
                "mmap of %" PRIu64 " bytes at offset %" PRIu64 " of set region %" PRIu32
                "'s memfd failed: %s",
                map_len, map_off, mapped, std::strerror(err));
      break;
    }
    b->memfd = fds[f];
    b->lifetime_fd = fds[f + 1];
    b->map = p;
    b->map_length = map_len;
    b->map_file_offset = map_off;
    const int64_t len = static_cast<int64_t>(map_len);
    bases[mapped] = compact_handle(&memfd_release, b, p, hurray_device{HURRAY_DEVICE_CPU, 0},
                                   hurray_dtype{kDLUInt, 8, 1}, 1, &len, b->dims,
                                   ro ? HURRAY_FLAG_READ_ONLY : 0);
    fds[f] = fds[f + 1] = -1;  // the block's now
  }
  if (st != HURRAY_OK) {
    for (uint32_t r = 0; r < mapped; ++r) (void)hurray_buffer_release(&bases[r]);
    return cleanup(refuse(st));
  }
  // One count per region: its handle shared as many ways as it has entries.
  uint32_t at = 0;
  uint32_t shared = 0;
  for (; shared < h.n_regions; ++shared) {
    next[shared] = at;
    st = share_untracked(&bases[shared], regions[shared].entries, shares + at);
    if (st != HURRAY_OK) break;
    at += regions[shared].entries;
  }
  if (st != HURRAY_OK) {
    for (uint32_t i = 0; i < at; ++i) (void)hurray_buffer_release(&shares[i]);
    for (uint32_t r = shared; r < h.n_regions; ++r) (void)hurray_buffer_release(&bases[r]);
    return cleanup(refuse(st));
  }
  // Each entry a view of one share of its region.
  uint32_t made = 0;
  for (; made < h.n_entries; ++made) {
    WireDesc d;
    uint32_t r;
    read_set_entry(bytes, entry_at[made], regions, &d, &r);
    const uint64_t map_off = regions[r].offset / page * page;
    const hurray_view_desc v{(d.data_offset - map_off) + d.byte_offset,
                             d.flags,
                             hurray_device{0, 0},
                             d.dtype,
                             d.ndim,
                             d.ndim > 0 ? d.shape : nullptr,
                             d.ndim > 0 ? d.strides : nullptr};
    st = view_with_flags(&shares[next[r]], v, &out[made]);
    if (st != HURRAY_OK) break;
    ++next[r];
  }
  if (st != HURRAY_OK) {
    for (uint32_t i = 0; i < made; ++i) (void)hurray_buffer_release(&out[i]);
    for (uint32_t i = 0; i < h.n_entries; ++i) (void)hurray_buffer_release(&shares[i]);
    return cleanup(st);
  }
  *count = h.n_entries;
  return cleanup(HURRAY_OK);
}

}  // namespace hurray::detail

extern "C" {

HURRAY_API int32_t hurray_ipc_export_set(hurray_buffer *srcs, size_t n, uint32_t options,
                                         hurray_ipc_set_message **out, size_t *failed_index) {
  using namespace hurray::detail;
  if (out == nullptr) {
    if (failed_index != nullptr) *failed_index = HURRAY_BATCH_NO_INDEX;
    return fail(HURRAY_ERR_INVALID_ARGUMENT, "hurray_ipc_export_set: out is NULL");
  }
  return export_set(srcs, n, options, failed_index, "hurray_ipc_export_set", nullptr, nullptr, out);
}

HURRAY_API int32_t hurray_ipc_set_message_parts(const hurray_ipc_set_message *m,
                                                const uint8_t **bytes, size_t *size,
                                                const int32_t **fds, size_t *nfds) {
  using namespace hurray::detail;
  if (m == nullptr) return fail(HURRAY_ERR_INVALID_ARGUMENT, "m is NULL");
  if (bytes == nullptr || size == nullptr || fds == nullptr || nfds == nullptr) {
    return fail(HURRAY_ERR_INVALID_ARGUMENT, "bytes, size, fds and nfds must all be non-NULL");
  }
  *bytes = m->bytes;
  *size = m->size;
  *fds = m->fds;
  *nfds = m->nfds;
  return HURRAY_OK;
}

HURRAY_API int32_t hurray_ipc_set_message_discard(hurray_ipc_set_message *m) {
  using namespace hurray::detail;
  if (m == nullptr) return HURRAY_OK;
  close_fds_once(m->fds, m->nfds);
  std::free(m);
  return HURRAY_OK;
}

HURRAY_API int32_t hurray_ipc_import_set(const uint8_t *bytes, size_t size, int32_t *fds,
                                         size_t nfds, hurray_buffer *out, size_t capacity,
                                         size_t *count) {
  using namespace hurray::detail;
  const int32_t st = import_set(bytes, size, fds, nfds, out, capacity, count);
  return check::produced(st, out, st == HURRAY_OK ? *count : 0, "hurray_ipc_import_set");
}

}  // extern "C"
