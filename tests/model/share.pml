/* SPDX-License-Identifier: Apache-2.0 */
/*
 * share.pml: the in-process lifetime protocol of libhurray, checked with Spin
 * (tests/model/run.sh; the step-by-step map to the code: docs/impl/model.md).
 *
 * What runs: a foreign producer's DLPack tensor T0 is imported
 * (hurray_from_dlpack_versioned) into one handle, which may first make a
 * round trip (an export of an unchanged import hands T0 back, its import
 * makes the handle again), and is then shared three ways (hurray_share).
 * Three threads (init and two workers) each take one of the three handles,
 * read through it, and then choose one of: release it; re-share it into two
 * and release both; export it to DLPack (the export may fail for want of
 * memory, consuming nothing) and then either call the tensor's deleter or
 * import the tensor back (which unwraps it to the handle) and release that.
 * With -DCHECK=1 the checking mode is on: every handle made is tracked, and
 * a fourth thread holds a copy of one worker's handle and releases it while
 * that worker goes on: the holder's mistake that the checking mode catches.
 *
 * Granularity: each Promela step is one atomic operation of the code (an
 * atomic load, fetch_add or fetch_sub of the share block's count), one
 * critical section under the checking mode's mutex (an atomic sequence
 * here), or a step that only its own thread can see (filling a fresh block,
 * clearing a handle), made atomic where no other thread can observe the
 * difference. Calls of release functions follow the code's tail calls as a
 * loop (call_loop), so a chain checked -> share -> imported -> deleter is as
 * many steps as the code has.
 *
 * Properties (each checked by run.sh):
 *  P1 exactly once: the producer's release (T0's deleter) runs at most once
 *     (assert at the call) and, when every thread is done, has run (the
 *     final assert in init; with weak fairness also the LTL claim
 *     `returned`: <> prod_rel == 1, checked for acceptance cycles with -a -f).
 *  P2 no use after release: every read of a handle's memory, and every
 *     step of the library that reads a block or a tensor through a handle,
 *     asserts that what it reads is still alive (use_handle, the asserts in
 *     call_loop, share_plain, export_plain, import).
 *  P3 every reference is returned: when all threads are done no share block,
 *     no export block and no live record is left (init's final assert), and
 *     the LTL claim above holds under weak fairness.
 *  P4 the checking mode catches the second release: with -DCHECK=1 the
 *     copy's release or the worker's use of its handle is counted once
 *     (double_rel == 1), and the producer is still released exactly once.
 *
 * Seeded mutations (each must give a counterexample; run.sh checks it):
 *  MUT_LOST_DEC  the share block's decrement is a plain load and store
 *                instead of one fetch_sub: two concurrent releases lose one
 *                decrement and the producer is never released (P1, P3).
 *  MUT_NO_CLAIM  the checked release ignores a record claimed by a
 *                consuming step (share, export) running on a copy: the copy's
 *                release and the step both pass the reference on (P1, P2).
 */

#ifndef CHECK
#define CHECK 0
#endif

/* release_fn of a handle (F_TEN is no release_fn: "call the deleter of
 * tensor u", a step of call_loop) */
#define F_NONE 0
#define F_IMP 1 /* imported_versioned_release; user_data: the tensor */
#define F_SHR 2 /* share_release; user_data: the share block (one here) */
#define F_CHK 3 /* check::checked_release; user_data: the record id */
#define F_TEN 4

/* tensors: T0 the producer's, 1..NT-1 libhurray's export blocks */
#define T0 0
#define NT 4
/* checking-mode records: ids 1.. never reused */
#define NREC 14
#define R_NONE 0
#define R_LIVE 1
#define R_GONE 2

#define OK 0
#define ERR_OOM 1
#define ERR_RELEASED 2

bool tlive[NT];     /* tensor alive (T0: until its deleter; a block: until freed) */
byte efn[NT];       /* an export block's handle: release_fn ... */
byte eud[NT];       /* ... and user_data */
byte refs;          /* ShareBlock::refs */
bool blk_live;      /* the share block is allocated */
byte bsf;           /* ShareBlock::source: release_fn ... */
byte bsu;           /* ... and user_data */
byte prod_rel;      /* how often the producer's release (T0's deleter) ran */
/* the checking mode's registry (one mutex: atomic sequences) */
byte rstate[NREC];
bool rclaimed[NREC];
byte rpending[NREC];
byte rfn[NREC];
byte rud[NREC];
byte next_id = 1;
byte double_rel;    /* hurray_diagnostics.double_releases */

/* The locals every thread needs for the inlines below. */
#define LOCALS byte f, u, tmp, t, st, cf, cu, i; bool ok; byte o_f[3], o_u[3]

/* share_release's decrement: refs.fetch_sub(1, acq_rel), tmp = old value */
#ifdef MUT_LOST_DEC
#define DECREMENT tmp = refs; refs = tmp - 1
#else
#define DECREMENT atomic { tmp = refs; assert(tmp > 0); refs = tmp - 1 }
#endif

