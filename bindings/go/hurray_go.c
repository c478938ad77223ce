/* hurray_go.c - see hurray_go.h. */
#include "hurray_go.h"

#include <string.h>

static int32_t hgo_done(int32_t status, char *msg) {
  if (status != HURRAY_OK && msg != NULL) {
    strncpy(msg, hurray_last_error(), HGO_MSG - 1);
    msg[HGO_MSG - 1] = '\0';
  }
  return status;
}

int32_t hgo_share(hurray_buffer *src, size_t n, hurray_buffer *out, char *msg) {
  return hgo_done(hurray_share(src, n, out), msg);
}

int32_t hgo_extent(const hurray_buffer *h, hurray_extent *out, char *msg) {
  return hgo_done(hurray_buffer_extent(h, out), msg);
}

int32_t hgo_to_dlpack_versioned(hurray_buffer *src, void **out, char *msg) {
  DLManagedTensorVersioned *t = NULL;
  int32_t s = hgo_done(hurray_to_dlpack_versioned(src, &t), msg);
  if (s == HURRAY_OK) *out = t;
  return s;
}

int32_t hgo_to_dlpack(hurray_buffer *src, void **out, char *msg) {
  DLManagedTensor *t = NULL;
  int32_t s = hgo_done(hurray_to_dlpack(src, &t), msg);
  if (s == HURRAY_OK) *out = t;
  return s;
}

int32_t hgo_from_dlpack_versioned(void *t, hurray_buffer *out, char *msg) {
  return hgo_done(
      hurray_from_dlpack_versioned((DLManagedTensorVersioned *)t, HURRAY_IMPORT_DEFAULT, out), msg);
}

int32_t hgo_from_dlpack(void *t, hurray_buffer *out, char *msg) {
  return hgo_done(hurray_from_dlpack((DLManagedTensor *)t, HURRAY_IMPORT_DEFAULT, out), msg);
}

int32_t hgo_alloc(int32_t code, int32_t bits, int32_t lanes, int32_t ndim, const int64_t *shape,
                  uint64_t flags, hurray_buffer *out, char *msg) {
  hurray_device cpu = {HURRAY_DEVICE_CPU, 0};
  hurray_dtype dt;
  dt.code = (uint8_t)code;
  dt.bits = (uint8_t)bits;
  dt.lanes = (uint16_t)lanes;
  return hgo_done(hurray_alloc(cpu, dt, ndim, shape, flags, out), msg);
}

void hgo_release(hurray_buffer *h) { (void)hurray_buffer_release(h); }

const char *hgo_status_name(int32_t status) { return hurray_status_name(status); }
