// SPDX-License-Identifier: Apache-2.0
// hurray.hpp - header-only C++17 layer over hurray.h (and nothing else).
//
// hurray::Buffer owns one hurray_buffer and releases it in its destructor
// (move-only). Failed C calls become hurray::Error exceptions carrying the
// status and libhurray's message; exceptions exist only on this side of the
// ABI. Ownership follows the C functions exactly (docs/impl/c-ffi.md): an
// operation that consumes the handle leaves the Buffer empty on success and
// untouched when it throws.
#ifndef HURRAY_HURRAY_HPP_
#define HURRAY_HURRAY_HPP_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "hurray/hurray.h"

namespace hurray {

// A failed libhurray call: status() is the hurray_status, what() the message.
// index() is the element a batched call (from_dlpack_n, to_dlpack*_n,
// alloc_group) failed at, or HURRAY_BATCH_NO_INDEX (every other call, and a
// batch that failed for no element's reason).
class Error : public std::runtime_error {
 public:
  Error(int32_t status, const std::string &message, std::size_t index = HURRAY_BATCH_NO_INDEX)
      : std::runtime_error(std::string(hurray_status_name(status)) + ": " + message),
        status_(status),
        index_(index) {}
  int32_t status() const noexcept { return status_; }
  std::size_t index() const noexcept { return index_; }

 private:
  int32_t status_;
  std::size_t index_;
};

// Throws hurray::Error for any status other than HURRAY_OK.
inline void check(int32_t status) {
  if (status != HURRAY_OK) throw Error(status, hurray_last_error());
}

// check for a batched call: the Error carries the failed index too.
inline void check_batch(int32_t status, std::size_t failed_index) {
  if (status != HURRAY_OK) throw Error(status, hurray_last_error(), failed_index);
}

// One tensor of Buffer::alloc_group: compact row-major `dtype` of `shape`;
// `flags` are the handle's (0, HURRAY_FLAG_READ_ONLY,
// HURRAY_FLAG_SUBBYTE_PADDED).
struct TensorDesc {
  hurray_dtype dtype;
  std::vector<int64_t> shape;
  uint64_t flags = 0;
};

// Owning pointers to DLPack tensors: the deleter calls the tensor's own
// DLPack deleter (through hurray_dlpack[_versioned]_delete).
struct DLPackVersionedDeleter {
  void operator()(DLManagedTensorVersioned *t) const noexcept {
    (void)hurray_dlpack_versioned_delete(t);
  }
};
// The same for legacy (unversioned) DLPack tensors.
struct DLPackDeleter {
  void operator()(DLManagedTensor *t) const noexcept { (void)hurray_dlpack_delete(t); }
};
using DLPackVersionedPtr = std::unique_ptr<DLManagedTensorVersioned, DLPackVersionedDeleter>;
using DLPackPtr = std::unique_ptr<DLManagedTensor, DLPackDeleter>;

// Owns one hurray_buffer and releases it in its destructor; move-only. An
// operation that consumes the handle leaves the Buffer empty on success and
// untouched when it throws hurray::Error (docs/impl/c-ffi.md).
class Buffer {
 public:
  Buffer() noexcept : h_() {}
  // Adopts a live (or empty) handle; the Buffer releases it.
  explicit Buffer(const hurray_buffer &adopt) noexcept : h_(adopt) {}
  Buffer(Buffer &&other) noexcept : h_(other.h_) { other.h_ = hurray_buffer(); }
  Buffer &operator=(Buffer &&other) noexcept {
    if (this != &other) {
      reset();
      h_ = other.h_;
      other.h_ = hurray_buffer();
    }
    return *this;
  }
  Buffer(const Buffer &) = delete;
  Buffer &operator=(const Buffer &) = delete;
  ~Buffer() { reset(); }

  // New compact memory on `device` (hurray_alloc).
  static Buffer alloc(hurray_device device, hurray_dtype dtype, const std::vector<int64_t> &shape,
                      uint64_t flags = 0) {
    hurray_buffer h;
    check(hurray_alloc(device, dtype, static_cast<int32_t>(shape.size()), shape.data(), flags, &h));
    return Buffer(h);
  }