/* share_release (src/handle/share_block.cc) on the block: the load that
 * skips the fetch_sub for a count of 1, the fetch_sub, and on the last
 * reference the source read and the block given back. */
inline share_release() {
  atomic { assert(blk_live); tmp = refs };
  if
  :: tmp != 1 -> DECREMENT
  :: else -> skip
  fi;
  if
  :: tmp == 1 -> atomic { blk_live = 0; refs = 0; f = bsf; u = bsu; bsf = 0; bsu = 0 }
  :: else -> f = F_NONE
  fi
}

/* check::checked_release (src/checking/tracking.cc), one critical section */
inline checked_release() {
  atomic {
    if
#ifndef MUT_NO_CLAIM
    :: rstate[u] == R_LIVE && rclaimed[u] -> rpending[u]++; f = F_NONE
    :: rstate[u] == R_LIVE && !rclaimed[u] -> rstate[u] = R_GONE; f = rfn[u]; u = rud[u]
#else
    :: rstate[u] == R_LIVE -> rstate[u] = R_GONE; f = rfn[u]; u = rud[u]
#endif
    :: rstate[u] != R_LIVE -> double_rel++; f = F_NONE
    fi
  }
}

/* fn(user_data) with f, u, following the tail calls of the code */
inline call_loop() {
  do
  :: f == F_NONE -> break
  :: f == F_TEN && u == T0 ->
       /* the producer's deleter */
       atomic { assert(tlive[T0]); tlive[T0] = 0; prod_rel++; assert(prod_rel == 1); f = F_NONE }
  :: f == F_TEN && u != T0 ->
       /* exported_versioned_deleter: the block's handle read, the block
        * back to the cache, then its release_fn */
       atomic { assert(tlive[u]); tlive[u] = 0; f = efn[u]; tmp = eud[u]; efn[u] = 0; eud[u] = 0; u = tmp }
  :: f == F_IMP -> atomic { assert(tlive[u]); f = F_TEN }  /* imported_versioned_release: t->deleter(t) */
  :: f == F_SHR -> share_release()
  :: f == F_CHK -> checked_release()
  od
}

/* hurray_buffer_release: the handle cleared, then fn(user_data) */
inline release(hf, hu) {
  f = hf; u = hu; hf = F_NONE; hu = 0;
  call_loop()
}

/* a holder reads the memory through a live handle */
inline use_handle(hf, hu) {
  atomic {
    assert(prod_rel == 0);
    assert(hf != F_SHR || blk_live);
    assert(hf != F_IMP || tlive[hu]);
    assert(hf != F_CHK || rstate[hu] == R_LIVE)
  }
}

/* check::track on one handle made while the mode is on */
inline track(hf, hu) {
  atomic {
    assert(next_id < NREC);
    rstate[next_id] = R_LIVE; rfn[next_id] = hf; rud[next_id] = hu;
    hf = F_CHK; hu = next_id; next_id++
  }
}

/* hurray_share of an untracked handle into of/o_u[0..n) (src/api/share.cc):
 * a re-share adds n - 1 to the count (fetch_add, relaxed); the first share
 * of an import makes the block with count n and the import as its source. */
inline share_plain(hf, hu, n) {
  if
  :: hf == F_SHR -> atomic { assert(blk_live); refs = refs + n - 1 }
  :: hf == F_IMP ->
       atomic { assert(!blk_live && tlive[hu]); blk_live = 1; refs = n; bsf = hf; bsu = hu };
       hf = F_SHR; hu = 0
  fi;
  i = 0;
  do
  :: i < n -> o_f[i] = hf; o_u[i] = hu; i++
  :: else -> break
  od;
  hf = F_NONE; hu = 0;
  st = OK
}

/* hurray_to_dlpack_versioned of an untracked handle (src/api/dlpack_export.cc):
 * a shared handle goes into a new export block (whose allocation may
 * fail: nothing consumed); an unchanged import hands back its tensor. */
inline export_plain(hf, hu, tt) {
  if
  :: hf == F_SHR ->
       if
       :: atomic {
            assert(blk_live);
            if
            :: !tlive[1] -> tt = 1
            :: tlive[1] && !tlive[2] -> tt = 2
            :: tlive[1] && tlive[2] -> assert(!tlive[3]); tt = 3
            fi;
            tlive[tt] = 1; efn[tt] = hf; eud[tt] = hu
          };
          hf = F_NONE; hu = 0; st = OK
       :: st = ERR_OOM
       fi
  :: hf == F_IMP -> atomic { assert(tlive[hu]); tt = hu }; hf = F_NONE; hu = 0; st = OK
  fi
}

/* check::consume: the record claimed (waiting while a step on a copy runs)
 * and the handle it stands for in cf, cu (ok); or the reference is gone
 * (ERR_RELEASED, counted). The step runs between the two halves. */
inline consume_begin(hf, hu) {
  atomic {
    (rstate[hu] != R_LIVE || !rclaimed[hu]) ->
    if
    :: rstate[hu] == R_LIVE -> rclaimed[hu] = 1; cf = rfn[hu]; cu = rud[hu]; ok = 1
    :: else -> double_rel++; ok = 0; st = ERR_RELEASED
    fi
  }
}

