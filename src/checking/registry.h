// SPDX-License-Identifier: Apache-2.0
// The checking mode's records (src/checking/tracking.cc) and their descriptions
// (src/checking/report.cc). Internal to those two files.
//
// libhurray is built without exceptions and must not abort, so nothing here
// uses the standard containers: records are malloc'd, the live ones indexed
// by id in chunks, and every allocation failure is an answer, not a crash.
#ifndef HURRAY_SRC_CHECKING_REGISTRY_H_
#define HURRAY_SRC_CHECKING_REGISTRY_H_

#include <cstddef>
#include <cstdint>
#include <pthread.h>

#include <mutex>

#include "hurray/hurray.h"

namespace hurray::detail::check {

// A short backtrace: return addresses, innermost first.
struct Origin {
  static constexpr int kFrames = 14;
  void *frames[kFrames];
  int n;
};

// Fills *o with the calling thread's backtrace (n is 0 where the platform
// has none). Costs a few microseconds; called outside the lock.
void capture(Origin *o);

// One tracked handle: what it forwards to and what it was.
struct Record {
  hurray_release_fn fn;  // the producer's release
  void *user_data;
  const char *made_by;  // static storage
  void *data;
  hurray_device device;
  hurray_dtype dtype;
  int32_t ndim;
  bool claimed;      // a consuming step is running on it (check::consume)
  uint32_t pending;  // releases that came while claimed: decided when the
                     //   step ends (the first one is real if it failed)
  Origin made;
  Origin pending_at;  // where the first of them happened
  char *label;        // malloc'd, or NULL
};

// A record whose reference is gone, kept for the report of a later second
// release: how it ended (released, or consumed by a step) and where.
struct Gone {
  uint64_t id;  // 0: an empty slot
  Record record;
  const char *ended_by;  // "released", or the consuming function's name
  Origin ended;
};

// All state, guarded by mu. Constant-initialised and trivially destructible,
// so releases during process exit (static destructors, atexit) still work.
struct Registry {
  static constexpr uint64_t kChunkSlots = 4096;
  static constexpr size_t kGoneKept = 4096;  // the most recent ones
  struct Chunk {
    uint64_t live;
    Record *slot[kChunkSlots];
  };

  std::mutex mu;
  // Signalled when a consuming step ends (claimed goes false), for a second
  // consuming step on a copy that waits for the first. A pthread condition
  // with its static initialiser: trivially destructible, like the rest.
  pthread_cond_t step_done = PTHREAD_COND_INITIALIZER;
  uint64_t next_id = 1;   // ids start at 1 and never repeat
  Chunk **dir = nullptr;  // dir[i] holds ids i*kChunkSlots ...; NULL when
  size_t dir_len = 0;     //   none of them is live any more (or yet)
  uint64_t live = 0;
  uint64_t tracked = 0;
  uint64_t untracked = 0;
  Gone *gone = nullptr;  // ring of kGoneKept, allocated at first use
  size_t gone_next = 0;

  // All below with mu held.
  Record *find(uint64_t id) const;
  // Files r under a new id; 0 when no memory is left (r not filed).
  uint64_t insert(Record *r);
  // Takes the record of `id` out of the index (the caller owns it).
  Record *remove(uint64_t id);
  // Keeps r (whose reference ended) in the ring, which then owns it, or
  // frees it when the ring cannot be allocated.
  void bury(uint64_t id, Record *r, const char *ended_by, const Origin &where);
  // Copies the ring entry of `id` into *out (label not copied); false when
  // it is not in the ring any more.
  bool find_gone(uint64_t id, Gone *out) const;
  // Some claimed record, or NULL; *id receives its id.
  Record *find_claimed(uint64_t *id) const;
};

Registry &registry();

// Frees a record and its label.
void free_record(Record *r);

// A growing NUL-terminated text on malloc; a failed allocation leaves what
// fitted and sets failed().
class Text {
 public:
  Text() = default;
  Text(const Text &) = delete;
  Text &operator=(const Text &) = delete;
  ~Text();
  void add(const char *fmt, ...) __attribute__((format(printf, 2, 3)));
  const char *c_str() const { return p_ != nullptr ? p_ : ""; }
  bool failed() const { return failed_; }

 private:
  char *p_ = nullptr;
  size_t n_ = 0, cap_ = 0;
  bool failed_ = false;
};

// "handle #7 (made by hurray_alloc: kDLCPU 0, dtype code 2 bits 32 lanes 1,
// ndim 2, data 0x..., label "...")"
void describe(Text *t, uint64_t id, const Record &r);
// The frames of `o` outside libhurray, one per line, each after `indent`.
void frames_text(Text *t, const Origin &o, const char *indent);

// Reports a second release (step "released"), consumption or use of `id`
// by `step` at `here`: builds the message from the ring, counts it in
// double_releases when `counted`, sends it to the hook and, with
// HURRAY_CHECK_STDERR, prints it. Call without mu.
void report_second_use(uint64_t id, const char *step, const Origin &here, bool counted);

// Settles consuming steps a forked child inherited (check::after_fork_child)
// on the child's first call into the checker. Call without mu.
void settle_if_forked();

// Registers the at-exit report of live handles (once).
void register_exit_report();

}  // namespace hurray::detail::check

#endif  // HURRAY_SRC_CHECKING_REGISTRY_H_
