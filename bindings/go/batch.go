// SPDX-License-Identifier: Apache-2.0

package hurray

// #include "hurray_go.h"
import "C"

import (
	"sort"
	"strconv"
	"unsafe"
)

// GroupAlignment is the byte alignment of every tensor of a group
// (AllocGroup; hurray.h HURRAY_GROUP_ALIGNMENT).
const GroupAlignment = 256

// NoIndex is BatchError.Index when a batched call failed for a reason that
// is no element's (hurray.h HURRAY_BATCH_NO_INDEX).
const NoIndex = -1

// BatchError is the error of a batched call (FromDLPackVersionedN,
// FromDLPackN, ToDLPackVersionedN, ToDLPackN, AllocGroup): Index is the
// element at fault (NoIndex when none is: an allocation of the batch
// itself), Err why. The message names the element ("ts[2].dl_tensor.ndim
// ..."). It unwraps to Err, so errors.Is(err, hurray.ErrInvalidArgument)
// tests the status and errors.As(err, &be) gives the index. A failed batch
// changes nothing.
type BatchError struct {
	Index int
	Err   *Error
}

// Error formats as Err does.
func (e *BatchError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *BatchError) Unwrap() error { return e.Err }

// batchErr makes a BatchError for element index (NoIndex: none) with a
// message of this package's own.
func batchErr(op string, status Status, index int, msg string) error {
	return &BatchError{Index: index, Err: &Error{Op: op, Status: status, Message: msg}}
}

// batchResult is result for a batched wrapper: nil, or a *BatchError whose
// Index is the C call's failed index (SIZE_MAX: NoIndex).
func batchResult(op string, status C.int32_t, msg *C.char, failed C.size_t) error {
	err := result(op, status, msg)
	if err == nil {
		return nil
	}
	idx := NoIndex
	if failed != C.size_t(^uintptr(0)) {
		idx = int(failed)
	}
	return &BatchError{Index: idx, Err: err.(*Error)}
}

// wrapN makes the n Buffers of block blk (slots 0..n-1), each with its own
// scalar fields.
func wrapN(blk C.hgo_ref, metas []C.hgo_meta) []*Buffer {
	bufs := make([]*Buffer, len(metas))
	for k := range bufs {
		r := C.hgo_ret{blk: blk, meta: metas[k]}
		bufs[k] = wrap(&r, C.size_t(k))
	}
	return bufs
}

// FromDLPackVersionedN takes n C DLManagedTensorVersioned (ts[i]) from
// another runtime in one call, all or nothing: on success Buffer i owns
// ts[i] (its deleter runs exactly once, when the last Buffer sharing it is
// released); on error the caller still owns every tensor (nothing was
// called on any) and the error is a *BatchError naming the first tensor at
// fault, checked as FromDLPackVersioned checks one (ErrInvalidArgument for
// a nil element, ErrUnsupportedVersion, ErrUnsupportedDType, ...). The
// tensors must be distinct. An empty ts gives an empty slice. Each Buffer
// is released on its own (Close), in any order, on any goroutine.
func FromDLPackVersionedN(ts []unsafe.Pointer) ([]*Buffer, error) {
	return importN("hurray.FromDLPackVersionedN", ts, 1)
}

// FromDLPackN is FromDLPackVersionedN for legacy C DLManagedTensor.
func FromDLPackN(ts []unsafe.Pointer) ([]*Buffer, error) {
	return importN("hurray.FromDLPackN", ts, 0)
}

func importN(op string, ts []unsafe.Pointer, versioned C.int32_t) ([]*Buffer, error) {
	if len(ts) == 0 {
		return []*Buffer{}, nil
	}
	metas := make([]C.hgo_meta, len(ts))
	var failed C.size_t
	r := C.hgo_from_dlpack_n(&ts[0], C.size_t(len(ts)), versioned, &metas[0], &failed)
	if err := batchResult(op, r.status, r.msg, failed); err != nil {
		return nil, err
	}
	labelSlots(r.blk, 0, C.size_t(len(ts)-1), op, 2)
	return wrapN(r.blk, metas), nil
}

// ToDLPackVersionedN hands n Buffers on as n C DLManagedTensorVersioned in
// one call, all or nothing: on success every Buffer is released (its handle
// moved into tensor i, which the caller owns: call each deleter once) and
// tensor i is bufs[i]'s; on error every Buffer is unchanged and the error is
// a *BatchError naming the first Buffer at fault: ErrInvalidArgument for a
// nil Buffer or one listed twice, ErrClosed for one already released or
// handed on, or libhurray's status. It waits for scoped views (WithBytes,
// ...) of the Buffers running on other goroutines, without holding any of
// the Buffers while it waits; it must not be called inside a scoped view of
// one of them (a deadlock, as for ToDLPackVersioned). An empty bufs gives
// an empty slice.
func ToDLPackVersionedN(bufs []*Buffer) ([]unsafe.Pointer, error) {
	return exportN("hurray.ToDLPackVersionedN", bufs, 1)
}

// ToDLPackN is ToDLPackVersionedN as legacy DLManagedTensor (flags,
// READ_ONLY included, are dropped).
func ToDLPackN(bufs []*Buffer) ([]unsafe.Pointer, error) {
	return exportN("hurray.ToDLPackN", bufs, 0)
}

