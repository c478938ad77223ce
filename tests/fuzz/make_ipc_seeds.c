// SPDX-License-Identifier: Apache-2.0
/* Writes the seed corpus of hurray_ipc_descriptor_fuzz (tests/fuzz/ipc_corpus):
 * real descriptors from hurray_ipc_export, each file one fuzz input (byte 0:
 * the fd count 2; then the descriptor). Not built by CMake; regenerate with
 *   cc -std=c11 -Iinclude -Ibuild/dev/include tests/fuzz/make_ipc_seeds.c \
 *      -Lbuild/dev -lhurray -Wl,-rpath,$PWD/build/dev -o /tmp/seeds
 *   /tmp/seeds tests/fuzz/ipc_corpus
 * The GPU seeds (kinds 2 to 6, ipc.md §6.1) need a driver to export, so
 * gpu_seed() derives them from f32_1024's bytes, as an export would write
 * them: kind, nfds (byte 0 and the descriptor: 1 for kinds 3, 4 and 6, 2
 * for kinds 2 and 5), device 2 / 10 (the hip_* seeds), data_offset 256,
 * region [0, +8192), total_size + 168, then the GPU part: UUID c7 11 .. e1, sender pid 4242 and
 * start time 123456, flags 0, handle bytes 00..3f (kind 2: zero), event zero; the *_event_* seeds
 * as every export now writes them (ipc.md §6): flags 1 (an IPC event is present) and event
 * bytes 80..bf; kinds 5 and 6 (CUDA or, in the hip_pool_* seeds, HIP pool memory) with the handle
 * bytes as the pointer's export data and pool number 7 in the 8 bytes after the GPU part.
 * v1_cuda_ipc_f32_1024 is a wire-version-1 descriptor of kind 3 (64 handle
 * bytes after the strides), which version 2 refuses.
 * The set_* seeds are set descriptors (ipc.md §10) from
 * hurray_ipc_export_set: byte 0 is 16 (bit 4: a set), byte 1 the fd count,
 * then the descriptor: a group of 3 (one region), a group of 2 beside a
 * read-only buffer and a non-shareable tensor (three regions, one of them
 * the copy region). set_gpu_cuda_ipc_and_pool is a set with GPU regions
 * (ipc.md §10), built by hand as gpu_seed builds its descriptors (an export
 * needs a driver): entries 0 and 1 (f32 x 16 at data_offset 0 and 1024) in
 * a kind-3 region, entry 2 (data_offset 256) in a kind-5 region; each
 * region's single descriptor (the whole 8192-byte allocation as u8, the
 * GPU part as the *_event_* seeds, pool number 7) after the entries; 3 fds. */
#include <hurray/hurray.h>
#include <stdint.h>
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

static int shareable_f32(const int64_t *shape, hurray_buffer *out);
static int shareable(hurray_dtype dt, int32_t ndim, const int64_t *shape, uint64_t flags,
                     hurray_buffer *out);

static int write_set_seed(const char *dir, const char *name, hurray_buffer *hs, size_t n) {
  hurray_ipc_set_message *m = NULL;
  if (hurray_ipc_export_set(hs, n, HURRAY_IPC_DEFAULT, &m, NULL) != HURRAY_OK) return 1;
  const uint8_t *bytes;
  size_t size, nfds;
  const int32_t *fds;
  if (hurray_ipc_set_message_parts(m, &bytes, &size, &fds, &nfds) != HURRAY_OK) return 1;
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (f == NULL) return 1;
  const unsigned char head[2] = {16, (unsigned char)nfds};
  fwrite(head, 1, 2, f);
  fwrite(bytes, 1, size, f);
  fclose(f);
  return hurray_ipc_set_message_discard(m) != HURRAY_OK;
}

static int set_seeds(const char *dir) {
  const int64_t s3[1] = {3}, s2[2] = {2, 4};
  const hurray_tensor_desc descs[3] = {
      {{kDLFloat, 32, 1}, 1, s3, 0}, {{kDLInt, 8, 1}, 2, s2, 0}, {{kDLFloat, 16, 1}, 0, NULL, 0}};
  hurray_buffer hs[5];
  int bad = hurray_alloc_group((hurray_device){HURRAY_DEVICE_CPU, 0}, 3, descs,
                               HURRAY_ALLOC_SHAREABLE, NULL, hs, NULL) != HURRAY_OK;
  bad |= bad || write_set_seed(dir, "set_group_of_3", hs, 3);
  bad |= hurray_alloc_group((hurray_device){HURRAY_DEVICE_CPU, 0}, 2, descs, HURRAY_ALLOC_SHAREABLE,
                            NULL, hs, NULL) != HURRAY_OK;
  bad |= shareable((hurray_dtype){kDLFloat, 64, 1}, 2, s2, HURRAY_FLAG_READ_ONLY, &hs[2]);
  bad |= hurray_alloc((hurray_device){HURRAY_DEVICE_CPU, 0}, (hurray_dtype){kDLFloat, 32, 1}, 1, s3,
                      0, &hs[3]) != HURRAY_OK;
  bad |= bad || write_set_seed(dir, "set_group_read_only_copy", hs, 4);
  return bad;
}

