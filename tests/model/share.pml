/* SPDX-License-Identifier: Apache-2.0 */
/*
 * share.pml: the in-process lifetime protocol of libhurray, checked with Spin
 * (tests/model/run.sh; the step-by-step map to the code: docs/impl/model.md).
 *
 * What runs: a foreign producer's DLPack tensor T0 is imported
 * (hurray_from_dlpack_versioned) into one handle, which may first make a
 * round trip (an export of an unchanged import hands T0 back, its import
 * makes the handle again), and is then shared NHOLD ways (hurray_share).
 * NHOLD threads (init and the workers) each take one of the handles and
 * choose one of: release it; re-share it into two and release both; export
 * it to DLPack (the block's allocation may fail, consuming nothing) and then
 * either call the tensor's deleter or import the tensor back (which unwraps
 * it to the handle) and release that. Each holder reads the memory through
 * its handles until it gives them up. With -DCHECK=1 the checking mode is
 * on: every handle made is tracked, and one more thread holds a copy of one
 * worker's handle and does with it what a holder does (release, re-share,
 * export) while that worker goes on: the holder's mistake that the checking
 * mode catches (spec §4.2, §4.3); two consuming steps on the copies wait
 * for each other (check::consume). Bound: NHOLD 3
 * without the checking mode (3 threads), 2 with it (3 threads, the copy's
 * included); run.sh --large: 3 with it (4 threads).
 *
 * Granularity: each Promela step is one atomic operation of the code (an
 * atomic load, fetch_add or fetch_sub of the share block's count), one
 * critical section under the checking mode's mutex (an atomic sequence
 * here), or a sequence only its own thread can observe (filling a fresh
 * block, writing the outputs, clearing a handle), made one step. Calls of
 * release functions follow the code's tail calls as a loop (call_loop), so
 * a chain checked -> share -> imported -> deleter is as many steps as the
 * code has.
 *
 * Properties (each checked by run.sh; docs/impl/model.md §1):
 *  P1 exactly once: the producer's release (T0's deleter) runs at most once
 *     (assert at the call) and, when every thread is done, has run (the
 *     final assert in init; also the LTL claim `returned`, <> prod_rel == 1,
 *     checked for acceptance cycles with weak fairness, pan -a -f).
 *  P2 no use after release: a holder's reads through a handle (USE_OK,
 *     asserted where it gives the handle up, the last moment it can read
 *     it), and every step of the library that reads a block, a tensor or a
 *     record through a handle, assert that what they read is still alive.
 *  P3 every reference is returned: when all threads are done no share
 *     block, no export block and no live record is left (init's final
 *     assert), and the LTL claim above holds under weak fairness.
 *  P5 the checking mode catches the second release: with -DCHECK=1 exactly
 *     one of the two copies ends the reference and the other's release,
 *     re-share or export is counted (double_rel == 1), and the producer is
 *     released exactly once.
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
/* holders of the first share: init and two workers; with the checking
 * mode init and one worker, whose handle a third thread holds a copy of */
#ifndef NHOLD
#if CHECK
#define NHOLD 2
#else
#define NHOLD 3
#endif
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

/* share_release's decrement, refs.fetch_sub(1, acq_rel) with tmp the old
 * value, taken when the load saw a count other than 1 */
#ifdef MUT_LOST_DEC
#define DECREMENT :: atomic { tmp != 1 -> tmp = refs }; refs = tmp - 1
#else
#define DECREMENT :: atomic { tmp != 1 -> tmp = refs; assert(tmp > 0); refs = tmp - 1 }
#endif

/* fn(user_data) with f, u, following the tail calls of the code: each
 * option is one step of a release function. */