// lockAllIdle locks every Buffer of bs (distinct, non-nil) once none runs a
// scoped view. It locks them in address order (two batches over the same
// Buffers cannot deadlock) and never waits for a view while holding a lock:
// when one of them is busy it unlocks them all, waits for that one, and
// starts again (a view's callback may release another of them meanwhile).
func lockAllIdle(bs []*Buffer) {
	order := make([]*Buffer, len(bs))
	copy(order, bs)
	sort.Slice(order, func(a, b int) bool {
		return uintptr(unsafe.Pointer(order[a])) < uintptr(unsafe.Pointer(order[b]))
	})
	for {
		var busy chan struct{}
		locked := 0
		for _, b := range order {
			b.mu.Lock()
			if b.readers > 0 {
				if b.drain == nil {
					b.drain = make(chan struct{})
				}
				busy = b.drain
				b.mu.Unlock()
				break
			}
			locked++
		}
		if busy == nil {
			return
		}
		for _, b := range order[:locked] {
			b.mu.Unlock()
		}
		<-busy
	}
}

func exportN(op string, bufs []*Buffer, versioned C.int32_t) ([]unsafe.Pointer, error) {
	n := len(bufs)
	if n == 0 {
		return []unsafe.Pointer{}, nil
	}
	seen := make(map[*Buffer]int, n)
	for i, b := range bufs {
		if b == nil {
			return nil, batchErr(op, ErrInvalidArgument, i, "bufs["+strconv.Itoa(i)+"] is nil")
		}
		if j, dup := seen[b]; dup {
			return nil, batchErr(op, ErrInvalidArgument, i,
				"bufs["+strconv.Itoa(i)+"] is bufs["+strconv.Itoa(j)+"] again (each Buffer once)")
		}
		seen[b] = i
	}
	lockAllIdle(bufs)
	unlock := func() {
		for _, b := range bufs {
			b.mu.Unlock()
		}
	}
	blks := make([]C.hgo_ref, n)
	idx := make([]C.size_t, n)
	keep := make([]C.int32_t, n)
	for i, b := range bufs {
		if b.blk == 0 {
			unlock()
			return nil, batchErr(op, ErrClosed, i, "bufs["+strconv.Itoa(i)+"] is released")
		}
		blks[i], idx[i] = b.blk, b.i
		if b.blk == b.own {
			keep[i] = 1
		}
	}
	out := make([]unsafe.Pointer, n)
	var failed C.size_t
	r := C.hgo_to_dlpack_n(&blks[0], &idx[0], &keep[0], C.size_t(n), versioned, &out[0], &failed)
	if r.status == 0 {
		for _, b := range bufs {
			b.blk = 0 // the slots were dropped: the handles are in the tensors now
			b.disarm()
		}
	}
	unlock()
	if err := batchResult(op, r.status, r.msg, failed); err != nil {
		return nil, err
	}
	return out, nil
}

// TensorDesc describes one tensor of a group (AllocGroup): compact
// row-major, of DType and Shape (copied; empty for a 0-d tensor); ReadOnly
// sets the READ_ONLY flag.
type TensorDesc struct {
	DType    DType
	Shape    []int64
	ReadOnly bool
}

// AllocGroup allocates uninitialised CPU memory for len(descs) tensors in
// one allocation (a tensor group, hurray_alloc_group): Buffer i is descs[i]'s
// tensor, at an address that is a multiple of GroupAlignment, after tensor
// i-1 (a tensor without elements takes no bytes). Each Buffer is released
// on its own (Close), in any order, on any goroutine, and may be shared or
// handed on (ToDLPack*) as any Buffer; the memory is freed once, after the
// last of them. shareable asks for memory another process can map (an
// anonymous memfd, page-aligned; HURRAY_ALLOC_SHAREABLE), so the group
// crosses processes as one allocation. Errors: a *BatchError naming the
// description at fault (ErrInvalidArgument for a negative extent or more
// than 64 of them, ErrUnsupportedDType, ErrOverflow) or none (NoIndex:
// ErrOutOfMemory); nothing stays allocated. An empty descs gives an empty
// slice. In checking mode the handles are labelled with the caller's
// file:line (CheckLive).
func AllocGroup(descs []TensorDesc, shareable bool) ([]*Buffer, error) {
	const op = "hurray.AllocGroup"
	n := len(descs)
	if n == 0 {
		return []*Buffer{}, nil
	}
	size := 0
	for i, d := range descs {
		if len(d.Shape) > 64 {
			return nil, batchErr(op, ErrInvalidArgument, i,
				"descs["+strconv.Itoa(i)+"] has "+strconv.Itoa(len(d.Shape))+" extents (HURRAY_MAX_NDIM is 64)")
		}
		size += 3 + len(d.Shape)
	}
	enc := make([]int64, 0, size)
	for _, d := range descs {
		var flags int64
		if d.ReadOnly {
			flags = flagReadOnly
		}
		enc = append(enc, int64(d.DType.Code)|int64(d.DType.Bits)<<8|int64(d.DType.Lanes)<<16,
			flags, int64(len(d.Shape)))
		enc = append(enc, d.Shape...)
	}
	var allocFlags C.uint64_t
	if shareable {
		allocFlags = 1 << 32
	}
	metas := make([]C.hgo_meta, n)
	var failed C.size_t
	r := C.hgo_alloc_group(C.size_t(n), (*C.int64_t)(&enc[0]), C.size_t(len(enc)), allocFlags,
		&metas[0], &failed)
	if err := batchResult(op, r.status, r.msg, failed); err != nil {
		return nil, err
	}
	labelSlots(r.blk, 0, C.size_t(n-1), op, 1)
	return wrapN(r.blk, metas), nil
}
