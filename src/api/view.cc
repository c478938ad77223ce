// SPDX-License-Identifier: Apache-2.0
// hurray_view: a handle over part of another handle's memory (spec §5.1).
//
// A view is a share block (handle/share_block.h) of count 1 whose `source`
// is the view's own description, with the consumed source's release_fn and
// user_data, and whose tail holds the view's shape and strides. So the
// view's release is share_release, the source's reference is released
// exactly once when the view's count ends, and hurray_share and the DLPack
// exports recognise an unchanged view as an unchanged share (spec §3.4):
// nothing new in the release path.
#include <cinttypes>
#include <cstdlib>
#include <cstring>
#include <new>

#include "api/view.h"
#include "checking/checking.h"
#include "common/block_cache.h"
#include "common/error.h"
#include "handle/handle.h"
#include "handle/share_block.h"

namespace hurray::detail {
namespace {

constexpr uint64_t kViewFlags = HURRAY_FLAG_READ_ONLY | HURRAY_FLAG_SUBBYTE_PADDED;

static_assert(sizeof(ShareBlock) % alignof(int64_t) == 0, "the dims follow the block");
static_assert(sizeof(hurray_view_desc) == 48 || sizeof(void *) != 8,
              "hurray_view_desc layout on 64-bit targets");

// Bytes of a view's block: the share block, then shape and strides.
inline size_t view_block_bytes(int32_t ndim) {
  return sizeof(ShareBlock) + 2 * sizeof(int64_t) * static_cast<size_t>(ndim);
}

// The view of a checked, live *src (its producer's release_fn, not the
// checker's): every check, then the block; *src is emptied only on success.
int32_t make_view(hurray_buffer *src, const hurray_view_desc &desc, hurray_buffer *out,
                  bool any_flags = false) {
  hurray_extent se;
  int32_t st = check_handle_exact(src, "src", &se);
  if (st != HURRAY_OK) return st;
  if (!any_flags && (desc.flags & ~kViewFlags) != 0) {
    return fail(HURRAY_ERR_INVALID_ARGUMENT,
                "desc.flags 0x%" PRIx64
                " has bits other than HURRAY_FLAG_READ_ONLY and HURRAY_FLAG_SUBBYTE_PADDED (a "
                "view adds only those; it keeps src's flags)",
                desc.flags);
  }
  const bool same_device = desc.device.device_type == src->device.device_type &&
                           desc.device.device_id == src->device.device_id;
  if (!same_device && (desc.device.device_type != 0 || desc.device.device_id != 0)) {
    return fail(HURRAY_ERR_INVALID_ARGUMENT,
                "desc.device is %s (%" PRId32 ") id %" PRId32 " but src is on %s (%" PRId32
                ") id %" PRId32 "; a view stays on its source's device ({0, 0} means src's)",
                device_type_name(desc.device.device_type), desc.device.device_type,
                desc.device.device_id, device_type_name(src->device.device_type),
                src->device.device_type, src->device.device_id);
  }
  const uint64_t flags = src->flags | desc.flags;
  // The exact check of spec §3 on the view's own fields, with src's device.
  // `data` is src's; the rule "data non-NULL when there are elements" is the
  // bounds check's to answer (a source without data has no elements), so a
  // placeholder stands in for a NULL data here.
  void *data_for_check = src->data != nullptr ? src->data : static_cast<void *>(&se);
  const Desc d{data_for_check,
               desc.byte_offset,
               src->device.device_type,
               src->device.device_id,
               desc.dtype,
               desc.ndim,
               desc.shape,
               desc.strides,
               flags};
  hurray_extent ve;
  st = check_desc_exact(d, "desc", /*strides_required=*/false, &ve);
  if (st != HURRAY_OK) return st;
  if (ve.numel != 0) {
    if (se.numel == 0) {
      return fail(HURRAY_ERR_INVALID_ARGUMENT,
                  "the view has %" PRId64
                  " elements but src has none (a view of a tensor without elements has none)",
                  ve.numel);
    }
    if (ve.lowest < se.lowest || ve.highest > se.highest) {
      return fail(HURRAY_ERR_INVALID_ARGUMENT,
                  "the view touches bytes [%" PRId64 ", %" PRId64
                  ") of src's data, outside the bytes src covers [%" PRId64 ", %" PRId64 ")",
                  ve.lowest, ve.highest, se.lowest, se.highest);
    }
  }

  const size_t bytes = view_block_bytes(desc.ndim);
  void *mem = bytes <= LibraryBlocks::kSize ? LibraryBlocks::get() : std::malloc(bytes);
  if (mem == nullptr) {
    return fail(HURRAY_ERR_OUT_OF_MEMORY, "allocating the %zu-byte view block failed",
                bytes < LibraryBlocks::kSize ? LibraryBlocks::kSize : bytes);
  }
  auto *b = new (mem) ShareBlock;
  b->refs.store(1, std::memory_order_relaxed);
  int64_t *dims = reinterpret_cast<int64_t *>(static_cast<char *>(mem) + sizeof(ShareBlock));
  const int32_t ndim = desc.ndim;
  if (ndim > 0) {
    std::memcpy(dims, desc.shape, sizeof(int64_t) * static_cast<size_t>(ndim));
    if (desc.strides != nullptr) {
      std::memcpy(dims + ndim, desc.strides, sizeof(int64_t) * static_cast<size_t>(ndim));
    } else {
      compact_strides(ndim, desc.shape, dims + ndim);
    }
  }
  hurray_buffer &v = b->source;
  std::memset(&v, 0, sizeof v);
  v.version = HURRAY_BUFFER_VERSION;
  v.release_fn = src->release_fn;  // the source's reference, moved here
  v.user_data = src->user_data;
  v.flags = flags;
  v.data = src->data;
  v.byte_offset = desc.byte_offset;
  v.device = src->device;
  v.dtype = desc.dtype;
  v.ndim = ndim;
  v.shape = ndim > 0 ? dims : nullptr;
  v.strides = ndim > 0 ? dims + ndim : nullptr;
  const HandleChunks h = with_owner(load_chunks(&v), &share_release, b);
  clear(src);
  store_chunks(out, h);  // out may be src
  return HURRAY_OK;
}

// A tracked source (checking mode) is viewed as the handle it stands for;
// the checker retires its record on success and the view is tracked below.
int32_t view_tracked(hurray_buffer *src, const hurray_view_desc &desc, hurray_buffer *out) {
  struct Args {
    const hurray_view_desc *desc;
    hurray_buffer *out;
  } args{&desc, out};
  return check::consume(
      src, "hurray_view",
      [](hurray_buffer *inner, void *ctx) {
        auto *a = static_cast<Args *>(ctx);
        return make_view(inner, *a->desc, a->out);
      },
      &args, out, 1);
}

}  // namespace

int32_t view_with_flags(hurray_buffer *src, const hurray_view_desc &desc, hurray_buffer *out) {
  return make_view(src, desc, out, true);
}

}  // namespace hurray::detail

extern "C" {

HURRAY_API int32_t hurray_view(hurray_buffer *src, const hurray_view_desc *desc,
                               hurray_buffer *out) {
  using namespace hurray::detail;
  if (desc == nullptr) return fail(HURRAY_ERR_INVALID_ARGUMENT, "desc is NULL");
  if (out == nullptr) return fail(HURRAY_ERR_INVALID_ARGUMENT, "out is NULL");
  const int32_t st =
      check::is_tracked(src) ? view_tracked(src, *desc, out) : make_view(src, *desc, out);
  return check::produced(st, out, 1, "hurray_view");
}

}  // extern "C"