/* The step's outcome st, under the lock: on success the record is retired
 * and releases of copies held meanwhile are counted; on failure the first
 * of them was the real one and passes the reference on now. */
inline consume_end(hf, hu) {
  atomic {
    rclaimed[hu] = 0; tmp = rpending[hu]; rpending[hu] = 0;
    f = F_NONE;
    if
    :: st == OK -> rstate[hu] = R_GONE; double_rel = double_rel + tmp
    :: st != OK && tmp > 0 ->
         rstate[hu] = R_GONE; f = rfn[hu]; u = rud[hu]; double_rel = double_rel + tmp - 1
    :: else -> skip
    fi
  };
  call_loop();
  if
  :: st == OK -> hf = F_NONE; hu = 0
  :: else -> skip
  fi
}

inline share(hf, hu, n) {
  if
  :: hf == F_CHK ->
       consume_begin(hf, hu);
       if
       :: ok -> share_plain(cf, cu, n); consume_end(hf, hu)
       :: else -> skip
       fi
  :: else -> share_plain(hf, hu, n)
  fi;
  if
  :: CHECK && st == OK ->
       i = 0;
       do
       :: i < n -> track(o_f[i], o_u[i]); i++
       :: else -> break
       od
  :: else -> skip
  fi
}

inline export(hf, hu, tt) {
  if
  :: hf == F_CHK ->
       consume_begin(hf, hu);
       if
       :: ok -> export_plain(cf, cu, tt); consume_end(hf, hu)
       :: else -> skip
       fi
  :: else -> export_plain(hf, hu, tt)
  fi
}

/* hurray_from_dlpack_versioned (src/api/dlpack_import.cc): one of
 * libhurray's own blocks unwraps to its handle and is freed; the producer's
 * tensor becomes an imported handle. Then tracked when the mode is on. */
inline import(tt, hf, hu) {
  atomic {
    assert(tlive[tt]);
    if
    :: tt != T0 -> hf = efn[tt]; hu = eud[tt]; tlive[tt] = 0; efn[tt] = 0; eud[tt] = 0
    :: else -> hf = F_IMP; hu = T0
    fi
  };
  if
  :: CHECK -> track(hf, hu)
  :: else -> skip
  fi
}

/* What one holder does with its handle. `duped`: another thread holds a
 * copy (the mistake), so this holder reads the memory only through
 * libhurray, which is all the checking mode can guard. */
inline program(hf, hu, duped) {
  if
  :: !duped -> use_handle(hf, hu)
  :: else -> skip
  fi;
  if
  :: release(hf, hu)
  :: skip;  /* each option's first step its own: options with nested else */
     share(hf, hu, 2);
     if
     :: st == OK ->
          use_handle(o_f[0], o_u[0]); release(o_f[0], o_u[0]);
          use_handle(o_f[1], o_u[1]); release(o_f[1], o_u[1])
     :: else -> skip  /* ERR_RELEASED: the copy had the reference */
     fi
  :: skip;
     export(hf, hu, t);
     if
     :: st == OK ->
          if
          :: f = F_TEN; u = t; call_loop()  /* the DLPack consumer's deleter call */
          :: import(t, hf, hu); use_handle(hf, hu); release(hf, hu)
          fi
     :: st == ERR_OOM -> release(hf, hu)  /* a failed export consumed nothing */
     :: st == ERR_RELEASED
     fi
  fi
}

proctype worker(byte hf, hu; bool duped) {
  LOCALS;
  program(hf, hu, duped)
}

/* The mistake: a copy of a tracked handle released beside its holder. */
proctype dup(byte hf, hu) {
  LOCALS;
  release(hf, hu)
}

ltl returned { <> (prod_rel == 1) }

init {
  LOCALS;
  byte hf, hu;
  tlive[T0] = 1;
  import(T0, hf, hu);
  if
  :: skip; export(hf, hu, t); assert(st == OK && t == T0); import(t, hf, hu)  /* a round trip unwraps */
  :: skip
  fi;
  share(hf, hu, 3);
  assert(st == OK);
  atomic {
    run worker(o_f[1], o_u[1], 0);
    if
    :: CHECK -> run worker(o_f[2], o_u[2], 1); run dup(o_f[2], o_u[2])
    :: else -> run worker(o_f[2], o_u[2], 0)
    fi
  };
  hf = o_f[0]; hu = o_u[0];
  program(hf, hu, 0);
  _nr_pr == 1;  /* every other thread has finished */
  assert(prod_rel == 1 && !blk_live && refs == 0);
  assert(!tlive[0] && !tlive[1] && !tlive[2] && !tlive[3]);
  i = 1;
  do
  :: i < next_id -> assert(rstate[i] == R_GONE && !rclaimed[i] && rpending[i] == 0); i++
  :: else -> break
  od;
  assert(double_rel == (CHECK -> 1 : 0))
}
