// A small bounded per-thread cache of fixed-size heap blocks, so that the
// export block and the share block of a steady stream of conversions are
// reused instead of going through malloc and free each time (issue 8; spec
// §3.4 explains why the remaining work is so small that malloc dominated).
//
// Rules:
// - get() pops this thread's cache or falls back to malloc; put() pushes onto
//   the cache of the thread calling it (a deleter may run on any thread), and
//   frees when that cache already holds Bound blocks. So a thread never holds
//   more than Bound blocks, whatever the pattern.
// - Blocks are plain malloc blocks: put() may receive a block get() handed out
//   on another thread, and std::free of a cached block is always valid.
// - A thread's cache is freed when the thread exits (a thread_local
//   destructor registered on the first put of that thread); a put after that
//   (another thread_local destructor that runs later and drops a tensor) frees
//   the block directly. The main thread's cache is freed at exit().
// - fork(): the child's only thread inherits its parent thread's cache (the
//   memory is copied with it) and frees it when it exits, like any thread.
// - No atomics: each cache is touched only by its own thread; the block moves
//   between threads only through the caller's own synchronisation (the same
//   that orders any use of a tensor before its deleter).
// - Under AddressSanitizer a cached block is poisoned past its link word, so a
//   use after the deleter is still reported.
#ifndef HURRAY_SRC_BLOCK_CACHE_H_
#define HURRAY_SRC_BLOCK_CACHE_H_

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

namespace hurray {

// `Size` bytes per block (at least one pointer), at most `Bound` cached per
// thread. `Tag` separates instances (the library's own, tests' own).
template <size_t Size, uint32_t Bound, typename Tag>
class BlockCache {
  static_assert(Size >= sizeof(void *), "a block holds the link to the next one");

 public:
  static constexpr size_t kSize = Size;
  static constexpr uint32_t kBound = Bound;

  // A block of Size bytes (contents undefined), or NULL when malloc fails.
  static void *get() {
    List &l = list_;
    Link *b = l.head;
    if (b == nullptr) return std::malloc(Size);
    HURRAY_UNPOISON(b, Size);
    l.head = b->next;
    --l.count;
    return b;
  }

  // Takes back a block from get() of any thread (or any malloc of Size bytes).
  static void put(void *p) {
    List &l = list_;
    if (l.state == kLive && l.count < Bound) {
      push(l, p);
      return;
    }
    put_slow(p);
  }

  // Blocks this thread's cache holds now (tests).
  static uint32_t cached() { return list_.count; }

  // Frees this thread's cached blocks (tests; the thread exit does it too).
  static void drain() {
    List &l = list_;
    while (Link *b = l.head) {
      HURRAY_UNPOISON(b, Size);
      l.head = b->next;
      std::free(b);
    }
    l.count = 0;
  }

 private:
  struct Link {
    Link *next;
  };
  enum : uint32_t { kUnregistered = 0, kLive = 1, kDead = 2 };
  // Trivial and zero-initialised, so access needs no guard.
  struct List {
    Link *head;
    uint32_t count;
    uint32_t state;
  };
  // Frees the cache when its thread exits.
  struct Reaper {
    Reaper() {}  // user-provided: construction registers the destructor
    ~Reaper() {
      drain();
      list_.state = kDead;
    }
  };

  static void push(List &l, void *p) {
    Link *b = static_cast<Link *>(p);
    b->next = l.head;
    HURRAY_POISON(reinterpret_cast<char *>(b) + sizeof(Link), Size - sizeof(Link));
    l.head = b;
    ++l.count;
  }

  __attribute__((noinline)) static void put_slow(void *p) {
    List &l = list_;
    if (l.state == kUnregistered && Bound > 0) {
      // First put on this thread: constructing the thread_local registers
      // its destructor for this thread's exit.
      static thread_local Reaper reaper;
      (void)reaper;
      l.state = kLive;
      push(l, p);
      return;
    }
    std::free(p);  // cache full, or this thread's cache already freed
  }

  static thread_local List list_;
};

template <size_t Size, uint32_t Bound, typename Tag>
thread_local typename BlockCache<Size, Bound, Tag>::List BlockCache<Size, Bound, Tag>::list_{};

// The library's one instance: export blocks of both DLPack forms and share
// control blocks (each user static_asserts that its block fits). 16 blocks
// of 160 bytes per thread at most.
struct LibraryBlocksTag;
using LibraryBlocks = BlockCache<160, 16, LibraryBlocksTag>;

}  // namespace hurray

#endif  // HURRAY_SRC_BLOCK_CACHE_H_
