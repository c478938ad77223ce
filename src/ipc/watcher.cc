// SPDX-License-Identifier: Apache-2.0
// The lifetime watcher (docs/impl/ipc.md §5): one detached thread per
// process, started at the first export, blocked in epoll_wait on the read
// ends of every live export's pipe. The kernel reports EPOLLHUP on a read
// end once every copy of its write end is closed, in every process: the
// receiver released its handle, a message was discarded, or its holder died.
// The thread then releases the reference the export consumed.
//
// Fork: the child has no watcher thread and must not use the parent's epoll
// instance (it is shared with the parent). An atfork child handler (no
// allocation, no system call) sets the parent's state aside; the child's
// next export closes those fds, forgets those exports without releasing
// them (their references belong to the parent) and starts a watcher of its
// own.
#include "ipc/watcher.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <new>

#include "common/block_cache.h"
#include "common/diagnostics.h"
#include "common/error.h"

namespace hurray::detail {

struct Watch {
  int fd;              // read end of the export's pipe
  hurray_buffer held;  // the reference released at end of file
  Watch *prev;
  Watch *next;
  // Runs once the watch is done (after the release at end of file, or when
  // the export is taken back): a GPU export's IPC event (gpu_message.cc).
  void (*done)(void *);
  void *done_arg;
};

namespace {

// Doubly linked ring with a sentinel.
void ring_init(Watch *head) { head->prev = head->next = head; }
void ring_link(Watch *head, Watch *w) {
  w->next = head->next;
  w->prev = head;
  head->next->prev = w;
  head->next = w;
}
void ring_unlink(Watch *w) {
  w->prev->next = w->next;
  w->next->prev = w->prev;
  w->prev = w->next = w;
}

struct State {
  std::mutex mu;        // guards every field below; never held while a release runs
  int epfd = -1;        // this process's epoll instance; -1 until the first export
  Watch live;           // exports being watched
  int stale_epfd = -1;  // in a forked child: the parent's instance and exports
  Watch stale;
  State() {
    ring_init(&live);
    ring_init(&stale);
  }
};

State &state();

// The forking thread holds mu across fork(), so the child's copy is
// consistent and unlocked by the thread that locked it (the one thread the
// child has).
void prepare_fork() { state().mu.lock(); }
void parent_after_fork() { state().mu.unlock(); }
void child_after_fork() {
  State &s = state();
  if (s.epfd >= 0) {
    // Splice the parent's exports onto the stale ring; nothing allocated.
    s.stale_epfd = s.epfd;
    s.epfd = -1;
    if (s.live.next != &s.live) {
      Watch *first = s.live.next, *last = s.live.prev;
      last->next = s.stale.next;
      s.stale.next->prev = last;
      s.stale.next = first;
      first->prev = &s.stale;
      ring_init(&s.live);
    }
  }
  s.mu.unlock();
}

// Never destroyed: the thread may still run while the process exits.
State &state() {
  static State *s = [] {
    State *p = new State;
    // Can only fail with ENOMEM; a child forked then would share the
    // parent's epoll instance, which every export in it would report.
    (void)pthread_atfork(&prepare_fork, &parent_after_fork, &child_after_fork);
    return p;
  }();
  return *s;
}

// Handles one end of file. Every watch is registered with EPOLLONESHOT, so
// the kernel reports it to exactly one epoll_wait caller (the watcher or an
// exporting thread that helps, reap_ready) and this runs once per watch.
void handle_end_of_file(State &s, int epfd, Watch *w) {
  {
    std::lock_guard<std::mutex> lock(s.mu);
    ring_unlink(w);
    (void)epoll_ctl(epfd, EPOLL_CTL_DEL, w->fd, nullptr);
  }
  close(w->fd);
  hurray_buffer_release(&w->held);
  if (w->done != nullptr) w->done(w->done_arg);
  count_ipc_return();
  delete w;
}

void *watch_loop(void *arg) {
  // This thread lives until exit: no per-thread block cache (block_cache.h).
  hurray::detail::LibraryBlocks::bypass_this_thread();
  const int epfd = static_cast<int>(reinterpret_cast<intptr_t>(arg));
  State &s = state();
  epoll_event events[64];
  for (;;) {
    const int n = epoll_wait(epfd, events, 64, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return nullptr;  // the instance is gone (cannot happen in the process that made it)
    }
    for (int i = 0; i < n; ++i)
      handle_end_of_file(s, epfd, static_cast<Watch *>(events[i].data.ptr));
  }
}

// An exporting thread handles up to kReapPerExport ends of file that are
// already there (without waiting), so that a loop exporting faster than the
// watcher thread is scheduled still holds only what is alive, plus at most
// that many.
constexpr int kReapPerExport = 16;
void reap_ready(State &s, int epfd) {
  epoll_event events[kReapPerExport];
  const int n = epoll_wait(epfd, events, kReapPerExport, 0);
  for (int i = 0; i < n; ++i) handle_end_of_file(s, epfd, static_cast<Watch *>(events[i].data.ptr));
}

// In a forked child: the parent's fds closed, its exports forgotten.
void drop_stale(State &s) {
  if (s.stale_epfd >= 0) {
    close(s.stale_epfd);
    s.stale_epfd = -1;
  }
  while (s.stale.next != &s.stale) {
    Watch *w = s.stale.next;
    ring_unlink(w);
    close(w->fd);
    delete w;
  }
}

// Makes the epoll instance and its thread; with s.mu held.
int32_t start_watcher(State &s) {
  const int epfd = epoll_create1(EPOLL_CLOEXEC);
  if (epfd < 0) {
    return fail(HURRAY_ERR_IPC, "epoll_create1 for the IPC watcher failed: %s",
                std::strerror(errno));
  }
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  // The thread takes no signals: it inherits a full mask.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t tid;
  const int err = pthread_create(&tid, &attr, &watch_loop,
                                 reinterpret_cast<void *>(static_cast<intptr_t>(epfd)));
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  pthread_attr_destroy(&attr);
  if (err != 0) {
    close(epfd);
    return fail(HURRAY_ERR_IPC, "starting the IPC watcher thread failed: %s", std::strerror(err));
  }
  s.epfd = epfd;
  return HURRAY_OK;
}

}  // namespace

Watch *watch_export(int read_fd, const hurray_buffer &held, int32_t *status) {
  auto *w = new (std::nothrow) Watch{read_fd, held, nullptr, nullptr, nullptr, nullptr};
  if (w == nullptr) {
    close(read_fd);
    *status = fail(HURRAY_ERR_OUT_OF_MEMORY, "allocating an IPC watch record failed");
    return nullptr;
  }
  State &s = state();
  int epfd;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    epfd = s.epfd;
  }
  // A release it runs may export (and so come back here): no lock held.
  if (epfd >= 0) reap_ready(s, epfd);
  std::lock_guard<std::mutex> lock(s.mu);
  drop_stale(s);
  if (s.epfd < 0) {
    int32_t st = start_watcher(s);
    if (st != HURRAY_OK) {
      close(read_fd);
      delete w;
      *status = st;
      return nullptr;
    }
  }
  epoll_event ev;
  std::memset(&ev, 0, sizeof ev);
  // EPOLLHUP and EPOLLERR are always reported (data a receiver writes into
  // the pipe never wakes anyone); once only.
  ev.events = EPOLLONESHOT;
  ev.data.ptr = w;
  if (epoll_ctl(s.epfd, EPOLL_CTL_ADD, read_fd, &ev) != 0) {
    const int err = errno;
    close(read_fd);
    delete w;
    *status = fail(err == ENOMEM || err == ENOSPC ? HURRAY_ERR_OUT_OF_MEMORY : HURRAY_ERR_IPC,
                   "epoll_ctl(EPOLL_CTL_ADD) of an export's lifetime pipe failed: %s",
                   std::strerror(err));
    return nullptr;
  }
  ring_link(&s.live, w);
  *status = HURRAY_OK;
  return w;
}

