// SPDX-License-Identifier: Apache-2.0
// Checking mode (c-ffi §9): what it reports. Backtraces and their text, the
// double-release report, the at-exit list of live handles, and
// hurray_check_live.
#include <dlfcn.h>

#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

#if __has_include(<execinfo.h>)
#include <execinfo.h>
#define HURRAY_HAVE_BACKTRACE 1
#endif

#include "checking/checking.h"
#include "checking/registry.h"
#include "common/diagnostics.h"
#include "common/error.h"

namespace hurray::detail::check {
namespace {

// Base address of libhurray itself: its own frames are left out of reports.
const void *own_base() {
  static const void *const base = [] {
    Dl_info info;
    return dladdr(reinterpret_cast<void *>(&own_base), &info) != 0 ? info.dli_fbase : nullptr;
  }();
  return base;
}

bool stderr_wanted() {
  return (g_options.load(std::memory_order_relaxed) & HURRAY_CHECK_STDERR) != 0;
}

// Sends one finding to the hook, and to stderr when asked.
void emit(int32_t status, const Text &message, bool double_release) {
  detail::report_check_finding(status, message.c_str(), double_release);
  if (stderr_wanted()) {
    std::fputs(message.c_str(), stderr);
    std::fflush(stderr);
  }
}

}  // namespace

Text::~Text() { std::free(p_); }

void Text::add(const char *fmt, ...) {
  if (failed_) return;
  va_list args;
  va_start(args, fmt);
  va_list again;
  va_copy(again, args);
  const int len = std::vsnprintf(nullptr, 0, fmt, args);
  va_end(args);
  if (len > 0) {
    const size_t need = n_ + static_cast<size_t>(len) + 1;
    if (need > cap_) {
      size_t cap = cap_ < 256 ? 256 : 2 * cap_;
      while (cap < need) cap *= 2;
      auto *p = static_cast<char *>(std::realloc(p_, cap));
      if (p == nullptr) {
        failed_ = true;
        va_end(again);
        return;
      }
      p_ = p;
      cap_ = cap;
    }
    std::vsnprintf(p_ + n_, cap_ - n_, fmt, again);
    n_ += static_cast<size_t>(len);
  }
  va_end(again);
}

void capture(Origin *o) {
#ifdef HURRAY_HAVE_BACKTRACE
  o->n = backtrace(o->frames, Origin::kFrames);
#else
  o->n = 0;
#endif
}

namespace {

// Base address of the module whose backtrace() runs: libc, or a
// sanitizer's runtime that intercepts it (its frame leads the trace).
const void *backtrace_base() {
#ifdef HURRAY_HAVE_BACKTRACE
  static const void *const base = [] {
    Dl_info info;
    return dladdr(reinterpret_cast<void *>(&backtrace), &info) != 0 ? info.dli_fbase : nullptr;
  }();
  return base;
#else
  return nullptr;
#endif
}

}  // namespace

void frames_text(Text *t, const Origin &o, const char *indent) {
  const void *self = own_base();
  const void *tracer = backtrace_base();
  bool leading = true;  // frames of libhurray and of backtrace() itself come first
  for (int i = 0; i < o.n; ++i) {
    Dl_info info;
    std::memset(&info, 0, sizeof info);
    const bool found = dladdr(o.frames[i], &info) != 0;
    if (found && self != nullptr && info.dli_fbase == self) continue;
    if (leading && found && tracer != nullptr && info.dli_fbase == tracer) continue;
    leading = false;
    const char *module = found && info.dli_fname != nullptr ? info.dli_fname : "?";
    const char *slash = std::strrchr(module, '/');
    if (slash != nullptr) module = slash + 1;
    const uintptr_t pc = reinterpret_cast<uintptr_t>(o.frames[i]);
    if (found && info.dli_sname != nullptr) {
      t->add("%s%s(%s+0x%" PRIxPTR ") [0x%" PRIxPTR "]\n", indent, module, info.dli_sname,
             pc - reinterpret_cast<uintptr_t>(info.dli_saddr), pc);
    } else {
      t->add("%s%s(+0x%" PRIxPTR ") [0x%" PRIxPTR "]\n", indent, module,
             pc - reinterpret_cast<uintptr_t>(found ? info.dli_fbase : nullptr), pc);
    }
  }
}

void describe(Text *t, uint64_t id, const Record &r) {
  t->add("handle #%" PRIu64 " (made by %s: %s %" PRId32
         ", dtype code %u bits %u lanes %u, ndim %" PRId32 ", data %p",
         id, r.made_by, device_type_name(r.device.device_type), r.device.device_id,
         unsigned{r.dtype.code}, unsigned{r.dtype.bits}, unsigned{r.dtype.lanes}, r.ndim, r.data);
  if (r.label != nullptr) t->add(", label \"%s\"", r.label);
  t->add(")");
}

void report_second_use(uint64_t id, const char *step, const Origin &here, bool counted) {
  const bool release = std::strcmp(step, "released") == 0;
  const char *what = release ? "double release" : "use after release";
  Gone g;
  bool known = false, issued = false;
  Text label;  // the label lives in the ring: copied under the lock
  {
    Registry &reg = registry();
    std::lock_guard<std::mutex> lock(reg.mu);
    issued = id != 0 && id < reg.next_id;
    known = reg.find_gone(id, &g);
    if (known) {
      for (size_t i = 0; i < Registry::kGoneKept; ++i) {
        if (reg.gone[i].id == id && reg.gone[i].record.label != nullptr) {
          label.add("%s", reg.gone[i].record.label);
        }
      }
    }
  }
  Text m;
  if (known) {
    if (label.c_str()[0] != '\0') g.record.label = const_cast<char *>(label.c_str());
    m.add("hurray check: %s of ", what);
    describe(&m, id, g.record);
    m.add("; the producer's release was not called again.\n  made at:\n");
    frames_text(&m, g.record.made, "    ");
    if (std::strcmp(g.ended_by, "released") == 0) {
      m.add("  first released at:\n");
    } else {
      m.add("  first consumed by %s at:\n", g.ended_by);
    }
    frames_text(&m, g.ended, "    ");
  } else if (issued) {
    m.add("hurray check: %s of handle #%" PRIu64
          " (its first release is too far back to be on record); the producer's release was "
          "not called again.\n",
          what, id);
  } else {
    m.add(
        "hurray check: bad %s: a handle whose release_fn is the checker's but whose "
        "user_data (%" PRIu64
        ") is no id it issued (a corrupted handle); nothing was "
        "called.\n",
        release ? "release" : "use", id);
  }
  m.add("  this time %s at:\n", release ? "released" : step);
  frames_text(&m, here, "    ");
  emit(HURRAY_ERR_RELEASED, m, counted);
}

namespace {

// A copy of the live records with id >= since, in id order (the index is
// ordered by id), labels copied. Freed with free_snapshot.
struct Snapshot {
  uint64_t *ids = nullptr;
  Record *records = nullptr;
  size_t n = 0;
};

void free_snapshot(Snapshot *s) {
  for (size_t i = 0; i < s->n; ++i) std::free(s->records[i].label);
  std::free(s->ids);
  std::free(s->records);
  *s = Snapshot{};
}

bool take_snapshot(uint64_t since, Snapshot *s) {
  settle_if_forked();
  Registry &reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  const size_t cap = reg.live;
  if (cap == 0) return true;
  s->ids = static_cast<uint64_t *>(std::malloc(cap * sizeof(uint64_t)));
  s->records = static_cast<Record *>(std::malloc(cap * sizeof(Record)));
  if (s->ids == nullptr || s->records == nullptr) {
    free_snapshot(s);
    return false;
  }
  for (size_t c = 0; c < reg.dir_len; ++c) {
    const Registry::Chunk *chunk = reg.dir[c];
    if (chunk == nullptr) continue;
    for (uint64_t k = 0; k < Registry::kChunkSlots; ++k) {
      const Record *r = chunk->slot[k];
      const uint64_t id = c * Registry::kChunkSlots + k;
      if (r == nullptr || id < since) continue;
      Record copy = *r;
      if (r->label != nullptr) {
        copy.label = strdup(r->label);
        if (copy.label == nullptr) {
          free_snapshot(s);
          return false;
        }
      }
      s->ids[s->n] = id;
      s->records[s->n] = copy;
      ++s->n;
    }
  }
  return true;
}

// Runs whenever the mode was on at some point (also after it was turned
// off: handles tracked before are still checked, and reported).
void exit_report() {
  Snapshot s;
  if (!take_snapshot(0, &s)) return;
  for (size_t i = 0; i < s.n; ++i) {
    Text m;
    m.add("hurray check: leak: ");
    describe(&m, s.ids[i], s.records[i]);
    m.add(" still live at exit.\n  made at:\n");
    frames_text(&m, s.records[i].made, "    ");
    detail::report_check_finding(HURRAY_ERR_LEAKED, m.c_str(), false);
    if (g_exit_stderr.load(std::memory_order_relaxed)) std::fputs(m.c_str(), stderr);
  }
  if (g_exit_stderr.load(std::memory_order_relaxed)) {
    hurray_diagnostics d;
    d.struct_size = sizeof d;
    const uint64_t doubles = hurray_get_diagnostics(&d) == HURRAY_OK ? d.double_releases : 0;
    std::fprintf(stderr,
                 "hurray check: %zu handle(s) still live at exit, %" PRIu64
                 " double release(s) caught\n",
                 s.n, doubles);
  }
  free_snapshot(&s);
}

}  // namespace

void register_exit_report() {
  static std::once_flag once;
  std::call_once(once, [] { std::atexit(&exit_report); });
}

}  // namespace hurray::detail::check

