/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ipc.pml: the cross-process lifetime protocol of libhurray (docs/impl/ipc.md
 * §5), checked with Spin (tests/model/run.sh; the step-by-step map to the
 * code: docs/impl/model.md).
 *
 * What runs: a sender process S (process 0) allocates shareable memory
 * (hurray_alloc with HURRAY_ALLOC_SHAREABLE: a memfd and its mapping),
 * shares it NR + 1 ways (hurray_share), keeps one handle, which a second
 * thread of S reads and releases, and sends one handle to each of NR
 * receiver processes in turn (hurray_ipc_send: the export with its lifetime
 * pipe and watch, sendmsg, the close of its own copies of the fds; or, when
 * the receiver's end of the socket is gone, the export taken back). S's
 * watcher thread waits in epoll_wait for the end of file of every watched
 * pipe and then gives the export's reference back (the sender's return); an
 * exporting thread first handles the ends of file already due (reap_ready).
 * Receiver k (processes 1..NR) receives (recvmsg), imports (or refuses the
 * message, closing its fds), reads the memory, and releases the handle
 * (munmap, close of the memfd and of the lifetime fd). A receiver that is
 * done stays alive (a long-lived process), so nothing it forgot to close is
 * closed for it. A killer may SIGKILL any live process, up to KILLS times,
 * between any two steps: the kernel then closes that process's fds, drops
 * its mappings, closes its socket ends and, for a receiver, drops the
 * messages still queued for it (their fds with them).
 *
 * The kernel is modelled by what it counts: the memfd's references (fds in
 * any process, in flight, mappings: MEMREFS) and each pipe's write-end
 * copies (WR(k)); EPOLLHUP is reported for pipe k once WR(k) is 0, to one
 * epoll_wait caller (EPOLLONESHOT).
 *
 * Bound (the default): NR = 2 receivers, so 3 processes, 2 messages (two
 * lifetime pipes) of one allocation shared 3 ways, and KILLS = 2. --large in
 * run.sh: NR = 3 (4 processes, 3 messages, shared 4 ways), KILLS = 2.
 *
 * Properties (each checked by run.sh):
 *  P1 exactly once: the producer's release (memfd_release of the
 *     allocation in S) runs at most once (assert), and it has run, unless S
 *     was killed, once every thread is quiescent (the `timeout` check in
 *     quiescent()) and, under weak fairness, eventually for good (LTL
 *     `returned`, -a -f).
 *  P2 no use after release: a receiver reads the memory only while the
 *     reference its message stands for has not been given back in S (the
 *     assert in receiver: !returned[k], at its last read), S's own holder
 *     only while the share block lives; no Watch is handled after it was
 *     deleted (the asserts in handle_eof and in send's abort: watch[k]).
 *  P3 every reference is eventually returned, also after kills: when
 *     nothing can move (timeout), no fd, mapping, in-flight message, pipe,
 *     watch or share block is left, and the LTL claim `returned`
 *     (<>[] everything returned) holds with weak fairness.
 *  P4 fds held are bounded by what is alive, in every state (the monitor
 *     process): S holds its allocation's memfd only while the allocation
 *     lives, a pipe's read end only while that export's reference has not
 *     been given back, and a message's two fds only while it sends that
 *     message; a receiver holds the message's two fds only while it holds
 *     the handle they became or is releasing it.
 *  -DLIVENESS leaves the monitor and the quiescent check (safety) out of
 *  the liveness search; -DNO_MONITOR, -DNO_QUIESCENT one of them.
 *
 * Seeded mutations (each must give a counterexample; run.sh checks it):
 *  MUT_LOST_DEC       the share count's decrement a plain load and store:
 *                     the producer is never released (P1, P3).
 *  MUT_EARLY_RELEASE  the watcher returns the reference once the sender has
 *                     closed its own copy of the write end, without waiting
 *                     for the copies in flight and in the receiver: the
 *                     receiver then reads memory whose reference is back (P2).
 *  MUT_DOUBLE_RETURN  the read ends registered without EPOLLONESHOT: the
 *                     watcher and an exporting thread both handle one end of
 *                     file and give one reference back twice (P1, P2).
 *  MUT_RELEASE_ORDER  a receiver's release closes the lifetime fd before it
 *                     unmaps the memory: its sender gets the reference back
 *                     while the receiver still maps the pages (P2).
 *  MUT_ABORT_ORDER    a failed send closes the message's write end before it
 *                     takes the watch back: the watcher returns the
 *                     reference the caller still owns, and the caller
 *                     releases it too (P1, P2).
 *  MUT_FD_LEAK        a refused message's fds are not closed by the import:
 *                     the receiver holds fds for no handle (P4) and the
 *                     sender's reference never comes back (P3).
 */

#ifndef NR
#define NR 2
#endif
#ifndef KILLS
#define KILLS 2
#endif
#define S 0
#define NP 4  /* arrays are indexed by process: S, receivers 1..3 */

bool alive[NP];
byte kills;
/* S's fds and mapping */
bool s_memfd;    /* the allocation's memfd (MemfdBlock::memfd) */
bool s_map;      /* its mapping */
bool s_rd[NP];   /* read end of export k's pipe (k: the receiver) */
bool s_wr[NP];   /* the message's write end, until close_message_fds */
bool s_dup[NP];  /* the message's dup of the memfd, until close_message_fds */
byte sending;    /* the export S's main thread is in (0: none) */
/* sockets: one connected pair per receiver */
bool q[NP];      /* a message queued for receiver k: one memfd and one write-end reference */
bool sk_snd[NP]; /* S's end of socket k is open */
bool sk_rcv[NP]; /* receiver k's end is open */
/* receiver k's fds and mapping */
bool r_memfd[NP];
bool r_wr[NP];
bool r_map[NP];
bool r_busy[NP]; /* inside the handle's release */
/* S's watcher state */
bool armed[NP];    /* registered in S's epoll instance, not reported yet */
bool watch[NP];    /* the Watch record exists (linked in the live ring) */
bool returned[NP]; /* the watch's reference has been given back */
/* S's share block and the producer */
byte refs;
bool blk_live;
byte prod_rel;   /* how often the allocation's memfd_release ran */

#define MEMREFS (s_memfd + s_map + s_dup[1] + s_dup[2] + s_dup[3] + q[1] + q[2] + q[3] \
                 + r_memfd[1] + r_memfd[2] + r_memfd[3] + r_map[1] + r_map[2] + r_map[3])
