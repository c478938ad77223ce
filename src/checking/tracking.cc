// SPDX-License-Identifier: Apache-2.0
// Checking mode (c-ffi §9): tracking, the checked release, consumption by
// later steps, and hurray_check_enable / _get_state / _label.
#include "checking/checking.h"

#include <cinttypes>
#include <cstdlib>
#include <cstring>
#include <strings.h>

#include "checking/registry.h"
#include "common/diagnostics.h"
#include "common/error.h"
#include "handle/handle.h"

namespace hurray::detail::check {

std::atomic<uint32_t> g_options{0};
std::atomic<bool> g_exit_stderr{false};

namespace {

Registry g_registry;

constexpr uint32_t kKnownOptions = HURRAY_CHECK_TRACK | HURRAY_CHECK_STDERR;

uint64_t id_of(const hurray_buffer *h) { return reinterpret_cast<uintptr_t>(h->user_data); }

int32_t fail_released(const hurray_buffer *h, const char *what) {
  return fail(HURRAY_ERR_RELEASED,
              "%s is tracked handle #%" PRIu64
              ", whose reference was already released or consumed (checking mode; the "
              "diagnostic hook has where it was made and first released)",
              what, id_of(h));
}

uint32_t options_from_environment() {
  const char *v = std::getenv("HURRAY_CHECK");
  if (v == nullptr || v[0] == '\0' || std::strcmp(v, "0") == 0) return 0;
  if (strcasecmp(v, "stderr") == 0) return HURRAY_CHECK_TRACK | HURRAY_CHECK_STDERR;
  return HURRAY_CHECK_TRACK;
}

void set_options(uint32_t options) {
  if (options & HURRAY_CHECK_STDERR) options |= HURRAY_CHECK_TRACK;
  if (options != 0) {
    register_exit_report();
    g_exit_stderr.store((options & HURRAY_CHECK_STDERR) != 0, std::memory_order_relaxed);
  }
  g_options.store(options, std::memory_order_relaxed);
}

// HURRAY_CHECK is read once, when libhurray is loaded.
const bool g_from_environment = [] {
  const uint32_t o = options_from_environment();
  if (o != 0) set_options(o);
  return true;
}();

}  // namespace

Registry &registry() { return g_registry; }

void free_record(Record *r) {
  if (r == nullptr) return;
  std::free(r->label);
  std::free(r);
}

Record *Registry::find(uint64_t id) const {
  const uint64_t c = id / kChunkSlots;
  if (c >= dir_len || dir[c] == nullptr) return nullptr;
  return dir[c]->slot[id % kChunkSlots];
}

uint64_t Registry::insert(Record *r) {
  const uint64_t id = next_id;
  const uint64_t c = id / kChunkSlots;
  if (c >= dir_len) {
    size_t len = dir_len < 16 ? 16 : 2 * dir_len;
    while (len <= c) len *= 2;
    auto **d = static_cast<Chunk **>(std::calloc(len, sizeof(Chunk *)));
    if (d == nullptr) return 0;
    if (dir_len > 0) std::memcpy(d, dir, dir_len * sizeof(Chunk *));
    std::free(dir);
    dir = d;
    dir_len = len;
  }
  if (dir[c] == nullptr) {
    dir[c] = static_cast<Chunk *>(std::calloc(1, sizeof(Chunk)));
    if (dir[c] == nullptr) return 0;
  }
  dir[c]->slot[id % kChunkSlots] = r;
  ++dir[c]->live;
  ++live;
  ++next_id;
  return id;
}

Record *Registry::remove(uint64_t id) {
  const uint64_t c = id / kChunkSlots;
  if (c >= dir_len || dir[c] == nullptr) return nullptr;
  Chunk *chunk = dir[c];
  Record *r = chunk->slot[id % kChunkSlots];
  if (r == nullptr) return nullptr;
  chunk->slot[id % kChunkSlots] = nullptr;
  --live;
  // A chunk none of whose ids is live, and all of whose ids were issued,
  // is not needed again.
  if (--chunk->live == 0 && next_id >= (c + 1) * kChunkSlots) {
    std::free(chunk);
    dir[c] = nullptr;
  }
  return r;
}

void Registry::bury(uint64_t id, Record *r, const char *ended_by, const Origin &where) {
  if (gone == nullptr) gone = static_cast<Gone *>(std::calloc(kGoneKept, sizeof(Gone)));
  if (gone == nullptr) {
    free_record(r);
    return;
  }
  Gone &g = gone[gone_next];
  gone_next = (gone_next + 1) % kGoneKept;
  if (g.id != 0) std::free(g.record.label);
  g.id = id;
  g.record = *r;  // the ring owns the label now
  g.ended_by = ended_by;
  g.ended = where;
  std::free(r);
}

bool Registry::find_gone(uint64_t id, Gone *out) const {
  if (gone == nullptr || id == 0) return false;
  for (size_t i = 0; i < kGoneKept; ++i) {
    if (gone[i].id == id) {
      *out = gone[i];
      out->record.label = nullptr;
      return true;
    }
  }
  return false;
}

void checked_release(void *id_ptr) {
  settle_if_forked();
  const uint64_t id = reinterpret_cast<uintptr_t>(id_ptr);
  Origin here;
  capture(&here);
  hurray_release_fn fn = nullptr;
  void *user_data = nullptr;
  {
    Registry &reg = registry();
    std::lock_guard<std::mutex> lock(reg.mu);
    Record *r = reg.find(id);
    if (r != nullptr && r->claimed) {
      // A consuming step runs on a copy of this handle: one of the two has
      // the reference, and the step's outcome says which (check::consume).
      if (r->pending++ == 0) r->pending_at = here;
      return;
    }
    if (r != nullptr) {
      fn = r->fn;
      user_data = r->user_data;
      reg.bury(id, reg.remove(id), "released", here);
    }
  }
  if (fn != nullptr) {
    fn(user_data);  // outside the lock: the producer may call libhurray
    return;
  }
  report_second_use(id, "released", here, /*counted=*/true);
}

void track(hurray_buffer *out, size_t n, const char *made_by) {
  Origin here;
  capture(&here);
  Registry &reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  for (size_t i = 0; i < n; ++i) {
    hurray_buffer &h = out[i];
    auto *r = static_cast<Record *>(std::malloc(sizeof(Record)));
    const uint64_t id = r != nullptr ? reg.insert(r) : 0;
    if (id == 0) {
      std::free(r);
      reg.untracked += n - i;  // out[i..n) keep the producer's release
      return;
    }
    *r = Record{h.release_fn, h.user_data, made_by, h.data, h.device, h.dtype,
                h.ndim,       false,       0,       here,   Origin{}, nullptr};
    h.release_fn = &checked_release;
    h.user_data = reinterpret_cast<void *>(static_cast<uintptr_t>(id));
    ++reg.tracked;
  }
}

int32_t require_live(const hurray_buffer *h, const char *what, const char *step) {
  settle_if_forked();
  Registry &reg = registry();
  {
    std::lock_guard<std::mutex> lock(reg.mu);
    // Claimed (a consuming step runs on a copy) still means live here.
    if (reg.find(id_of(h)) != nullptr) return HURRAY_OK;
  }
  Origin here;
  capture(&here);
  report_second_use(id_of(h), step, here, /*counted=*/false);
  return fail_released(h, what);
}

int32_t consume(hurray_buffer *src, const char *step_name, Step step, void *ctx,
                const hurray_buffer *written, size_t n_written) {
  settle_if_forked();
  const uint64_t id = id_of(src);
  Origin here;
  capture(&here);
  Registry &reg = registry();
  hurray_buffer inner = *src;
  bool claimed = false;
  {
    std::unique_lock<std::mutex> lock(reg.mu);
    Record *r = reg.find(id);
    // Another step consumes a copy of this handle right now: which of the
    // two has the reference depends on whether that one succeeds, so wait
    // for it (it calls nothing that could wait for this thread).
    while (r != nullptr && r->claimed) {
      pthread_cond_wait(&reg.step_done, reg.mu.native_handle());
      r = reg.find(id);
    }
    if (r != nullptr) {
      r->claimed = true;  // a release of a copy meanwhile is a second use
      inner.release_fn = r->fn;
      inner.user_data = r->user_data;
      claimed = true;
    }
  }
  if (!claimed) {
    report_second_use(id, step_name, here, /*counted=*/true);
    return fail_released(src, "src");
  }
  const int32_t st = step(&inner, ctx);
  std::unique_lock<std::mutex> lock(reg.mu);
  Record *r = reg.find(id);
  r->claimed = false;
  pthread_cond_broadcast(&reg.step_done);
  const uint32_t pending = r->pending;
  const Origin pending_at = r->pending_at;
  r->pending = 0;
  if (st != HURRAY_OK) {
    // Back as it was. A release of a copy that came meanwhile had the
    // reference after all: it ends now; any further one is a second use.
    hurray_release_fn fn = nullptr;
    void *user_data = nullptr;
    if (pending > 0) {
      fn = r->fn;
      user_data = r->user_data;
      reg.bury(id, reg.remove(id), "released", pending_at);
    }
    lock.unlock();
    if (fn != nullptr) fn(user_data);
    for (uint32_t i = 1; i < pending; ++i) report_second_use(id, "released", pending_at, true);
    return st;
  }
  const bool src_written = n_written > 0 && src >= written && src < written + n_written;
  if (!src_written) clear(src);
  Record *gone = reg.remove(id);
  // Handles made from a labelled one carry its label on (a binding's
  // creation site survives the shares its exports make). Without memory for
  // a copy a handle is simply left unlabelled.
  for (size_t i = 0; gone->label != nullptr && i < n_written; ++i) {
    Record *r = is_tracked(&written[i]) ? reg.find(id_of(&written[i])) : nullptr;
    if (r != nullptr && r->label == nullptr) r->label = strdup(gone->label);
  }
  reg.bury(id, gone, step_name, here);
  lock.unlock();
  // Releases of copies while the step ran: the step had the reference.
  for (uint32_t i = 0; i < pending; ++i) report_second_use(id, "released", pending_at, true);
  return HURRAY_OK;
}

void prepare_fork() { registry().mu.lock(); }

void after_fork() { registry().mu.unlock(); }

Record *Registry::find_claimed(uint64_t *id) const {
  for (size_t c = 0; c < dir_len; ++c) {
    if (dir[c] == nullptr) continue;
    for (uint64_t k = 0; k < kChunkSlots; ++k) {
      Record *r = dir[c]->slot[k];
      if (r != nullptr && r->claimed) {
        *id = c * kChunkSlots + k;
        return r;
      }
    }
  }
  return nullptr;
}

namespace {

// Set in a forked child (after_fork_child), cleared by the first settle.
std::atomic<bool> g_settle_after_fork{false};

void settle_claims() {
  Registry &reg = registry();
  for (;;) {
    hurray_release_fn fn = nullptr;
    void *user_data = nullptr;
    uint32_t pending = 0;
    uint64_t id = 0;
    Origin pending_at;
    {
      std::lock_guard<std::mutex> lock(reg.mu);
      Record *r = reg.find_claimed(&id);
      if (r == nullptr) return;
      r->claimed = false;
      pending = r->pending;
      pending_at = r->pending_at;
      r->pending = 0;
      if (pending > 0) {
        fn = r->fn;
        user_data = r->user_data;
        reg.bury(id, reg.remove(id), "released", pending_at);
      }
    }
    if (fn != nullptr) fn(user_data);
    for (uint32_t i = 1; i < pending; ++i) report_second_use(id, "released", pending_at, true);
  }
}

}  // namespace

void after_fork_child() {
  // The parent's waiters do not exist here: the condition starts afresh.
  static const pthread_cond_t fresh = PTHREAD_COND_INITIALIZER;
  registry().step_done = fresh;
  g_settle_after_fork.store(true, std::memory_order_relaxed);
}

void settle_if_forked() {
  if (__builtin_expect(g_settle_after_fork.load(std::memory_order_relaxed), 0) &&
      g_settle_after_fork.exchange(false)) {
    settle_claims();
  }
}

}  // namespace hurray::detail::check