static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = (unsigned char)(v >> (8 * i));
}

/* f32_1024's descriptor `cpu` (96 bytes: ndim 1) as GPU kind `kind`. */
static int gpu_seed(const char *dir, const char *name, const unsigned char *cpu, uint32_t kind,
                    uint32_t version, int event) {
  unsigned char d[96 + 168 + 8];
  memset(d, 0, sizeof d);
  memcpy(d, cpu, 96);
  const int pool = kind == 5 || kind == 6;
  const uint32_t part = version == 1 ? 64 : 168 + (pool ? 8 : 0);
  const uint32_t nfds = kind == 2 || kind == 5 ? 2 : 1;
  put32(d + 4, version);
  put32(d + 12, 96 + part);
  put32(d + 16, kind);
  put32(d + 20, nfds);
  put32(d + 32, strncmp(name, "hip_", 4) == 0 ? 10 : 2); /* kDLROCM for HIP's */
  put32(d + 36, 0);
  put64(d + 56, 256);
  put64(d + 64, 0);
  put64(d + 72, 8192);
  unsigned char *g = d + 96;
  if (version == 1) {
    for (int i = 0; i < 64; ++i) g[i] = (unsigned char)i;
  } else {
    for (int i = 0; i < 16; ++i) g[i] = (unsigned char)(0x10 * i + i);
    g[0] = 0xc7;
    g[15] = 0xe1;
    put32(g + 16, 4242);
    put64(g + 24, 123456);
    if (kind != 2) {
      for (int i = 0; i < 64; ++i) g[40 + i] = (unsigned char)i;
    }
    if (event) {
      put64(g + 32, 1);
      for (int i = 0; i < 64; ++i) g[104 + i] = (unsigned char)(0x80 + i);
    }
    if (pool) put64(g + 168, 7);
  }
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (f == NULL) return 1;
  const unsigned char n = (unsigned char)nfds;
  fwrite(&n, 1, 1, f);
  fwrite(d, 1, 96 + part, f);
  return fclose(f) != 0;
}

/* The single descriptor of a set's GPU region of `kind` at out (its size
 * returned), from f32_1024's `cpu`: the 8192-byte allocation as u8. */
static uint32_t gpu_region_desc(const unsigned char *cpu, uint32_t kind, unsigned char *out) {
  const int pool = kind == 5 || kind == 6;
  const uint32_t size = 96 + 168 + (pool ? 8 : 0);
  memset(out, 0, size);
  memcpy(out, cpu, 96);
  put32(out + 4, 2);
  put32(out + 12, size);
  put32(out + 16, kind);
  put32(out + 20, kind == 2 || kind == 5 ? 2 : 1);
  put32(out + 32, 2); /* kDLCUDA 0 */
  put32(out + 36, 0);
  out[40] = kDLUInt;
  out[41] = 8;
  out[42] = 1;
  out[43] = 0;
  put32(out + 44, 1);
  put64(out + 48, 0);
  put64(out + 56, 0);
  put64(out + 64, 0);
  put64(out + 72, 8192);
  put64(out + 80, 8192);
  put64(out + 88, 1);
  unsigned char *g = out + 96;
  for (int i = 0; i < 16; ++i) g[i] = (unsigned char)(0x10 * i + i);
  g[0] = 0xc7;
  g[15] = 0xe1;
  put32(g + 16, 4242);
  put64(g + 24, 123456);
  put64(g + 32, 1);
  for (int i = 0; i < 64; ++i) g[40 + i] = (unsigned char)i;
  for (int i = 0; i < 64; ++i) g[104 + i] = (unsigned char)(0x80 + i);
  if (pool) put64(g + 168, 7);
  return size;
}