#define WR(k) (s_wr[k] + q[k] + r_wr[k])
#ifdef MUT_EARLY_RELEASE
#define HUP(k) (!s_wr[k])
#else
#define HUP(k) (WR(k) == 0)
#endif
/* the epoll report of read end k: EPOLLONESHOT disarms it as it is reported */
#ifdef MUT_DOUBLE_RETURN
#define TAKE(k) skip
#else
#define TAKE(k) armed[k] = 0
#endif

/* Everything given back (P3). */
#define PIPE_DONE(k) (WR(k) == 0 && !s_rd[k] && !watch[k])
#define RETURNED (MEMREFS == 0 && PIPE_DONE(1) && PIPE_DONE(2) && PIPE_DONE(3) && !blk_live \
                  && (prod_rel == 1 || !alive[S]))

/* P4: each fd only while what it serves is alive. */
#define S_RD_OK(k) (!s_rd[k] || !returned[k])
#define S_MSG_OK(k) (!(s_wr[k] || s_dup[k]) || sending == k)
#define R_OK(k) (!(r_memfd[k] || r_wr[k]) || r_busy[k] || r_map[k])
#define FDS_BOUNDED (prod_rel == 0 || !s_memfd) && S_RD_OK(1) && S_RD_OK(2) && S_RD_OK(3) \
                    && S_MSG_OK(1) && S_MSG_OK(2) && S_MSG_OK(3) && R_OK(1) && R_OK(2) && R_OK(3)

#ifdef MUT_LOST_DEC
#define DECREMENT tmp = refs; refs = tmp - 1
#else
#define DECREMENT atomic { tmp = refs; assert(tmp > 0); refs = tmp - 1 }
#endif

/* share_release in S (src/handle/share_block.cc); on the last reference the
 * source's release, memfd_release (src/device/memfd_block.cc): the producer's
 * release, then munmap and close. */
