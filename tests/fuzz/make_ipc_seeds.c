// SPDX-License-Identifier: Apache-2.0
/* Writes the seed corpus of hurray_ipc_descriptor_fuzz (tests/fuzz/ipc_corpus):
 * real descriptors from hurray_ipc_export, each file one fuzz input (byte 0:
 * the fd count 2; then the descriptor). Not built by CMake; regenerate with
 *   cc -std=c11 -Iinclude -Ibuild/dev/include tests/fuzz/make_ipc_seeds.c \
 *      -Lbuild/dev -lhurray -Wl,-rpath,$PWD/build/dev -o /tmp/seeds
 *   /tmp/seeds tests/fuzz/ipc_corpus
 * The GPU seeds (cuda_ipc_f32_1024, hip_ipc_f32_1024: kinds 3 and 4, byte 0
 * the fd count 1, ipc.md §6.1) need a driver to export, so they were derived
 * from f32_1024 by hand: kind, nfds 1, device 2 / 10, data_offset 256,
 * region [0, +8192), total_size + 64, and the handle bytes 00..3f. The
 * kind-2 seed (cuda_vmm_f32_1024: a CUDA VMM allocation as a POSIX fd, byte
 * 0 the fd count 2) is cuda_ipc_f32_1024 with kind 2, nfds 2 and the 64
 * kind-specific bytes zero. */
#include <hurray/hurray.h>
#include <stdio.h>
#include <string.h>

static int write_seed(const char *dir, const char *name, hurray_buffer *h) {
  hurray_ipc_message m;
  if (hurray_ipc_export(h, HURRAY_IPC_DEFAULT, &m) != HURRAY_OK) return 1;
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (f == NULL) return 1;
  const unsigned char nfds = 2;
  fwrite(&nfds, 1, 1, f);
  fwrite(m.bytes, 1, m.size, f);
  fclose(f);
  return hurray_ipc_message_discard(&m) == HURRAY_OK ? 0 : 1;
}

static int shareable(hurray_dtype dt, int32_t ndim, const int64_t *shape, uint64_t flags,
                     hurray_buffer *out) {
  return hurray_alloc((hurray_device){HURRAY_DEVICE_CPU, 0}, dt, ndim, shape,
                      flags | HURRAY_ALLOC_SHAREABLE, out) != HURRAY_OK;
}

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  const char *dir = argv[1];
  hurray_buffer h;
  const int64_t s1[1] = {1024}, s2[2] = {3, 5}, s0[1] = {0};
  int64_t s8[8];
  for (int i = 0; i < 8; ++i) s8[i] = 2;
  int bad = 0;
  bad |=
      shareable((hurray_dtype){kDLFloat, 32, 1}, 1, s1, 0, &h) || write_seed(dir, "f32_1024", &h);
  bad |=
      shareable((hurray_dtype){kDLInt, 8, 1}, 0, NULL, 0, &h) || write_seed(dir, "scalar_i8", &h);
  bad |= shareable((hurray_dtype){kDLFloat, 64, 1}, 2, s2, HURRAY_FLAG_READ_ONLY, &h) ||
         write_seed(dir, "f64_3x5_read_only", &h);
  bad |= shareable((hurray_dtype){kDLUInt, 8, 1}, 1, s0, 0, &h) || write_seed(dir, "empty_u8", &h);
  bad |= shareable((hurray_dtype){kDLInt, 4, 1}, 1, s1, 0, &h) || write_seed(dir, "i4_packed", &h);
  bad |=
      shareable((hurray_dtype){kDLBfloat, 16, 1}, 8, s8, 0, &h) || write_seed(dir, "bf16_8d", &h);
  /* A shared handle with a byte_offset and negative strides (a reversed view). */
  bad |= shareable((hurray_dtype){kDLFloat, 32, 1}, 2, s2, 0, &h);
  if (!bad) {
    int64_t shape[2] = {3, 5}, strides[2] = {-5, 1};
    h.shape = shape;
    h.strides = strides;
    h.byte_offset = 10 * 4;
    bad |= write_seed(dir, "f32_reversed_view", &h);
  }
  return bad;
}