static int gpu_set_seed(const char *dir, const unsigned char *cpu) {
  unsigned char d[48 + 2 * 32 + 3 * 64 + 264 + 272];
  memset(d, 0, sizeof d);
  const uint32_t entries_at = 48 + 2 * 32, desc0 = entries_at + 3 * 64;
  put32(d, 0x53495248u); /* "HRIS" */
  put32(d + 4, 1);
  put32(d + 8, 48);
  put32(d + 12, (uint32_t)sizeof d);
  put32(d + 16, 3);
  put32(d + 20, 2);
  put32(d + 24, 3); /* kind 3: 1 fd, kind 5: 2 */
  put32(d + 28, 32);
  put32(d + 32, 48);
  const uint32_t size0 = gpu_region_desc(cpu, 3, d + desc0);
  const uint32_t size1 = gpu_region_desc(cpu, 5, d + desc0 + size0);
  const uint32_t kinds[2] = {3, 5}, ats[2] = {desc0, desc0 + size0}, sizes[2] = {size0, size1},
                 counts[2] = {2, 1};
  for (int r = 0; r < 2; ++r) {
    unsigned char *p = d + 48 + 32 * r;
    put32(p, kinds[r]);
    put64(p + 8, ats[r]);
    put64(p + 16, sizes[r]);
    put32(p + 24, counts[r]);
  }
  const uint32_t regions[3] = {0, 0, 1};
  const uint64_t offsets[3] = {0, 1024, 256};
  for (int i = 0; i < 3; ++i) {
    unsigned char *e = d + entries_at + 64 * i;
    put32(e, regions[i]);
    put32(e + 4, 1);
    e[16] = kDLFloat;
    e[17] = 32;
    e[18] = 1;
    put32(e + 20, 2);
    put64(e + 40, offsets[i]);
    put64(e + 48, 16);
    put64(e + 56, 1);
  }
  char path[512];
  snprintf(path, sizeof path, "%s/set_gpu_cuda_ipc_and_pool", dir);
  FILE *f = fopen(path, "wb");
  if (f == NULL) return 1;
  const unsigned char head[2] = {16, 3};
  fwrite(head, 1, 2, f);
  fwrite(d, 1, sizeof d, f);
  return fclose(f) != 0;
}

static int gpu_seeds(const char *dir) {
  hurray_buffer h;
  const int64_t s1[1] = {1024};
  if (shareable_f32(s1, &h)) return 1;
  hurray_ipc_message m;
  if (hurray_ipc_export(&h, HURRAY_IPC_DEFAULT, &m) != HURRAY_OK || m.size != 96) return 1;
  int bad = gpu_seed(dir, "cuda_ipc_f32_1024", m.bytes, 3, 2, 0);
  bad |= gpu_seed(dir, "hip_ipc_f32_1024", m.bytes, 4, 2, 0);
  bad |= gpu_seed(dir, "cuda_vmm_f32_1024", m.bytes, 2, 2, 0);
  bad |= gpu_seed(dir, "cuda_ipc_event_f32_1024", m.bytes, 3, 2, 1);
  bad |= gpu_seed(dir, "hip_ipc_event_f32_1024", m.bytes, 4, 2, 1);
  bad |= gpu_seed(dir, "cuda_vmm_event_f32_1024", m.bytes, 2, 2, 1);
  bad |= gpu_seed(dir, "v1_cuda_ipc_f32_1024", m.bytes, 3, 1, 0);
  bad |= gpu_seed(dir, "cuda_pool_fd_f32_1024", m.bytes, 5, 2, 0);
  bad |= gpu_seed(dir, "cuda_pool_fd_event_f32_1024", m.bytes, 5, 2, 1);
  bad |= gpu_seed(dir, "cuda_pool_event_f32_1024", m.bytes, 6, 2, 1);
  bad |= gpu_seed(dir, "hip_pool_fd_event_f32_1024", m.bytes, 5, 2, 1);
  bad |= gpu_seed(dir, "hip_pool_event_f32_1024", m.bytes, 6, 2, 1);
  bad |= gpu_set_seed(dir, m.bytes);
  return bad | (hurray_ipc_message_discard(&m) != HURRAY_OK);
}

static int shareable(hurray_dtype dt, int32_t ndim, const int64_t *shape, uint64_t flags,
                     hurray_buffer *out) {
  return hurray_alloc((hurray_device){HURRAY_DEVICE_CPU, 0}, dt, ndim, shape,
                      flags | HURRAY_ALLOC_SHAREABLE, out) != HURRAY_OK;
}

static int shareable_f32(const int64_t *shape, hurray_buffer *out) {
  return shareable((hurray_dtype){kDLFloat, 32, 1}, 1, shape, 0, out);
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
  bad |= gpu_seeds(dir);
  bad |= set_seeds(dir);
  return bad;
}
