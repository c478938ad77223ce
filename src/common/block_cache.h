// SPDX-License-Identifier: Apache-2.0
// A small bounded per-thread cache of fixed-size heap blocks, so that the
// export block and the share block of a steady stream of conversions are
// reused instead of going through malloc and free each time (the share and
// export paths' cost targets, docs/performance.md; spec §3.4 explains why the remaining work is so
// small that malloc dominated).
//
// Rules:
// - get() pops this thread's cache or falls back to malloc; put() pushes onto
//   the cache of the thread calling it (a deleter may run on any thread), and
//   frees when that cache already holds Bound blocks. So a thread never holds
//   more than Bound blocks, whatever the pattern.
// - Blocks are plain malloc blocks: put() may receive a block get() handed out
//   on another thread, or a larger malloc block (a view's, api/view.cc), and
//   std::free of a cached block is always valid.
// - Where a thread's cache lives: in a process-wide table of kSlots slots,
//   found from the thread pointer (unique among live threads) by a hash, two
//   candidate slots per thread. The fast paths read no thread_local: in a
//   dlopen'ed library every thread_local access is a __tls_get_addr call, and
//   the TLS-descriptor dialect that made it cheap is unsafe there
//   (docs/performance-history.md, "No TLS descriptors").
//   A slot is owned by the thread whose pointer its `owner` holds; only the
//   owner touches its list. A thread claims a free slot on its first put (a
//   CAS) and frees it when it exits (a thread_local destructor, registered in
//   that slow path only); a thread whose two slots are both owned by other
//   live threads simply uses malloc and free.
// - A put after the thread's cache was freed (another thread_local destructor
//   that runs later and drops a tensor) frees the block directly. The main
//   thread's cache is freed at exit().
// - fork(): the child keeps the forking thread's slot (the memory is copied
//   with it); the slots of the parent's other threads are emptied and freed
//   in the child (pthread_atfork), since a new thread of the child may reuse
//   such a thread's pointer.
// - No atomic read-modify-write on the fast paths: `owner` is read with a
//   relaxed load, the list is touched only by its owner; a slot passes to
//   another thread only through the exiting owner's release store and the
//   claimer's acquire CAS. The block itself moves between threads only
//   through the caller's own synchronisation (the same that orders any use of
//   a tensor before its deleter).
// - Under AddressSanitizer a cached block is poisoned past its link word, so a
//   use after the deleter is still reported.
#ifndef HURRAY_SRC_COMMON_BLOCK_CACHE_H_
#define HURRAY_SRC_COMMON_BLOCK_CACHE_H_

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define HURRAY_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define HURRAY_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define HURRAY_POISON(p, n) ((void)(p), (void)(n))
#define HURRAY_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace hurray::detail {

// A value unique to the calling thread among live threads: the thread
// pointer (x86-64: %fs:0, the TCB's self pointer; elsewhere the compiler's
// builtin, or pthread_self()). One instruction where it can be.
inline uintptr_t thread_id_word() {
#if defined(__x86_64__)
  uintptr_t tp;
  __asm__("mov %%fs:0, %0" : "=r"(tp));
  return tp;
#elif defined(__aarch64__)
  return reinterpret_cast<uintptr_t>(__builtin_thread_pointer());
#else
  return static_cast<uintptr_t>(pthread_self());
#endif
}

// `Size` bytes per block (at least one pointer), at most `Bound` cached per
// thread. `Tag` separates instances (the library's own, tests' own).
template <size_t Size, uint32_t Bound, typename Tag>
class BlockCache {
  static_assert(Size >= sizeof(void *), "a block holds the link to the next one");

 public:
  static constexpr size_t kSize = Size;
  static constexpr uint32_t kBound = Bound;
  static constexpr uint32_t kSlots = 256;  // a power of two; slots pair up (i, i ^ 1)

  // A block of Size bytes (contents undefined), or NULL when malloc fails.
  static void *get() {
    Slot *s = mine(thread_id_word());
    Link *b = s != nullptr ? s->head : nullptr;
    if (b == nullptr) return std::malloc(Size);
    HURRAY_UNPOISON(b, Size);
    s->head = b->next;
    --s->count;
    return b;
  }

  // A cached block of this thread's (contents undefined), or NULL when the
  // cache is empty (then get() would call malloc): for callers that keep
  // their fast path free of calls.
  static void *try_get() {
    Slot *s = mine(thread_id_word());
    Link *b = s != nullptr ? s->head : nullptr;
    if (b == nullptr) return nullptr;
    HURRAY_UNPOISON(b, Size);
    s->head = b->next;
    --s->count;
    return b;
  }

  // put() where it needs no call: true when `p` went into this thread's
  // cache; false (nothing done) when put() would take its slow path.
  static bool try_put(void *p) {
    Slot *s = mine(thread_id_word());
    if (s == nullptr || s->count >= Bound) return false;
    push(*s, p);
    return true;
  }

  // Takes back a block from get() of any thread (or any malloc of at least
  // Size bytes: the rest of a larger block is simply unused while cached).
  static void put(void *p) {
    const uintptr_t me = thread_id_word();
    Slot *s = mine(me);
    if (s != nullptr && s->count < Bound) {
      push(*s, p);
      return;
    }
    put_slow(p, me, s);
  }

  // For a thread that never exits (libhurray's detached watcher and retirer
  // threads): its puts free directly and it never claims a slot. A thread
  // that claims one registers a thread_local destructor, and glibc keeps
  // that registration in a 32-byte node freed only when the thread exits,
  // so a thread alive at exit() would hold it for ever (LeakSanitizer
  // reports it). Call before the thread's first put.
  static void bypass_this_thread() {
    State &st = state_;
    if (st.phase == kUnclaimed) st.phase = kDead;
  }