extern "C" {

HURRAY_API int32_t hurray_check_enable(uint32_t options) {
  using namespace hurray::detail;
  if ((options & ~check::kKnownOptions) != 0) {
    return fail(HURRAY_ERR_INVALID_ARGUMENT, "options 0x%" PRIx32 " has unknown bits", options);
  }
  (void)check::g_from_environment;
  check::set_options(options);
  return HURRAY_OK;
}

HURRAY_API int32_t hurray_check_get_state(hurray_check_state *out) {
  using namespace hurray::detail;
  if (out == nullptr) return fail(HURRAY_ERR_INVALID_ARGUMENT, "out is NULL");
  const size_t size = out->struct_size;
  constexpr size_t kMin = offsetof(hurray_check_state, next_id) + sizeof(uint64_t);
  if (size < kMin) {
    return fail(HURRAY_ERR_INVALID_ARGUMENT,
                "out->struct_size is %zu; set it to sizeof(hurray_check_state)", size);
  }
  hurray_check_state s;
  std::memset(&s, 0, sizeof s);
  {
    check::Registry &reg = check::registry();
    std::lock_guard<std::mutex> lock(reg.mu);
    s.next_id = reg.next_id;
    s.live = reg.live;
    s.tracked = reg.tracked;
    s.untracked = reg.untracked;
  }
  s.options = check::g_options.load(std::memory_order_relaxed);
  hurray_diagnostics d;
  d.struct_size = sizeof d;
  if (hurray_get_diagnostics(&d) == HURRAY_OK) s.double_releases = d.double_releases;
  // Every field after the 8-byte header is a uint64_t: whole fields only.
  const size_t fits = size < sizeof s ? size : sizeof s;
  const size_t written = 8 + (fits - 8) / 8 * 8;
  s.struct_size = static_cast<uint32_t>(written);
  std::memcpy(out, &s, written);
  return HURRAY_OK;
}

HURRAY_API int32_t hurray_check_label(const hurray_buffer *h, const char *label) {
  using namespace hurray::detail;
  if (h == nullptr) return fail(HURRAY_ERR_INVALID_ARGUMENT, "h is NULL");
  if (label == nullptr) return fail(HURRAY_ERR_INVALID_ARGUMENT, "label is NULL");
  if (!check::is_tracked(h)) {
    return fail(HURRAY_ERR_INVALID_ARGUMENT,
                "h is not tracked by the checking mode (made while it was off, or not by "
                "libhurray)");
  }
  const size_t len = strnlen(label, 511);
  auto *copy = static_cast<char *>(std::malloc(len + 1));
  if (copy == nullptr) return fail(HURRAY_ERR_OUT_OF_MEMORY, "copying the label failed");
  std::memcpy(copy, label, len);
  copy[len] = '\0';
  check::Registry &reg = check::registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  check::Record *r = reg.find(check::id_of(h));
  if (r == nullptr) {
    std::free(copy);
    return check::fail_released(h, "h");
  }
  std::free(r->label);
  r->label = copy;
  return HURRAY_OK;
}

}  // extern "C"
