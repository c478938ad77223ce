// SPDX-License-Identifier: Apache-2.0
/*
 * hurray_go.h - C side of the Go binding.
 *
 * Handles live in C memory only. A hurray_buffer holds void* fields whose
 * values the producer chooses (a small integer user_data, the checking
 * mode's handle id, a dangling non-NULL data pointer of an empty tensor);
 * to Go those fields are unsafe.Pointer, and a non-pointer value in Go
 * memory or on a goroutine stack is a fatal runtime error ("invalid pointer
 * found on stack"). So the Go side never holds a hurray_buffer by value: it
 * holds a block reference (an integer, hgo_ref) and a slot index, and every field is read here and
 * returned in pointer-free structs (hgo_meta, hgo_dims).
 *
 * A block is one C allocation of `n` handle slots with a count of the slots
 * still owned; hgo_drop empties a slot and frees the block with its last one.
 * Alloc and FromDLPack make blocks of one slot; hgo_share makes one block
 * for all the shares of one call, and the batched calls (hgo_from_dlpack_n,
 * hgo_alloc_group) one block of n slots, one per Buffer.
 *
 * Errors: each wrapper makes one libhurray call and, when it fails, returns a
 * malloc'ed copy of hurray_last_error() in hgo_ret.msg (NULL if even that
 * copy cannot be allocated; the Go side frees it). The copy must be made in
 * the same C call: a goroutine may move to another OS thread between two cgo
 * calls, and the message is thread-local.
 *
 * Threads: a block's slots may be used and dropped from any threads, each
 * slot by one thread at a time (the Go Buffer's mutex serialises them).
 */
#ifndef HURRAY_BINDINGS_GO_H_
#define HURRAY_BINDINGS_GO_H_

#include <stddef.h>
#include <stdint.h>

#include <hurray/hurray.h>

/* A block, to Go: its address as an integer (0: none), so Go holds no
 * pointer into C memory either and cgo makes no pointer checks. */
typedef uintptr_t hgo_ref;

/* A handle's scalar fields. */
typedef struct hgo_meta {
  uint64_t flags;
  int32_t device_type;
  int32_t device_id;
  int32_t ndim;
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} hgo_meta;

/* The result of a call that makes or hands on handles. blk: the new block
 * (slots 1..n of hgo_share, slot 0 otherwise) or 0; meta: the scalar fields
 * of its handles (all alike; they never change while a handle is live);
 * tensor: the exported DLPack tensor or NULL; msg: NULL on success. All
 * pointers are C memory. */
typedef struct hgo_ret {
  int32_t status;
  hgo_ref blk;
  hgo_meta meta;
  void *tensor;
  char *msg;
} hgo_ret;

/* A slot's shape or strides; ndim -1 if the handle lacks the array. */
typedef struct hgo_dims {
  int32_t ndim;
  int64_t v[HURRAY_MAX_NDIM];
} hgo_dims;

/* The host bytes a slot spans: base is NULL when len is 0. */
typedef struct hgo_bytes_ret {
  int32_t status;
  void *base;
  int64_t len;
  char *msg;
} hgo_bytes_ret;

hgo_ret hgo_alloc(int32_t code, int32_t bits, int32_t lanes, int32_t ndim, const int64_t *shape,
                  uint64_t flags);
hgo_ret hgo_from_dlpack(void *t, int32_t versioned);
/* Shares slot i of b into a new block whose slots 1..n hold the n shares;
 * slot i keeps its reference. HURRAY_ERR_OUT_OF_MEMORY when the block cannot
 * be allocated; on any failure nothing changes. */
hgo_ret hgo_share(hgo_ref b, size_t i, size_t n);
/* Hands slot i of b on as a DLPack tensor; on success the slot is dropped
 * (keep 0) or only emptied (keep 1: a block of its own, hgo_block_own). */
hgo_ret hgo_to_dlpack(hgo_ref b, size_t i, int32_t versioned, int32_t keep);
/* A block of one slot that a reusable Go Buffer keeps for itself (filled
 * by hgo_share_into, emptied by hgo_release_slot, freed by hgo_block_free);
 * 0 when it cannot be allocated. */