  // Takes a DLPack tensor over (hurray_from_dlpack[_versioned]). On success
  // `t` is left empty; if this throws, `t` still owns the tensor.
  static Buffer from_dlpack(DLPackVersionedPtr &t) {
    hurray_buffer h;
    check(hurray_from_dlpack_versioned(t.get(), HURRAY_IMPORT_DEFAULT, &h));
    (void)t.release();
    return Buffer(h);
  }
  static Buffer from_dlpack(DLPackPtr &t) {
    hurray_buffer h;
    check(hurray_from_dlpack(t.get(), HURRAY_IMPORT_DEFAULT, &h));
    (void)t.release();
    return Buffer(h);
  }

  // Hands the memory to DLPack (hurray_to_dlpack[_versioned]); the Buffer is
  // empty afterwards. If this throws, the Buffer still owns its handle.
  DLPackVersionedPtr to_dlpack_versioned() {
    DLManagedTensorVersioned *t = nullptr;
    check(hurray_to_dlpack_versioned(&h_, &t));
    return DLPackVersionedPtr(t);
  }
  DLPackPtr to_dlpack() {
    DLManagedTensor *t = nullptr;
    check(hurray_to_dlpack(&h_, &t));
    return DLPackPtr(t);
  }

  // n Buffers sharing this memory (hurray_share); this Buffer is empty
  // afterwards. If this throws, this Buffer still owns its handle.
  // Throws Error(HURRAY_ERR_INVALID_ARGUMENT) for the counts hurray_share
  // refuses (n == 0, n > 2^32), the latter checked before anything is
  // allocated, and std::bad_alloc when n handles do not fit in memory.
  std::vector<Buffer> share(std::size_t n) {
    if (static_cast<std::uint64_t>(n) > (std::uint64_t{1} << 32)) {
      throw Error(HURRAY_ERR_INVALID_ARGUMENT,
                  "hurray::Buffer::share: n must be between 1 and 2^32, got " + std::to_string(n));
    }
    std::vector<hurray_buffer> raw(n);
    std::vector<Buffer> result;
    result.reserve(n);  // every allocation happens before the handle moves
    check(hurray_share(&h_, n, raw.data()));
    for (const hurray_buffer &h : raw) result.emplace_back(h);
    return result;
  }

  // A view of part of this Buffer's memory (hurray_view): `dtype`, `shape`,
  // `strides` in elements (empty: compact row-major) and `byte_offset` from
  // data(); `flags` may add HURRAY_FLAG_READ_ONLY / _SUBBYTE_PADDED. Like
  // share, it consumes this Buffer (empty afterwards; if this throws, this
  // Buffer still owns its handle). Several views of one Buffer:
  // share(n), then view each part.
  Buffer view(hurray_dtype dtype, const std::vector<int64_t> &shape,
              const std::vector<int64_t> &strides = {}, uint64_t byte_offset = 0,
              uint64_t flags = 0) {
    if (!strides.empty() && strides.size() != shape.size()) {
      throw Error(HURRAY_ERR_INVALID_ARGUMENT,
                  "hurray::Buffer::view: strides has " + std::to_string(strides.size()) +
                      " entries for " + std::to_string(shape.size()) + " dimensions");
    }
    hurray_view_desc d = hurray_view_desc();
    d.byte_offset = byte_offset;
    d.flags = flags;
    d.dtype = dtype;
    d.ndim = static_cast<int32_t>(shape.size());
    d.shape = shape.data();
    d.strides = strides.empty() ? nullptr : strides.data();
    hurray_buffer h;
    check(hurray_view(&h_, &d, &h));
    return Buffer(h);
  }

