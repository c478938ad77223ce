// SPDX-License-Identifier: Apache-2.0
// A PyTorch C++ extension that fans one tensor out to n tensors through the
// installed libhurray, zero-copy:
//
//   torch tensor --at::toDLPackVersioned--> DLManagedTensorVersioned
//     (wrapped in a counting deleter) --hurray_from_dlpack_versioned--> handle
//     --hurray_share(n)--> n handles --hurray_to_dlpack_versioned-->
//     n DLPack tensors --at::fromDLPackVersioned--> n torch tensors.
//
// Every returned tensor views the source memory. When torch frees one, its
// hurray handle is released; the source tensor's DLPack deleter (and with it
// torch's reference to the source storage) runs exactly once, after the last.
// release_counts() exposes the counters the tests assert on.
//
// torch 2.15 needs C++20 (torch.utils.cpp_extension passes it); hurray.hpp is
// C++17 and compiles as C++20 too.
//
// Include order: torch's ATen/dlpack.h and include/hurray/dlpack.h are both
// DLPack 1.3 behind the same include guard (DLPACK_DLPACK_H_); torch's comes
// first here and hurray.h reuses its declarations.
#include <torch/extension.h>
#include <ATen/DLConvertor.h>

#include <hurray/hurray.hpp>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>

namespace {

// Process-wide counters; any thread may bump them (deleters run on whichever
// thread frees the last reference).
std::atomic<int64_t> g_producer_deletes{0};  // counting wrapper's deleter calls
std::atomic<int64_t> g_view_releases{0};     // returned views freed by torch
std::atomic<int64_t> g_storage_frees{0};     // counted_clone() storages freed

// A DLPack tensor that stands in front of the one torch produced: same
// dl_tensor, its own deleter that counts and then runs torch's deleter.
struct CountingTensor {
  DLManagedTensorVersioned outer;
  DLManagedTensorVersioned *inner;
};

void counting_deleter(DLManagedTensorVersioned *self) {
  auto *w = static_cast<CountingTensor *>(self->manager_ctx);
  DLManagedTensorVersioned *inner = w->inner;
  delete w;
  g_producer_deletes.fetch_add(1, std::memory_order_relaxed);
  if (inner->deleter != nullptr) inner->deleter(inner);
}

// Takes ownership of `inner` (also when it throws: then inner is deleted).
hurray::DLPackVersionedPtr wrap_counting(DLManagedTensorVersioned *inner) {
  auto *w = new (std::nothrow) CountingTensor;
  if (w == nullptr) {
    if (inner->deleter != nullptr) inner->deleter(inner);
    throw std::bad_alloc();
  }
  w->outer = *inner;  // version, flags, dl_tensor (shape/strides point into inner)
  w->outer.manager_ctx = w;
  w->outer.deleter = counting_deleter;
  w->inner = inner;
  return hurray::DLPackVersionedPtr(&w->outer);
}

// Hands one exported DLPack tensor to torch. torch calls `deleter` once when
// the tensor's storage dies; it runs the tensor's own (hurray) deleter. If
// torch throws before it took the tensor, `dl` still owns it and frees it.
at::Tensor to_torch(hurray::DLPackVersionedPtr dl) {
  DLManagedTensorVersioned *t = dl.get();
  auto taken = std::make_shared<std::atomic<bool>>(false);
  auto deleter = [t, taken](void *) {
    taken->store(true);
    g_view_releases.fetch_add(1, std::memory_order_relaxed);
    t->deleter(t);
  };
  try {
    at::Tensor view = at::fromDLPackVersioned(t, deleter);
    (void)dl.release();
    return view;
  } catch (...) {
    if (taken->load()) (void)dl.release();  // torch already ran the deleter
    throw;
  }
}

// hurray::Error -> Python: INVALID_ARGUMENT is a ValueError, anything else a
// RuntimeError; the message carries the status name and libhurray's text.
[[noreturn]] void rethrow(const hurray::Error &e) {
  if (e.status() == HURRAY_ERR_INVALID_ARGUMENT) throw pybind11::value_error(e.what());
  throw std::runtime_error(e.what());
}

// at::toDLPackVersioned exports what the tensor's storage holds, not what
// the tensor means: a conjugate or negative view (the bits torch resolves
// lazily) would arrive un-conjugated / un-negated, and a tensor that requires
// grad would lose its autograd graph. Refuse them as torch's own __dlpack__
// refuses the first and the last (BufferError), with what to call instead.
void refuse_lazy_views(const at::Tensor &x) {
  if (x.requires_grad()) {
    throw pybind11::buffer_error(
        "fan_out: the tensor requires grad; views would drop its autograd graph "
        "(pass tensor.detach())");
  }
  if (x.is_conj()) {
    throw pybind11::buffer_error(
        "fan_out: the tensor has its conjugate bit set; the memory holds the unconjugated "
        "values (pass tensor.resolve_conj())");
  }
  if (x.is_neg()) {
    throw pybind11::buffer_error(
        "fan_out: the tensor has its negative bit set; the memory holds the un-negated "
        "values (pass tensor.resolve_neg())");
  }
}

std::vector<at::Tensor> fan_out(const at::Tensor &x, int64_t n) {
  if (n < 0) throw pybind11::value_error("fan_out: n must be >= 0, got " + std::to_string(n));
  refuse_lazy_views(x);
  try {
    hurray::DLPackVersionedPtr produced = wrap_counting(at::toDLPackVersioned(x));
    // From here on every failure path releases exactly what it holds: the
    // DLPack tensor (before import), the handle (before share), the shared
    // handles not yet exported, the views already made.
    hurray::Buffer source = hurray::Buffer::from_dlpack(produced);
    std::vector<hurray::Buffer> shares = source.share(static_cast<std::size_t>(n));
    std::vector<at::Tensor> views;
    views.reserve(shares.size());
    for (hurray::Buffer &h : shares) views.push_back(to_torch(h.to_dlpack_versioned()));
    return views;
  } catch (const hurray::Error &e) {
    rethrow(e);
  }
}

// A copy of x in new memory whose free is counted in storage_frees: lets the
// tests see that the source storage is freed once, and when.
at::Tensor counted_clone(const at::Tensor &x) {
  at::Tensor src = x.contiguous();
  std::size_t nbytes = src.nbytes();
  void *p = std::malloc(nbytes == 0 ? 1 : nbytes);
  if (p == nullptr) throw std::bad_alloc();
  if (nbytes != 0) std::memcpy(p, src.data_ptr(), nbytes);
  auto free_counted = [](void *q) {
    g_storage_frees.fetch_add(1, std::memory_order_relaxed);
    std::free(q);
  };
  return at::from_blob(p, src.sizes(), free_counted, src.options());
}

std::map<std::string, int64_t> release_counts() {
  return {{"producer_deletes", g_producer_deletes.load()},
          {"view_releases", g_view_releases.load()},
          {"storage_frees", g_storage_frees.load()}};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "libhurray fan-out for torch tensors (example extension)";
  // Fails at import, with libhurray's message, if the loaded library cannot
  // serve the headers this was compiled against.
  hurray::check(hurray_check_version(HURRAY_VERSION));
  m.def("fan_out", &fan_out, pybind11::arg("tensor"), pybind11::arg("n"),
        "n tensors viewing tensor's memory through n shared hurray handles; the "
        "source's DLPack deleter runs once, after the last of them is freed. "
        "n == 0 raises ValueError (HURRAY_ERR_INVALID_ARGUMENT).");
  m.def("counted_clone", &counted_clone, pybind11::arg("tensor"),
        "A copy of tensor whose storage free is counted in release_counts().");
  m.def("release_counts", &release_counts,
        "Cumulative counters: producer_deletes, view_releases, storage_frees.");
  m.def("hurray_version", [] { return std::string(HURRAY_VERSION_STRING); });
}
