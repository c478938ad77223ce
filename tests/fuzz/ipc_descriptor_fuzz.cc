// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: hostile cross-process descriptors (docs/impl/ipc.md §3)
// through the decoder and, when it accepts one, through hurray_ipc_import
// with real fds (docs/impl/fuzzing.md, "Cross-process descriptors").
//
// Input: byte 0 is the number of fds the message claims (low 3 bits; 2 is
// the valid count) and, in bit 3, whether the memfd is made one page too
// short; the rest is the descriptor. The target checks, and aborts when one
// fails:
//  - the decoder never reads past the input (ASan: the bytes are copied into
//    a heap block of exactly their size);
//  - an accepted descriptor re-encodes to exactly the input (every byte of
//    wire version 2 has one meaning) and its elements lie inside its region,
//    recomputed here in 128-bit arithmetic;
//  - hurray_ipc_import of a refused descriptor, or of an accepted one whose
//    memfd is too short, fails, closes every fd and maps nothing; of an
//    accepted one with a memfd that fits, succeeds and the handle validates;
//    its release closes everything again;
//  - an accepted GPU descriptor (kinds 2 to 6: ipc §6.1) has a UUID not
//    all zero, a sender pid in 1..2^31-1, no GPU flag but bit 0, an event
//    handle not all zero with bit 0 and all zero without it, for kind
//    2 an all-zero handle, and for kinds 5 and 6 a pool number > 0 (0
//    for the others): the decoder's checks of the GPU part, restated;
//  - GPU kinds decode like the others; their import
//    (fds[0] a pipe's write end, as the kind wants; kind 2's fds[1] another
//    one) is refused with every fd closed: no GPU memory can be opened (no
//    driver in the fuzz stage, so the driver steps of the import are not
//    reached here; the fake-driver probe tests cover them).
//
// Sets (ipc.md §10), when bit 4 of byte 0 is set: byte 1 is the number of
// fds the message carries, the rest the set descriptor. The decoder reads
// nothing outside it; an accepted one re-encodes to exactly its bytes and
// each entry's elements lie in its region; hurray_ipc_import_set with real
// fds (per region a sealed memfd of its size, region 0's one page short
// when bit 3 asks, and a pipe's write end) succeeds exactly when the
// descriptor is accepted, the fd count is its own and the memfds fit; on
// failure every fd is closed and nothing written; the handles validate and
// their releases close every fd.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fuzz_check.h"
#include "hurray/hurray.h"
#include "ipc/set_wire.h"
#include "ipc/wire.h"