inline call_loop() {
  do
  :: f == F_NONE -> u = 0; break
  :: atomic {
       /* imported_versioned_release(T0): T0->deleter(T0), the producer's
        * release (an imported handle's tensor is always T0 here) */
       (f == F_IMP || f == F_TEN) && u == T0 ->
       assert(tlive[T0]); tlive[T0] = 0; prod_rel++; assert(prod_rel == 1); f = F_NONE
     }
  :: atomic {
       /* exported_versioned_deleter: the block's handle read, the block
        * back to the cache, then its release_fn */
       f == F_TEN && u != T0 ->
       assert(tlive[u]); tlive[u] = 0; f = efn[u]; tmp = eud[u]; efn[u] = 0; eud[u] = 0; u = tmp; tmp = 0
     }
  :: atomic {
       /* share_release (src/handle/share_block.cc): refs.load(acquire) */
       f == F_SHR -> assert(blk_live); tmp = refs
     };
     if
     DECREMENT
     :: tmp == 1 -> skip
     fi;
     if
     :: atomic {
          /* the last reference: the source read, the block back */
          tmp == 1 -> blk_live = 0; refs = 0; f = bsf; u = bsu; bsf = 0; bsu = 0; tmp = 0
        }
     :: atomic { tmp != 1 -> f = F_NONE; tmp = 0 }
     fi
  :: atomic {
       /* check::checked_release (src/checking/tracking.cc), one critical
        * section under the registry's mutex */
       f == F_CHK ->
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
  od
}

/* What a holder may read through a live handle: the producer's memory and
 * whatever the handle's release will read. Checked where the holder gives
 * the handle up (release, share, export), the last moment it can read it:
 * everything checked only ever goes from alive to gone (T0, the share
 * block, a record), so no earlier read can fail where this one passes. */
#define USE_OK(hf, hu) (prod_rel == 0 && (hf != F_SHR || blk_live) && \
                        (hf != F_IMP || tlive[hu]) && (hf != F_CHK || rstate[hu] == R_LIVE))

/* hurray_buffer_release: the handle cleared, then fn(user_data). `reads`:
 * the holder read the memory through it. */
inline release(hf, hu, reads) {
  atomic { assert(!reads || USE_OK(hf, hu)); f = hf; u = hu; hf = F_NONE; hu = 0 };
  call_loop()
}

/* hurray_share of an untracked handle into o_f/o_u[0..n) (src/api/share.cc):
 * a re-share adds n - 1 to the count (fetch_add, relaxed); the first share
 * of an import makes the block with count n and the import as its source.
 * The outputs are written by this thread alone (same step). */
inline share_plain(hf, hu, n, reads) {
  atomic {
    assert(!reads || USE_OK(hf, hu));
    if
    :: hf == F_SHR -> assert(blk_live); refs = refs + n - 1
    :: hf == F_IMP ->
         assert(!blk_live && tlive[hu]); blk_live = 1; refs = n; bsf = hf; bsu = hu;
         hf = F_SHR; hu = 0
    fi;
    i = 0;
    do
    :: i < n -> o_f[i] = hf; o_u[i] = hu; i++
    :: else -> break
    od;
    i = 0; hf = F_NONE; hu = 0; st = OK
  }
}

/* hurray_to_dlpack_versioned of an untracked handle (src/api/dlpack_export.cc):
 * a shared handle goes into a new export block, whose allocation may fail
 * (nothing consumed); an unchanged import hands back its tensor. */
inline export_plain(hf, hu, tt, reads) {
  if
  :: atomic {
       hf == F_SHR ->
       assert(!reads || USE_OK(hf, hu));
       if
       :: !tlive[1] -> tt = 1
       :: tlive[1] && !tlive[2] -> tt = 2
       :: tlive[1] && tlive[2] -> assert(!tlive[3]); tt = 3
       fi;
       tlive[tt] = 1; efn[tt] = hf; eud[tt] = hu; hf = F_NONE; hu = 0; st = OK
     }
  :: atomic { hf == F_SHR -> assert(!reads || USE_OK(hf, hu)); st = ERR_OOM }
  :: atomic { hf == F_IMP -> assert(!reads || USE_OK(hf, hu)); tt = hu; hf = F_NONE; hu = 0; st = OK }
  fi
}

/* check::consume: the record claimed (waiting while a step on a copy runs)
 * and the handle it stands for in cf, cu (ok); or the reference is gone
 * (ERR_RELEASED, counted). The step runs between the two halves. */
inline consume_begin(hf, hu, reads) {
  atomic {
    (rstate[hu] != R_LIVE || !rclaimed[hu]) ->
    assert(!reads || USE_OK(hf, hu));
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
    f = F_NONE; cf = 0; cu = 0; ok = 0;
    if
    :: st == OK -> rstate[hu] = R_GONE; double_rel = double_rel + tmp; hf = F_NONE; hu = 0
    :: st != OK && tmp > 0 ->
         rstate[hu] = R_GONE; f = rfn[hu]; u = rud[hu]; double_rel = double_rel + tmp - 1
    :: else -> skip
    fi;
    tmp = 0
  };
  call_loop()
}