inline share_release() {
  atomic { assert(blk_live); tmp = refs };  /* refs.load(acquire) */
  if
  :: tmp != 1 -> DECREMENT
  :: else -> skip
  fi;
  if
  :: tmp == 1 ->  /* one step: only S's own fd and mapping change in it */
       atomic { blk_live = 0; refs = 0; prod_rel++; assert(prod_rel == 1); s_map = 0; s_memfd = 0; tmp = 0 }
  :: else -> tmp = 0
  fi
}

/* handle_end_of_file (src/ipc/watcher.cc) for export j, reported to this
 * thread: unlinked and deleted from epoll under the lock, the read end
 * closed, the reference released. */
inline handle_eof(j) {
  /* P2: the receiver's mapping of export j is gone before its sender gets
   * the reference back (memfd_release unmaps before the lifetime fd closes). */
  atomic { assert(watch[j]); assert(!r_map[j]); watch[j] = 0; armed[j] = 0; s_rd[j] = 0;
           returned[j] = 1; j = 0 };
  share_release()
}

/* reap_ready: an exporting thread takes the ends of file already due. */
inline reap() {
  do
  :: atomic { armed[1] && HUP(1) -> TAKE(1); j = 1 }; handle_eof(j)
  :: atomic { armed[2] && HUP(2) -> TAKE(2); j = 2 }; handle_eof(j)
  :: atomic { armed[3] && HUP(3) -> TAKE(3); j = 3 }; handle_eof(j)
  :: else -> break  /* none due */
  od
}

/* hurray_ipc_send of one handle to receiver k (src/ipc/socket.cc,
 * src/ipc/export.cc): prepare_export (pipe2, the memfd's dup, watch_export),
 * sendmsg, then commit (close_message_fds, src cleared) or abort. */
inline send(k) {
  /* memfd_block_of, pipe2, fcntl(F_DUPFD_CLOEXEC) of the memfd */
  atomic { assert(blk_live); sending = k; s_rd[k] = 1; s_wr[k] = 1; s_dup[k] = 1 };
  reap();                                                /* watch_export: reap_ready */
  atomic { watch[k] = 1; armed[k] = 1 };                 /* epoll_ctl ADD, ring_link */
  if
  :: atomic { sk_rcv[k] -> q[k] = 1 };                 /* sendmsg(SCM_RIGHTS) */
     /* close_message_fds; commit_export: src cleared, its reference lives
      * on in the watch */
     atomic { s_dup[k] = 0; s_wr[k] = 0; sending = 0 }
  :: atomic { !sk_rcv[k] -> skip };                    /* sendmsg: EPIPE */
#ifdef MUT_ABORT_ORDER
     atomic { s_dup[k] = 0; s_wr[k] = 0 };
     atomic { assert(watch[k]); watch[k] = 0; armed[k] = 0; s_rd[k] = 0; sending = 0 };
#else
     /* abort_export: unwatch_export (the read end closed), then close_message_fds */
     atomic { assert(watch[k]); watch[k] = 0; armed[k] = 0; s_rd[k] = 0 };
     atomic { s_dup[k] = 0; s_wr[k] = 0; sending = 0 };
#endif
     share_release()                                   /* the caller still owns src */
  fi
}

/* S's own holder: reads the memory, then releases its handle (checked at
 * share_release's first step, which asserts blk_live: the release of the
 * producer comes after the block's). */
proctype sender_local() {
  byte tmp;
  {
    share_release()  /* hurray_buffer_release */
  } unless { !alive[S] }
}

proctype sender_main() {
  byte k, j, tmp;
  {
    atomic { s_memfd = 1; s_map = 1 };              /* hurray_alloc, HURRAY_ALLOC_SHAREABLE */
    atomic { blk_live = 1; refs = NR + 1 };         /* hurray_share(h, NR + 1, out) */
    run sender_local();
    k = 1;
    do
    :: k <= NR -> send(k); k++
    :: else -> break
    od
  } unless { !alive[S] }
}

/* The watcher thread: epoll_wait, then handle_end_of_file. */
proctype watcher() {
  byte j, tmp;
  {
end_wait:
    do
    :: atomic { armed[1] && HUP(1) -> TAKE(1); j = 1 }; handle_eof(j)
    :: atomic { armed[2] && HUP(2) -> TAKE(2); j = 2 }; handle_eof(j)
    :: atomic { armed[3] && HUP(3) -> TAKE(3); j = 3 }; handle_eof(j)
    od
  } unless { !alive[S] }
}