namespace {

using hurray::detail::WireDesc;

bool fd_open(int fd) { return fcntl(fd, F_GETFD) != -1; }

// The elements' byte span relative to data, for whole-byte elements, as
// spec §3.3 computes it (only called for accepted descriptors, whose
// extents fit in 64 bits when they have elements, so nothing here
// overflows 128 bits).
void span(const WireDesc &d, __int128 *lo, __int128 *hi, bool *empty) {
  const __int128 elem = static_cast<__int128>(d.dtype.bits) * d.dtype.lanes / 8;
  __int128 low = d.byte_offset, high = d.byte_offset;
  *empty = false;
  for (int32_t i = 0; i < d.ndim; ++i) *empty = *empty || d.shape[i] == 0;
  if (*empty) return;  // no byte touched, and strides are then unbounded
  for (int32_t i = 0; i < d.ndim; ++i) {
    const __int128 step = static_cast<__int128>(d.shape[i] - 1) * d.strides[i] * elem;
    if (step < 0)
      low += step;
    else
      high += step;
  }
  *lo = low;
  *hi = high + elem;
}

// The set form (bit 4 of byte 0).
int fuzz_set(const uint8_t *data, size_t size) {
  using namespace hurray::detail;
  if (size < 2 || size > 2 + 65536) return 0;
  const size_t nfds = data[1];
  const bool short_memfd = (data[0] & 8u) != 0;
  std::vector<uint8_t> bytes(data + 2, data + size);  // exactly the input's size
  SetHeader h;
  int32_t st = decode_set_header(bytes.data(), bytes.size(), true, &h);
  std::vector<SetRegion> regions;
  std::vector<uint32_t> at;
  if (st == HURRAY_OK) {
    regions.resize(h.n_regions);
    at.resize(h.n_entries);
    st = decode_set(bytes.data(), bytes.size(), nfds, h, regions.data(), at.data());
  }
  uint64_t mapped = 0;
  if (st == HURRAY_OK) {
    std::vector<uint8_t> again(bytes.size());
    encode_set_header(h, again.data());
    for (uint32_t r = 0; r < h.n_regions; ++r) {
      // A GPU region's record names its single descriptor (decode_set put
      // the allocation's range in offset and length); the descriptor's
      // bytes were checked by decode_descriptor and are copied as they are.
      SetRegion g = regions[r];
      if (g.kind != kKindCpuMemfd) {
        FUZZ_CHECK(g.desc_at + g.desc_size <= again.size(), "GPU descriptor past the end");
        std::memcpy(again.data() + g.desc_at, bytes.data() + g.desc_at, g.desc_size);
        g.offset = g.desc_at;
        g.length = g.desc_size;
      }
      encode_set_region(g, r, again.data());
    }
    for (uint32_t i = 0; i < h.n_entries; ++i) {
      WireDesc d;
      uint32_t r;
      read_set_entry(bytes.data(), at[i], regions.data(), &d, &r);
      const SetEntry e{r,        d.flags, d.dtype,  d.ndim, d.byte_offset, d.data_offset,
                       d.device, d.shape, d.strides};
      FUZZ_CHECK(at[i] + set_entry_size(d.ndim) <= again.size(), "entry past the end");
      encode_set_entry(e, again.data() + at[i]);
      if ((static_cast<uint32_t>(d.dtype.bits) * d.dtype.lanes) % 8 == 0) {
        __int128 lo, hi;
        bool empty;
        span(d, &lo, &hi, &empty);
        const __int128 start = d.data_offset, rbeg = d.region_offset,
                       rend = static_cast<__int128>(d.region_offset) + d.region_length;
        FUZZ_CHECK(empty || (start + lo >= rbeg && start + hi <= rend),
                   "accepted set entry %u outside its region", i);
      }
    }
    FUZZ_CHECK(std::memcmp(again.data(), bytes.data(), bytes.size()) == 0,
               "an accepted set descriptor does not re-encode to itself");
    for (const SetRegion &g : regions) {
      if (g.kind == kKindCpuMemfd) mapped += g.offset + g.length;
    }
    if (mapped > (uint64_t{1} << 24)) return 0;  // keep memfds small
  }
  // The same bytes through the public import, with real fds.
  std::vector<int32_t> fds(nfds), given;
  for (size_t i = 0; i < nfds; ++i) {
    if (i % 2 == 1) {
      int p[2];
      FUZZ_CHECK(pipe2(p, O_CLOEXEC) == 0, "pipe2");
      close(p[0]);
      fds[i] = p[1];
      continue;
    }
    fds[i] = memfd_create("fuzz", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    const size_t r = i / 2;
    uint64_t len =
        st == HURRAY_OK && r < regions.size() ? regions[r].offset + regions[r].length : 4096;
    if (short_memfd && i == 0) len = len > 4096 ? len - 4096 : 0;
    FUZZ_CHECK(ftruncate(fds[i], static_cast<off_t>(len)) == 0, "ftruncate");
    FUZZ_CHECK(fcntl(fds[i], F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0, "seals");
  }
  given = fds;
  // GPU regions cannot import here (no driver in the fuzz build; their fds
  // are not a memfd and a pipe either): such a set must be refused, with
  // every fd closed, like any set that does not fit.
  bool all_cpu = true;
  for (const SetRegion &g : regions) all_cpu = all_cpu && g.kind == kKindCpuMemfd;
  const bool fits = st == HURRAY_OK && nfds == h.nfds && !short_memfd && all_cpu;
  const size_t cap = st == HURRAY_OK ? h.n_entries : 4;
  std::vector<hurray_buffer> out(cap > 0 ? cap : 1);
  size_t count = 0;
  const int32_t ist = hurray_ipc_import_set(bytes.data(), bytes.size(), fds.data(), fds.size(),
                                            out.data(), cap, &count);
  for (int32_t fd : fds) FUZZ_CHECK(fd == -1, "import_set left an fd entry %d", fd);
  if (ist == HURRAY_OK) {
    FUZZ_CHECK(fits && count == h.n_entries, "import_set accepted what the decoder refuses");
    for (size_t i = 0; i < count; ++i) {
      FUZZ_CHECK(hurray_buffer_validate(&out[i]) == HURRAY_OK, "an imported handle is invalid");
    }
    for (size_t i = 0; i < count; ++i)
      FUZZ_CHECK(hurray_buffer_release(&out[i]) == HURRAY_OK, "release");
  } else {
    FUZZ_CHECK(!fits, "a fitting accepted set was refused: status %d (%s)", ist,
               hurray_last_error());
  }
  for (int fd : given) FUZZ_CHECK(!fd_open(fd), "fd %d left open", fd);
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size >= 1 && (data[0] & 16u) != 0) return fuzz_set(data, size);
  if (size < 1 || size > 1 + HURRAY_IPC_DESCRIPTOR_MAX) return 0;
  const uint32_t nfds = data[0] & 7u;
  const bool short_memfd = (data[0] & 8u) != 0;
  std::vector<uint8_t> bytes(data + 1, data + size);  // exactly the input's size

  WireDesc d;
  const int32_t st = hurray::detail::decode_descriptor(bytes.data(), bytes.size(), nfds, &d);
  if (st == HURRAY_OK) {
    uint8_t again[HURRAY_IPC_DESCRIPTOR_MAX];
    const uint32_t n = hurray::detail::encode_descriptor(d, again);
    FUZZ_CHECK(n == bytes.size() && std::memcmp(again, bytes.data(), n) == 0,
               "an accepted descriptor does not re-encode to itself (%u vs %zu bytes)", n,
               bytes.size());
    if ((static_cast<uint32_t>(d.dtype.bits) * d.dtype.lanes) % 8 == 0) {
      __int128 lo, hi;
      bool empty;
      span(d, &lo, &hi, &empty);
      const __int128 start = d.data_offset, rbeg = d.region_offset,
                     rend = static_cast<__int128>(d.region_offset) + d.region_length;
      FUZZ_CHECK(empty || (start + lo >= rbeg && start + hi <= rend),
                 "accepted elements outside the region");
    }
    if (hurray::detail::is_gpu_ipc_kind(d.kind)) {
      bool uuid = false, event = false, handle = false;
      for (uint8_t b : d.gpu_uuid) uuid = uuid || b != 0;
      for (uint8_t b : d.gpu_event) event = event || b != 0;
      for (uint8_t b : d.gpu_handle) handle = handle || b != 0;
      const bool flagged = d.gpu_flags == hurray::detail::kGpuFlagEvent;
      FUZZ_CHECK(uuid && d.sender.pid > 0 && d.sender.pid <= 0x7fffffffu &&
                     (d.gpu_flags == 0 || flagged) && event == flagged &&
                     !(d.kind == hurray::detail::kKindCudaVmmFd && handle) &&
                     (hurray::detail::is_pool_kind(d.kind) ? d.pool_id > 0 : d.pool_id == 0),
                 "an accepted GPU part breaks ipc.md 6.1");
    }
  }

  // The same bytes through the public import, with real fds.
  const bool gpu = st == HURRAY_OK && hurray::detail::is_gpu_ipc_kind(d.kind);
  const uint64_t region_end = st == HURRAY_OK && !gpu ? d.region_offset + d.region_length : 0;
  if (region_end > (uint64_t{1} << 24)) return 0;  // keep memfds small
  hurray_ipc_message m;
  std::memset(&m, 0, sizeof m);
  m.size = static_cast<uint32_t>(bytes.size());
  if (!bytes.empty()) std::memcpy(m.bytes, bytes.data(), bytes.size());
  m.nfds = nfds > HURRAY_IPC_MAX_FDS ? HURRAY_IPC_MAX_FDS : nfds;
  int fds[HURRAY_IPC_MAX_FDS] = {-1, -1, -1, -1};
  for (uint32_t i = 0; i < m.nfds; ++i) {
    if (i == 0 && gpu) {
      int p[2];
      FUZZ_CHECK(pipe2(p, O_CLOEXEC) == 0, "pipe2");
      close(p[0]);
      fds[0] = p[1];
    } else if (i == 0) {
      fds[0] = memfd_create("fuzz", MFD_CLOEXEC | MFD_ALLOW_SEALING);
      uint64_t len = region_end > 0 ? region_end : 4096;
      if (short_memfd) len = len > 4096 ? len - 4096 : 0;
      FUZZ_CHECK(ftruncate(fds[0], static_cast<off_t>(len)) == 0, "ftruncate");
      FUZZ_CHECK(fcntl(fds[0], F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0, "seals");
    } else if (i == 1) {
      int p[2];
      FUZZ_CHECK(pipe2(p, O_CLOEXEC) == 0, "pipe2");
      close(p[0]);
      fds[1] = p[1];
    } else {
      fds[i] = dup(0);
    }
    m.fds[i] = fds[i];
  }
  const bool fits = st == HURRAY_OK && !gpu && nfds == 2 && !short_memfd;
  hurray_buffer h;
  const int32_t ist = hurray_ipc_import(&m, &h);
  FUZZ_CHECK(m.nfds == 0, "import left nfds %u", m.nfds);
  if (ist == HURRAY_OK) {
    FUZZ_CHECK(fits, "import accepted what the decoder or the fds refuse");
    FUZZ_CHECK(hurray_buffer_validate(&h) == HURRAY_OK, "imported handle does not validate");
    FUZZ_CHECK(hurray_buffer_release(&h) == HURRAY_OK, "release");
  } else {
    FUZZ_CHECK(!fits, "a fitting accepted descriptor was refused: status %d", ist);
  }
  for (int fd : fds) FUZZ_CHECK(fd < 0 || !fd_open(fd), "fd %d left open", fd);
  return 0;
}