  // n tensors in one allocation of `device` (hurray_alloc_group): Buffer i
  // is descs[i]'s, at a data address that is a multiple of
  // HURRAY_GROUP_ALIGNMENT; the memory is freed once, after the last of the
  // n Buffers is released, in any order, on any thread. `flags` are
  // allocation options (HURRAY_ALLOC_SHAREABLE); `stream` as
  // hurray_alloc_group takes it. An empty `descs` gives an empty vector.
  // Throws Error (index(): the description at fault, or
  // HURRAY_BATCH_NO_INDEX; the message names it, "descs[2]..."), and
  // nothing stays allocated; std::bad_alloc before anything is allocated.
  static std::vector<Buffer> alloc_group(hurray_device device, const std::vector<TensorDesc> &descs,
                                         uint64_t flags = 0, void *stream = nullptr) {
    std::vector<hurray_tensor_desc> raw(descs.size());
    for (std::size_t i = 0; i < descs.size(); ++i) {
      raw[i].dtype = descs[i].dtype;
      raw[i].ndim = static_cast<int32_t>(descs[i].shape.size());
      raw[i].shape = descs[i].shape.data();
      raw[i].flags = descs[i].flags;
    }
    std::vector<hurray_buffer> out(raw.size());
    std::vector<Buffer> result;
    result.reserve(raw.size());  // every allocation happens before the handles exist
    std::size_t failed = HURRAY_BATCH_NO_INDEX;
    const int32_t st =
        hurray_alloc_group(device, raw.size(), raw.data(), flags, stream, out.data(), &failed);
    check_batch(st, failed);  // not one expression: `failed` is read after the call
    for (const hurray_buffer &h : out) result.emplace_back(h);
    return result;
  }

  // Imports n DLPack tensors in one call (hurray_from_dlpack[_versioned]_n),
  // all or nothing. On success every pointer in `ts` is left empty; if this
  // throws (index() is the tensor at fault; the message names it,
  // "ts[3]..."), `ts` still owns every tensor.
  static std::vector<Buffer> from_dlpack_n(std::vector<DLPackVersionedPtr> &ts) {
    std::vector<DLManagedTensorVersioned *> raw(ts.size());
    for (std::size_t i = 0; i < ts.size(); ++i) raw[i] = ts[i].get();
    return adopt_n(ts, raw, [&](hurray_buffer *out, std::size_t *failed) {
      return hurray_from_dlpack_versioned_n(raw.data(), raw.size(), HURRAY_IMPORT_DEFAULT, out,
                                            failed);
    });
  }
  static std::vector<Buffer> from_dlpack_n(std::vector<DLPackPtr> &ts) {
    std::vector<DLManagedTensor *> raw(ts.size());
    for (std::size_t i = 0; i < ts.size(); ++i) raw[i] = ts[i].get();
    return adopt_n(ts, raw, [&](hurray_buffer *out, std::size_t *failed) {
      return hurray_from_dlpack_n(raw.data(), raw.size(), HURRAY_IMPORT_DEFAULT, out, failed);
    });
  }

  // Exports n Buffers in one call (hurray_to_dlpack[_versioned]_n), all or
  // nothing: on success every Buffer is empty and tensor i is buffers[i]'s;
  // if this throws (index(): the Buffer at fault), every Buffer still owns
  // its handle.
  static std::vector<DLPackVersionedPtr> to_dlpack_versioned_n(std::vector<Buffer> &buffers) {
    return export_n<DLManagedTensorVersioned, DLPackVersionedPtr>(buffers,
                                                                  &hurray_to_dlpack_versioned_n);
  }
  static std::vector<DLPackPtr> to_dlpack_n(std::vector<Buffer> &buffers) {
    return export_n<DLManagedTensor, DLPackPtr>(buffers, &hurray_to_dlpack_n);
  }

  // A private copy on `device` (hurray_copy); this Buffer is only read.
  Buffer copy_to(hurray_device device) const {
    hurray_buffer h;
    check(hurray_copy(&h_, device, &h));
    return Buffer(h);
  }

  // Size facts (hurray_buffer_extent).
  hurray_extent extent() const {
    hurray_extent e;
    check(hurray_buffer_extent(&h_, &e));
    return e;
  }

  // Releases now; the Buffer becomes empty.
  void reset() noexcept { (void)hurray_buffer_release(&h_); }
  // Gives the handle up without releasing it; the caller now owns it.
  hurray_buffer detach() noexcept {
    hurray_buffer h = h_;
    h_ = hurray_buffer();
    return h;
  }

  explicit operator bool() const noexcept { return h_.release_fn != nullptr; }
  const hurray_buffer &get() const noexcept { return h_; }
  void *data() const noexcept { return h_.data; }
  uint64_t byte_offset() const noexcept { return h_.byte_offset; }
  int32_t ndim() const noexcept { return h_.ndim; }
  int64_t shape(int32_t k) const noexcept { return h_.shape[k]; }
  int64_t stride(int32_t k) const noexcept { return h_.strides[k]; }
  hurray_dtype dtype() const noexcept { return h_.dtype; }
  hurray_device device() const noexcept { return h_.device; }
  uint64_t flags() const noexcept { return h_.flags; }