/* check::track of o_f/o_u[0..n), made while the mode is on: one critical
 * section for all */
inline track_outputs(n) {
  atomic {
    i = 0;
    do
    :: i < n ->
         assert(next_id < NREC);
         rstate[next_id] = R_LIVE; rfn[next_id] = o_f[i]; rud[next_id] = o_u[i];
         o_f[i] = F_CHK; o_u[i] = next_id; next_id++; i++
    :: else -> break
    od;
    i = 0
  }
}

inline share(hf, hu, n, reads) {
  if
  :: hf == F_CHK ->
       consume_begin(hf, hu, reads);
       if
       :: ok -> share_plain(cf, cu, n, 0); consume_end(hf, hu)
       :: else -> skip
       fi
  :: hf != F_CHK -> share_plain(hf, hu, n, reads)
  fi;
  if
  :: CHECK && st == OK -> track_outputs(n)
  :: else -> skip
  fi
}

inline export(hf, hu, tt, reads) {
  if
  :: hf == F_CHK ->
       consume_begin(hf, hu, reads);
       if
       :: ok -> export_plain(cf, cu, tt, 0); consume_end(hf, hu)
       :: else -> skip
       fi
  :: hf != F_CHK -> export_plain(hf, hu, tt, reads)
  fi
}

/* hurray_from_dlpack_versioned (src/api/dlpack_import.cc): one of
 * libhurray's own blocks unwraps to its handle and is freed; the producer's
 * tensor becomes an imported handle; then tracked when the mode is on
 * (check::produced). The tensor is this thread's alone: one step. */
inline import(tt, hf, hu) {
  atomic {
    assert(tlive[tt]);
    if
    :: tt != T0 -> hf = efn[tt]; hu = eud[tt]; tlive[tt] = 0; efn[tt] = 0; eud[tt] = 0
    :: else -> hf = F_IMP; hu = T0
    fi;
    if
    :: CHECK ->
         assert(next_id < NREC);
         rstate[next_id] = R_LIVE; rfn[next_id] = hf; rud[next_id] = hu;
         hf = F_CHK; hu = next_id; next_id++
    :: else -> skip
    fi
  }
}

/* What one holder does with its handle. `duped`: another thread holds a
 * copy (the mistake), so this holder's reads through it are not checked:
 * the checking mode guards only what passes through libhurray (spec §4.3). */
inline program(hf, hu, duped) {
  if
  :: release(hf, hu, !duped)
  :: share(hf, hu, 2, !duped);
     if
     :: st == OK -> release(o_f[0], o_u[0], 1); release(o_f[1], o_u[1], 1)
     :: else -> skip  /* ERR_RELEASED: the copy had the reference */
     fi
  :: export(hf, hu, t, !duped);
     if
     :: st == OK ->
          if
          :: f = F_TEN; u = t; t = 0; call_loop()  /* the DLPack consumer's deleter call */
          :: import(t, hf, hu); t = 0; release(hf, hu, 1)
          fi
     :: st == ERR_OOM -> release(hf, hu, !duped)  /* a failed export consumed nothing */
     :: st == ERR_RELEASED -> skip
     fi
  fi
}

proctype worker(byte hf, hu; bool duped) {
  LOCALS;
  program(hf, hu, duped)
}

/* The mistake: a copy of a tracked handle, used (released, re-shared or
 * exported) beside its holder. */
proctype dup(byte hf, hu) {
  LOCALS;
  program(hf, hu, 1)
}

ltl returned { <> (prod_rel == 1) }

init {
  LOCALS;
  byte hf, hu;
  tlive[T0] = 1;
  import(T0, hf, hu);
  if
  :: !CHECK -> export(hf, hu, t, 1); assert(st == OK && t == T0); import(t, hf, hu)  /* a round trip unwraps */
  :: skip
  fi;
  share(hf, hu, NHOLD, 1);
  assert(st == OK);
  atomic {
    if
    :: CHECK -> run worker(o_f[1], o_u[1], 1); run dup(o_f[1], o_u[1])
    :: else -> run worker(o_f[1], o_u[1], 0)
    fi;
    if
    :: NHOLD == 3 -> run worker(o_f[2], o_u[2], 0)
    :: else -> skip
    fi;
    hf = o_f[0]; hu = o_u[0];
    o_f[0] = 0; o_u[0] = 0; o_f[1] = 0; o_u[1] = 0; o_f[2] = 0; o_u[2] = 0
  };
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
