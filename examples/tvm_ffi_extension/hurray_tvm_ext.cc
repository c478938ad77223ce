// SPDX-License-Identifier: Apache-2.0
// A TVM FFI module that fans tensors out through the installed libhurray,
// zero-copy:
//
//   tvm::ffi::Tensor --ToDLPackVersioned--> DLManagedTensorVersioned
//     (wrapped in a counting deleter) --hurray_from_dlpack_versioned--> handle
//     --hurray_share(n)--> n handles --hurray_to_dlpack_versioned-->
//     n DLPack tensors (each wrapped in a counting deleter)
//     --Tensor::FromDLPackVersioned--> n tvm::ffi::Tensor.
//
// Every returned tensor views the source memory. When TVM FFI frees one (its
// reference count reaches 0), its hurray handle is released; the source's
// DLPack deleter, which drops the reference ToDLPackVersioned took on the
// source tensor, runs exactly once, after the last view.
//
// Exported functions (tvm_ffi.load_module(path).<name>):
//   fan_out(x: Tensor, n: int) -> Array[Tensor]
//   fan_out_each(xs: Array[Tensor], n: int) -> Array[Array[Tensor]]
//   counted_copy(x: Tensor) -> Tensor   (compact copy, its free is counted)
//   release_counts() -> Map[str, int]   (producer_deletes, view_releases,
//                                        storage_frees; cumulative)
//
// Include order: TVM FFI's dlpack/dlpack.h and include/hurray/dlpack.h are
// both DLPack 1.3 behind the same include guard; TVM's comes first here and
// hurray.h reuses its declarations.
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/map.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>

#include <hurray/hurray.hpp>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