  // Blocks this thread's cache holds now (tests).
  static uint32_t cached() {
    const Slot *s = mine(thread_id_word());
    return s != nullptr ? s->count : 0;
  }

  // Slots owned by some thread now (tests).
  static uint32_t slots_in_use() {
    uint32_t n = 0;
    for (const Slot &s : slots_) n += s.owner.load(std::memory_order_acquire) != 0;
    return n;
  }

  // Frees this thread's cached blocks (tests; the thread exit does it too).
  static void drain() {
    if (Slot *s = mine(thread_id_word())) empty(*s);
  }

 private:
  struct Link {
    Link *next;
  };
  // One thread's cache; a cache line each, so owners never share one.
  struct alignas(64) Slot {
    std::atomic<uintptr_t> owner;  // 0: free
    Link *head;
    uint32_t count;
  };
  enum : uint32_t { kUnclaimed = 0, kLive = 1, kDead = 2 };
  // This thread's slot once claimed, and whether its cache was freed.
  // Trivial and zero-initialised; read only on the slow paths.
  struct State {
    Slot *slot;
    uint32_t phase;
  };
  // Frees the cache and gives the slot back when its thread exits.
  struct Reaper {
    Reaper() {}  // user-provided: construction registers the destructor
    ~Reaper() {
      State &st = state_;
      if (st.slot != nullptr) {
        empty(*st.slot);
        st.slot->owner.store(0, std::memory_order_release);
      }
      st.slot = nullptr;
      st.phase = kDead;
    }
  };

  // The byte offset in slots_ of `me`'s first slot (its second is the other
  // slot of the same aligned pair): a multiplicative hash, since thread
  // pointers are far apart and share their low bits. Scaled by shifting the
  // hash's top byte straight into place.
  static_assert(sizeof(Slot) == 64 && kSlots == 256, "home() assumes 256 slots of 64 bytes");
  static uintptr_t home(uintptr_t me) {
    return ((me * UINT64_C(0x9E3779B97F4A7C15)) >> (64 - 8 - 6)) & ((kSlots - 1) * sizeof(Slot));
  }
  static Slot *at(uintptr_t offset) {
    return reinterpret_cast<Slot *>(reinterpret_cast<char *>(slots_) + offset);
  }

  // The slot `me` owns, or NULL.
  static Slot *mine(uintptr_t me) {
    const uintptr_t h = home(me);
    Slot *s = at(h);
    if (s->owner.load(std::memory_order_relaxed) == me) return s;
    s = at(h ^ sizeof(Slot));
    if (s->owner.load(std::memory_order_relaxed) == me) return s;
    return nullptr;
  }

  static void push(Slot &s, void *p) {
    Link *b = static_cast<Link *>(p);
    b->next = s.head;
    HURRAY_POISON(reinterpret_cast<char *>(b) + sizeof(Link), Size - sizeof(Link));
    s.head = b;
    ++s.count;
  }

  static void empty(Slot &s) {
    while (Link *b = s.head) {
      HURRAY_UNPOISON(b, Size);
      s.head = b->next;
      std::free(b);
    }
    s.count = 0;
  }

  __attribute__((noinline)) static void put_slow(void *p, uintptr_t me, Slot *s) {
    if (s == nullptr && Bound > 0) {
      State &st = state_;
      if (st.phase == kUnclaimed && (s = claim(me)) != nullptr) {
        // First put on this thread: constructing the thread_local registers
        // its destructor for this thread's exit.
        static thread_local Reaper reaper;
        (void)reaper;
        st.slot = s;
        st.phase = kLive;
        push(*s, p);
        return;
      }
    }
    std::free(p);  // cache full, no slot free, or this thread's cache already freed
  }

  // Takes one of `me`'s two slots if one is free.
  static Slot *claim(uintptr_t me) {
    static const int forks_handled = pthread_atfork(nullptr, nullptr, &after_fork_in_child);
    (void)forks_handled;  // without the handler a child only keeps stale slots until reuse
    const uintptr_t h = home(me);
    const uintptr_t candidates[2] = {h, h ^ sizeof(Slot)};
    for (uintptr_t offset : candidates) {
      Slot *s = at(offset);
      uintptr_t expected = 0;
      if (s->owner.compare_exchange_strong(expected, me, std::memory_order_acquire,
                                           std::memory_order_relaxed)) {
        return s;
      }
    }
    return nullptr;
  }

  // The child of fork() runs one thread: every slot it does not own belonged
  // to a thread that does not exist here; free those caches (the child's copy).
  static void after_fork_in_child() {
    const uintptr_t me = thread_id_word();
    for (Slot &s : slots_) {
      const uintptr_t owner = s.owner.load(std::memory_order_relaxed);
      if (owner != 0 && owner != me) {
        empty(s);
        s.owner.store(0, std::memory_order_relaxed);
      }
    }
  }

  static Slot slots_[kSlots];
  static thread_local State state_;
};

template <size_t Size, uint32_t Bound, typename Tag>
typename BlockCache<Size, Bound, Tag>::Slot BlockCache<Size, Bound, Tag>::slots_[kSlots]{};
template <size_t Size, uint32_t Bound, typename Tag>
thread_local typename BlockCache<Size, Bound, Tag>::State BlockCache<Size, Bound, Tag>::state_{};

// The library's one instance: export blocks of both DLPack forms and share
// control blocks (each user static_asserts that its block fits). 16 blocks
// of 160 bytes per thread at most.
struct LibraryBlocksTag;
using LibraryBlocks = BlockCache<160, 16, LibraryBlocksTag>;

}  // namespace hurray::detail

#endif  // HURRAY_SRC_COMMON_BLOCK_CACHE_H_
