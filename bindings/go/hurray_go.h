/*
 * hurray_go.h - C side of the Go binding: each wrapper makes one libhurray
 * call and, when it fails, copies hurray_last_error() into msg (HGO_MSG
 * bytes, NUL-terminated) in the same C call. The copy must happen there: a
 * goroutine may move to another OS thread between two cgo calls, and the
 * message is thread-local.
 */
#ifndef HURRAY_BINDINGS_GO_H_
#define HURRAY_BINDINGS_GO_H_

#include <stddef.h>
#include <stdint.h>

#include <hurray/hurray.h>

#define HGO_MSG 512

int32_t hgo_share(hurray_buffer *src, size_t n, hurray_buffer *out, char *msg);
int32_t hgo_extent(const hurray_buffer *h, hurray_extent *out, char *msg);
int32_t hgo_to_dlpack_versioned(hurray_buffer *src, void **out, char *msg);
int32_t hgo_to_dlpack(hurray_buffer *src, void **out, char *msg);
int32_t hgo_from_dlpack_versioned(void *t, hurray_buffer *out, char *msg);
int32_t hgo_from_dlpack(void *t, hurray_buffer *out, char *msg);
int32_t hgo_alloc(int32_t code, int32_t bits, int32_t lanes, int32_t ndim, const int64_t *shape,
                  uint64_t flags, hurray_buffer *out, char *msg);
void hgo_release(hurray_buffer *h);
const char *hgo_status_name(int32_t status);

#endif /* HURRAY_BINDINGS_GO_H_ */