hgo_ref hgo_block_own(void);
void hgo_block_free(hgo_ref b);
/* Shares slot i of src into slot 0 of dst (an hgo_block_own block whose
 * slot is empty); src's slot keeps its reference. No allocation. On failure
 * nothing changes. blk of the result is dst. */
hgo_ret hgo_share_into(hgo_ref src, size_t i, hgo_ref dst);
/* Releases slot i of b, keeping the block. */
void hgo_release_slot(hgo_ref b, size_t i);
/* Releases slot i of b and drops it (frees b with its last slot). */
void hgo_drop(hgo_ref b, size_t i);
hgo_dims hgo_get_dims(hgo_ref b, size_t i, int32_t strides);
/* Host memory only: HURRAY_ERR_UNSUPPORTED_DEVICE for other devices. */
hgo_bytes_ret hgo_bytes(hgo_ref b, size_t i);
const char *hgo_status_name(int32_t status);
/* One live tracked handle (hurray_check_entry) with its strings copied
 * (malloc'ed; freed by hgo_check_free) and its data address as an integer. */
typedef struct hgo_check_item {
  uint64_t id;
  char *made_by;
  char *label;
  char *origin;
  uintptr_t data;
  int32_t device_type;
  int32_t device_id;
  int32_t ndim;
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} hgo_check_item;

/* hgo_check_live's result: n items (items NULL when n is 0). */
typedef struct hgo_check_ret {
  int32_t status;
  size_t n;
  hgo_check_item *items;
  char *msg;
} hgo_check_ret;

/* 1 when the checking mode tracks handles made now, 0 when not. */
int32_t hgo_check_on(void);
/* With HURRAY_CHECK_STDERR in the checking mode's options: 1, and
 * *double_releases set (hurray_check_state); else 0. */
int32_t hgo_check_stderr(uint64_t *double_releases);
/* The live tracked handles with id >= since (hurray_check_live), copied;
 * HURRAY_ERR_OUT_OF_MEMORY when a copy cannot be allocated. */
hgo_check_ret hgo_check_live(uint64_t since);
void hgo_check_free(hgo_check_item *items, size_t n);
/* Labels slots first..last of b (hurray_check_label); errors ignored (an
 * untracked handle has no record to label). */
void hgo_check_label(hgo_ref b, size_t first, size_t last, const char *label);

/* Batched calls (FromDLPack*N, ToDLPack*N, AllocGroup): all or nothing, as
 * the libhurray calls they make. On failure *failed is the element at fault
 * (HURRAY_BATCH_NO_INDEX when none is) and nothing changes; metas[k] (Go
 * memory, pointer-free) receives slot k's scalar fields on success. */

/* Imports ts[0..n) (versioned 1: DLManagedTensorVersioned, 0: legacy) into
 * a new block of n slots (hurray_from_dlpack[_versioned]_n); n > 0. */
hgo_ret hgo_from_dlpack_n(void *const *ts, size_t n, int32_t versioned, hgo_meta *metas,
                          size_t *failed);
/* A group of n CPU tensors (hurray_alloc_group) in a new block of n slots;
 * n > 0. enc holds, for each description in turn: the dtype packed as code |
 * bits << 8 | lanes << 16, the handle flags, ndim, then ndim extents (read
 * only during the call); enc_len is its length, checked. */
hgo_ret hgo_alloc_group(size_t n, const int64_t *enc, size_t enc_len, uint64_t alloc_flags,
                        hgo_meta *metas, size_t *failed);
/* Exports slot idx[k] of blks[k], k < n, in one call
 * (hurray_to_dlpack[_versioned]_n) into out[k] (Go memory; C pointers
 * only); on success each slot is dropped (keep[k] 0) or only emptied
 * (keep[k] 1: hgo_block_own). n > 0; the slots must be distinct. */
hgo_ret hgo_to_dlpack_n(const hgo_ref *blks, const size_t *idx, const int32_t *keep, size_t n,
                        int32_t versioned, void **out, size_t *failed);

/* Does nothing: the benchmarks' measure of one cgo call. */
void hgo_noop(void);

#endif /* HURRAY_BINDINGS_GO_H_ */