 private:
  // Runs a batched import into n handles and hands each to a Buffer; the
  // owning pointers let go only on success. Every allocation happens first.
  template <typename Ptr, typename Raw, typename Import>
  static std::vector<Buffer> adopt_n(std::vector<Ptr> &ts, const std::vector<Raw> &raw,
                                     Import import) {
    std::vector<hurray_buffer> out(raw.size());
    std::vector<Buffer> result;
    result.reserve(raw.size());
    std::size_t failed = HURRAY_BATCH_NO_INDEX;
    const int32_t st = import(out.data(), &failed);
    check_batch(st, failed);
    for (Ptr &t : ts) (void)t.release();
    for (const hurray_buffer &h : out) result.emplace_back(h);
    return result;
  }

  // A batched export of the Buffers' handles, which are copied out and
  // written back only where the call consumed them (all, on success).
  template <typename Tensor, typename Ptr>
  static std::vector<Ptr> export_n(std::vector<Buffer> &buffers,
                                   int32_t (*fn)(hurray_buffer *, std::size_t, Tensor **,
                                                 std::size_t *)) {
    std::vector<hurray_buffer> hs(buffers.size());
    for (std::size_t i = 0; i < buffers.size(); ++i) hs[i] = buffers[i].h_;
    std::vector<Tensor *> raw(buffers.size(), nullptr);
    std::vector<Ptr> result;
    result.reserve(buffers.size());
    std::size_t failed = HURRAY_BATCH_NO_INDEX;
    const int32_t st = fn(hs.data(), hs.size(), raw.data(), &failed);
    check_batch(st, failed);
    for (Buffer &b : buffers) b.h_ = hurray_buffer();
    for (Tensor *t : raw) result.emplace_back(t);
    return result;
  }

  hurray_buffer h_;
};

// Owns one hurray_event (move-only) and releases it in its destructor: the
// work queued on a GPU stream when it was recorded, for other streams to
// wait for (hurray_event_record / hurray_event_wait, docs/impl/gpu.md §4).
class Event {
 public:
  Event() noexcept = default;
  // Adopts an event (or NULL); the Event releases it.
  explicit Event(hurray_event *adopt) noexcept : e_(adopt) {}
  Event(Event &&other) noexcept : e_(other.e_) { other.e_ = nullptr; }
  Event &operator=(Event &&other) noexcept {
    if (this != &other) {
      reset();
      e_ = other.e_;
      other.e_ = nullptr;
    }
    return *this;
  }
  Event(const Event &) = delete;
  Event &operator=(const Event &) = delete;
  ~Event() { reset(); }

  // Records the work queued so far on `stream` of `device`
  // (hurray_event_record).
  static Event record(hurray_device device, void *stream) {
    hurray_event *e = nullptr;
    check(hurray_event_record(device, stream, &e));
    return Event(e);
  }
  // Makes `stream` wait for it on the device (hurray_event_wait).
  void wait(void *stream) const { check(hurray_event_wait(e_, stream)); }

  // Releases now (hurray_event_release); the Event becomes empty.
  void reset() noexcept {
    (void)hurray_event_release(e_);
    e_ = nullptr;
  }
  // Gives the event up without releasing it; the caller now owns it.
  hurray_event *detach() noexcept {
    hurray_event *e = e_;
    e_ = nullptr;
    return e;
  }
  explicit operator bool() const noexcept { return e_ != nullptr; }
  const hurray_event *get() const noexcept { return e_; }