extern "C" {

HURRAY_API int32_t hurray_check_live(uint64_t since, hurray_check_visit_fn visit, void *user,
                                     size_t *count) {
  using namespace hurray::detail;
  check::Snapshot s;
  if (!check::take_snapshot(since, &s)) {
    return fail(HURRAY_ERR_OUT_OF_MEMORY, "allocating the list of live handles failed");
  }
  // Every origin text is made before the first visit: a failure calls nothing.
  check::Text *origins = nullptr;
  if (visit != nullptr && s.n > 0) {
    origins = static_cast<check::Text *>(std::malloc(s.n * sizeof(check::Text)));
    bool ok = origins != nullptr;
    for (size_t i = 0; ok && i < s.n; ++i) {
      new (&origins[i]) check::Text();
      check::frames_text(&origins[i], s.records[i].made, "");
      if (origins[i].failed()) {
        for (size_t j = 0; j <= i; ++j) origins[j].~Text();
        ok = false;
      }
    }
    if (!ok) {
      std::free(origins);
      check::free_snapshot(&s);
      return fail(HURRAY_ERR_OUT_OF_MEMORY, "allocating the list of live handles failed");
    }
  }
  for (size_t i = 0; visit != nullptr && i < s.n; ++i) {
    const check::Record &r = s.records[i];
    hurray_check_entry entry;
    std::memset(&entry, 0, sizeof entry);
    entry.struct_size = sizeof entry;
    entry.id = s.ids[i];
    entry.made_by = r.made_by;
    entry.label = r.label != nullptr ? r.label : "";
    entry.origin = origins[i].c_str();
    entry.data = r.data;
    entry.device = r.device;
    entry.dtype = r.dtype;
    entry.ndim = r.ndim;
    visit(&entry, user);
  }
  if (origins != nullptr) {
    for (size_t i = 0; i < s.n; ++i) origins[i].~Text();
    std::free(origins);
  }
  const size_t n = s.n;
  check::free_snapshot(&s);
  if (count != nullptr) *count = n;
  return HURRAY_OK;
}

}  // extern "C"