proctype receiver(byte k) {
  {
    /* hurray_ipc_recv: recvmsg (the queued references become this
     * process's fds) and hurray_ipc_import (the checks of ipc.md §3.2, then
     * mmap), or its refusal, whose close_message_fds closes both fds. One
     * step each: between them only this process's fd table differs, which
     * a kill empties either way. */
    if
    :: atomic { q[k] -> q[k] = 0; r_memfd[k] = 1; r_wr[k] = 1; r_map[k] = 1 }
    :: atomic { q[k] -> q[k] = 0;
#ifdef MUT_FD_LEAK
                r_memfd[k] = 1; r_wr[k] = 1;
#endif
              }; goto done
    :: atomic { !q[k] && !sk_snd[k] -> skip }; goto done  /* HURRAY_ERR_IPC_CLOSED */
    fi;
    /* hurray_buffer_release: memfd_release, munmap and the memfd's close,
     * then the lifetime fd's. The holder's last read of the memory is
     * checked at the release's first step: `returned` only ever goes from 0
     * to 1, so no earlier read can fail where this one passes. */
#ifdef MUT_RELEASE_ORDER
    /* the lifetime fd closed before the mapping goes */
    atomic { assert(!returned[k]); assert(MEMREFS > 0); r_busy[k] = 1; r_wr[k] = 0 };
    atomic { r_map[k] = 0; r_memfd[k] = 0; r_busy[k] = 0 };
#else
    atomic { assert(!returned[k]); assert(MEMREFS > 0); r_busy[k] = 1; r_map[k] = 0; r_memfd[k] = 0 };
    atomic { r_wr[k] = 0; r_busy[k] = 0 };
#endif
done:
    skip
  } unless { !alive[k] }
}

/* SIGKILL of process p: what the kernel does when it dies. */
inline kill_sender() {
  alive[S] = 0;
  s_memfd = 0; s_map = 0; sending = 0;
  s_rd[1] = 0; s_rd[2] = 0; s_rd[3] = 0;
  s_wr[1] = 0; s_wr[2] = 0; s_wr[3] = 0;
  s_dup[1] = 0; s_dup[2] = 0; s_dup[3] = 0;
  sk_snd[1] = 0; sk_snd[2] = 0; sk_snd[3] = 0;
  /* its memory: the watches, the epoll instance, the share block */
  watch[1] = 0; watch[2] = 0; watch[3] = 0;
  armed[1] = 0; armed[2] = 0; armed[3] = 0;
  blk_live = 0; refs = 0;
  kills++
}
inline kill_receiver(p) {
  alive[p] = 0;
  r_memfd[p] = 0; r_wr[p] = 0; r_map[p] = 0; r_busy[p] = 0;
  sk_rcv[p] = 0;
  q[p] = 0;  /* its receive queue is purged: the in-flight fds are dropped */
  kills++
}

proctype killer() {
  do
  :: atomic { kills < KILLS && alive[S] -> kill_sender() }
  :: atomic { kills < KILLS && alive[1] -> kill_receiver(1) }
  :: atomic { kills < KILLS && alive[2] -> kill_receiver(2) }
  :: atomic { kills < KILLS && NR >= 3 && alive[3] -> kill_receiver(3) }
  :: break
  od
}

/* P4 in every state: the assertion may run between any two steps. */
proctype monitor() {
  assert(FDS_BOUNDED)
}

/* P3 at quiescence: nothing else can move. */
proctype quiescent() {
  timeout -> assert(RETURNED)
}

ltl returned { <>[] RETURNED }

init {
  byte k;
  atomic {
    alive[S] = 1;
    k = 1;
    do
    :: k <= NR -> alive[k] = 1; sk_snd[k] = 1; sk_rcv[k] = 1; k++
    :: else -> break
    od;
    run watcher();
    k = 1;
    do
    :: k <= NR -> run receiver(k); k++
    :: else -> break
    od;
    run sender_main();
    run killer();
    /* the safety checks (left out of the liveness search: -DLIVENESS) */
#ifndef LIVENESS
#ifndef NO_MONITOR
    run monitor();
#endif
#ifndef NO_QUIESCENT
    run quiescent();
#endif
#endif
    skip
  }
}