 private:
  hurray_event *e_ = nullptr;
};

// Owns one set message (hurray_ipc_export_set, docs/impl/ipc.md §10):
// move-only; the destructor discards it (its fds closed, so every region's
// sender reference returns once the receiver's copies are gone too).
class IpcSetMessage {
 public:
  IpcSetMessage() noexcept = default;
  explicit IpcSetMessage(hurray_ipc_set_message *adopt) noexcept : m_(adopt) {}
  IpcSetMessage(IpcSetMessage &&other) noexcept : m_(other.m_) { other.m_ = nullptr; }
  IpcSetMessage &operator=(IpcSetMessage &&other) noexcept {
    if (this != &other) {
      reset();
      m_ = other.m_;
      other.m_ = nullptr;
    }
    return *this;
  }
  IpcSetMessage(const IpcSetMessage &) = delete;
  IpcSetMessage &operator=(const IpcSetMessage &) = delete;
  ~IpcSetMessage() { reset(); }

  // One message of every Buffer's handle. On success the Buffers are empty;
  // if this throws, none was consumed (the failed element's index is in
  // the message).
  static IpcSetMessage export_set(std::vector<Buffer> &buffers, uint32_t options = 0) {
    std::vector<hurray_buffer> hs(buffers.size());
    for (std::size_t i = 0; i < buffers.size(); ++i) hs[i] = buffers[i].get();
    hurray_ipc_set_message *m = nullptr;
    check(hurray_ipc_export_set(hs.data(), hs.size(), options, &m, nullptr));
    for (Buffer &b : buffers) (void)b.detach();
    return IpcSetMessage(m);
  }

  // The descriptor bytes and the fds (still the message's).
  struct Parts {
    const uint8_t *bytes;
    std::size_t size;
    const int32_t *fds;
    std::size_t nfds;
  };
  Parts parts() const {
    Parts p{};
    check(hurray_ipc_set_message_parts(m_, &p.bytes, &p.size, &p.fds, &p.nfds));
    return p;
  }

  // Discards now (hurray_ipc_set_message_discard); the object is empty.
  void reset() noexcept {
    if (m_ != nullptr) {
      const int32_t closed = hurray_ipc_set_message_discard(m_);  // never fails
      (void)closed;
    }
    m_ = nullptr;
  }
  explicit operator bool() const noexcept { return m_ != nullptr; }
  const hurray_ipc_set_message *get() const noexcept { return m_; }

 private:
  hurray_ipc_set_message *m_ = nullptr;
};

// Imports a received set (hurray_ipc_import_set); `fds` is always consumed
// (each entry set to -1), whether this returns or throws.
inline std::vector<Buffer> ipc_import_set(const uint8_t *bytes, std::size_t size,
                                          std::vector<int32_t> &fds,
                                          std::size_t capacity = HURRAY_IPC_SET_MAX_HANDLES) {
  std::vector<hurray_buffer> out(capacity);
  std::size_t count = 0;
  check(hurray_ipc_import_set(bytes, size, fds.data(), fds.size(), out.data(), out.size(), &count));
  std::vector<Buffer> result;
  result.reserve(count);
  for (std::size_t i = 0; i < count; ++i) result.emplace_back(out[i]);
  return result;
}

// Sends every Buffer's handle as one set (hurray_ipc_send_set); the Buffers
// are empty on success and untouched when this throws.
inline void ipc_send_set(int socket_fd, std::vector<Buffer> &buffers, uint32_t options = 0) {
  std::vector<hurray_buffer> hs(buffers.size());
  for (std::size_t i = 0; i < buffers.size(); ++i) hs[i] = buffers[i].get();
  check(hurray_ipc_send_set(socket_fd, hs.data(), hs.size(), options, nullptr));
  for (Buffer &b : buffers) (void)b.detach();
}

// Receives one set (hurray_ipc_recv_set), however many handles it has: the
// header says how many (a too small first guess consumes nothing).
inline std::vector<Buffer> ipc_recv_set(int socket_fd) {
  std::vector<hurray_buffer> out(64);
  std::size_t count = 0;
  int32_t st = hurray_ipc_recv_set(socket_fd, out.data(), out.size(), &count);
  if (st == HURRAY_ERR_INVALID_ARGUMENT && count > out.size()) {
    out.resize(count);
    st = hurray_ipc_recv_set(socket_fd, out.data(), out.size(), &count);
  }
  check(st);
  std::vector<Buffer> result;
  result.reserve(count);
  for (std::size_t i = 0; i < count; ++i) result.emplace_back(out[i]);
  return result;
}

}  // namespace hurray

#endif  // HURRAY_HURRAY_HPP_