bool find_export(int write_fd, void (*use)(const hurray_buffer &held, void *ctx), void *ctx) {
  struct stat want;
  if (fstat(write_fd, &want) != 0 || !S_ISFIFO(want.st_mode)) return false;
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  // Only this process's own exports: the stale ring of a forked child holds
  // the parent's.
  for (Watch *w = s.live.next; w != &s.live; w = w->next) {
    struct stat st;
    if (fstat(w->fd, &st) == 0 && st.st_dev == want.st_dev && st.st_ino == want.st_ino) {
      use(w->held, ctx);
      return true;
    }
  }
  return false;
}

void unwatch_export(Watch *w) {
  State &s = state();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    ring_unlink(w);
    (void)epoll_ctl(s.epfd, EPOLL_CTL_DEL, w->fd, nullptr);
  }
  close(w->fd);
  if (w->done != nullptr) w->done(w->done_arg);
  delete w;
}

void watch_when_done(Watch *w, void (*done)(void *), void *arg) {
  // Under the lock that handle_end_of_file takes before it reads them: the
  // kernel's ordering (end of file only after the write end left) is
  // invisible to a thread checker.
  std::lock_guard<std::mutex> lock(state().mu);
  w->done = done;
  w->done_arg = arg;
}

}  // namespace hurray::detail