namespace {

namespace ffi = tvm::ffi;

std::atomic<int64_t> g_producer_deletes{0};  // source DLPack tensors deleted
std::atomic<int64_t> g_view_releases{0};     // returned views freed
std::atomic<int64_t> g_storage_frees{0};     // counted_copy() storages freed

// A DLPack tensor standing in front of another one: same version, flags and
// dl_tensor; its deleter bumps *counter, then runs the inner tensor's deleter.
struct CountingTensor {
  DLManagedTensorVersioned outer;
  DLManagedTensorVersioned *inner;
  std::atomic<int64_t> *counter;
};

void counting_deleter(DLManagedTensorVersioned *self) {
  auto *w = static_cast<CountingTensor *>(self->manager_ctx);
  DLManagedTensorVersioned *inner = w->inner;
  std::atomic<int64_t> *counter = w->counter;
  delete w;
  counter->fetch_add(1, std::memory_order_relaxed);
  if (inner->deleter != nullptr) inner->deleter(inner);
}

// Takes ownership of `inner` (also when it throws: then inner is deleted).
hurray::DLPackVersionedPtr wrap_counting(DLManagedTensorVersioned *inner,
                                         std::atomic<int64_t> *counter) {
  auto *w = new (std::nothrow) CountingTensor;
  if (w == nullptr) {
    if (inner->deleter != nullptr) inner->deleter(inner);
    throw std::bad_alloc();
  }
  w->outer = *inner;  // shape/strides keep pointing into inner, which lives on
  w->outer.manager_ctx = w;
  w->outer.deleter = counting_deleter;
  w->inner = inner;
  w->counter = counter;
  return hurray::DLPackVersionedPtr(&w->outer);
}

// hurray::Error -> TVM FFI error (raised in Python as ValueError for
// HURRAY_ERR_INVALID_ARGUMENT, RuntimeError otherwise).
[[noreturn]] void rethrow(const hurray::Error &e) {
  if (e.status() == HURRAY_ERR_INVALID_ARGUMENT) TVM_FFI_THROW(ValueError) << e.what();
  TVM_FFI_THROW(RuntimeError) << e.what();
  std::abort();  // not reached: TVM_FFI_THROW throws
}

ffi::Array<ffi::Tensor> fan_out(ffi::Tensor x, int64_t n) {
  if (n < 0) TVM_FFI_THROW(ValueError) << "fan_out: n must be >= 0, got " << n;
  try {
    // ToDLPackVersioned takes a reference on x's TensorObj; the producer's
    // deleter drops it. Each failure below frees exactly what it holds.
    hurray::DLPackVersionedPtr produced = wrap_counting(x.ToDLPackVersioned(), &g_producer_deletes);
    hurray::Buffer source = hurray::Buffer::from_dlpack(produced);
    std::vector<hurray::Buffer> shares = source.share(static_cast<std::size_t>(n));
    ffi::Array<ffi::Tensor> views;
    views.reserve(static_cast<int64_t>(shares.size()));
    for (hurray::Buffer &h : shares) {
      hurray::DLPackVersionedPtr dl =
          wrap_counting(h.to_dlpack_versioned().release(), &g_view_releases);
      // FromDLPackVersioned owns dl only once it returns; if it throws,
      // dl still owns the tensor and deletes it.
      views.push_back(ffi::Tensor::FromDLPackVersioned(dl.get()));
      (void)dl.release();
    }
    return views;
  } catch (const hurray::Error &e) {
    rethrow(e);
  }
}

ffi::Array<ffi::Array<ffi::Tensor>> fan_out_each(ffi::Array<ffi::Tensor> xs, int64_t n) {
  ffi::Array<ffi::Array<ffi::Tensor>> out;
  out.reserve(xs.size());
  for (const ffi::Tensor &x : xs) out.push_back(fan_out(x, n));
  return out;
}

// counted_copy: a CPU tensor in malloc'd memory whose free is counted.
void free_copy(DLManagedTensorVersioned *t) {
  std::free(t->dl_tensor.data);
  delete[] t->dl_tensor.shape;  // shape and strides: one array of 2*ndim+1
  delete t;
}

void free_counted(DLManagedTensorVersioned *t) {
  free_copy(t);
  g_storage_frees.fetch_add(1, std::memory_order_relaxed);
}

ffi::Tensor counted_copy(ffi::Tensor x) {
  const DLTensor *d = x.GetDLTensorPtr();
  if (d->device.device_type != kDLCPU)
    TVM_FFI_THROW(ValueError) << "counted_copy: CPU tensors only";
  if (!x.IsContiguous()) TVM_FFI_THROW(ValueError) << "counted_copy: contiguous tensors only";
  int32_t ndim = d->ndim;
  std::size_t nbytes = ffi::GetDataSize(*d);
  auto t = std::make_unique<DLManagedTensorVersioned>();
  std::unique_ptr<int64_t[]> dims(new int64_t[2 * static_cast<std::size_t>(ndim) + 1]);
  void *data = std::malloc(nbytes == 0 ? 1 : nbytes);
  if (data == nullptr) throw std::bad_alloc();
  if (nbytes != 0) {
    std::memcpy(data, static_cast<const char *>(d->data) + d->byte_offset, nbytes);
  }
  int64_t stride = 1;
  for (int32_t k = ndim - 1; k >= 0; --k) {
    dims[k] = d->shape[k];
    dims[ndim + k] = stride;
    stride *= d->shape[k];
  }
  t->version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  t->manager_ctx = nullptr;
  t->deleter = free_counted;
  t->flags = 0;
  t->dl_tensor = DLTensor{data, d->device, ndim, d->dtype, dims.get(), dims.get() + ndim, 0};
  (void)dims.release();
  try {
    ffi::Tensor r = ffi::Tensor::FromDLPackVersioned(t.get());
    (void)t.release();
    return r;
  } catch (...) {
    free_copy(t.release());  // never became a tensor: not counted
    throw;
  }
}

ffi::Map<ffi::String, int64_t> release_counts() {
  ffi::Map<ffi::String, int64_t> m;
  m.Set("producer_deletes", g_producer_deletes.load());
  m.Set("view_releases", g_view_releases.load());
  m.Set("storage_frees", g_storage_frees.load());
  return m;
}

// Library load check: the loaded libhurray must serve these headers.
ffi::String loaded_hurray_version() {
  try {
    hurray::check(hurray_check_version(HURRAY_VERSION));
  } catch (const hurray::Error &e) {
    rethrow(e);
  }
  return ffi::String(HURRAY_VERSION_STRING);
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(fan_out, fan_out);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(fan_out_each, fan_out_each);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(counted_copy, counted_copy);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(release_counts, release_counts);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(hurray_version, loaded_hurray_version);
