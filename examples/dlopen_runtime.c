// SPDX-License-Identifier: Apache-2.0
/* dlopen_runtime.c - a runtime that loads libhurray at run time and reaches
 * it only through hurray_get_api's function table (c-ffi §8).
 *
 * It links nothing of libhurray (only the C library, -ldl and pthreads):
 * hurray.h is included for its types, and the one symbol resolved by name is
 * hurray_get_api. The job: wrap a DLPack tensor this program owns (with a
 * counting deleter), import it, share it to four consumers, release three
 * of them on three threads, export the fourth as a DLPack tensor, delete
 * that, and check that the producer's deleter ran exactly once.
 *
 * Usage: hurray_example_dlopen_runtime [path-to-libhurray]
 * Without an argument it loads the library by its SONAME, libhurray.so.M.m
 * (M.m from hurray/version.h), through the usual dlopen search.
 *
 * Built against an installed libhurray (headers only; nothing to link):
 *   cc -std=c11 -Wall -Wextra -I"$PREFIX/include" dlopen_runtime.c -ldl -pthread -o dlrt
 *   ./dlrt "$PREFIX/lib/libhurray.so.0.1"      # or LD_LIBRARY_PATH=$PREFIX/lib ./dlrt
 * (In this tree CMake builds it as hurray_example_dlopen_runtime.) */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <hurray/dlpack.h>
#include <hurray/hurray.h>

#define STR_(x) #x
#define STR(x) STR_(x)
#define HURRAY_SONAME "libhurray.so." STR(HURRAY_VERSION_MAJOR) "." STR(HURRAY_VERSION_MINOR)

#define N_CONSUMERS 4
#define N_THREADS (N_CONSUMERS - 1) /* consumer 0 is exported instead */

/* ---- The producer: a 2x3 float32 tensor with a counting deleter. ------- */

static float g_data[6] = {0, 1, 2, 3, 4, 5};
static int64_t g_shape[2] = {2, 3};
static int64_t g_strides[2] = {3, 1};
static atomic_int g_deleter_calls;

/* May run on any thread: whichever lets go of the last handle. */
static void producer_deleter(DLManagedTensorVersioned *self) {
  atomic_fetch_add((atomic_int *)self->manager_ctx, 1);
}

static void make_producer_tensor(DLManagedTensorVersioned *t) {
  memset(t, 0, sizeof *t);
  t->version.major = DLPACK_MAJOR_VERSION;
  t->version.minor = DLPACK_MINOR_VERSION;
  t->manager_ctx = &g_deleter_calls;
  t->deleter = producer_deleter;
  t->dl_tensor.data = g_data;
  t->dl_tensor.device.device_type = kDLCPU;
  t->dl_tensor.device.device_id = 0;
  t->dl_tensor.ndim = 2;
  t->dl_tensor.dtype.code = kDLFloat;
  t->dl_tensor.dtype.bits = 32;
  t->dl_tensor.dtype.lanes = 1;
  t->dl_tensor.shape = g_shape;
  t->dl_tensor.strides = g_strides;
}

/* ---- Consumers released on threads. ------------------------------------ */

typedef struct consumer_job {
  const hurray_api *api;
  hurray_buffer handle; /* owned by the job */
  int32_t status;
} consumer_job;

static void *release_on_thread(void *arg) {
  consumer_job *job = (consumer_job *)arg;
  job->status = job->api->buffer_release(&job->handle);
  return NULL;
}

/* Prints a failed table call with libhurray's message; returns 1. */
static int report(const hurray_api *api, const char *what, int32_t st) {
  fprintf(stderr, "dlopen_runtime: %s failed: %s: %s\n", what, api->status_name(st),
          api->last_error());
  return 1;
}

/* dlsym returns an object pointer; ISO C has no cast to a function pointer,
 * so the bits are copied (POSIX guarantees they are the same). */
static hurray_get_api_fn resolve_get_api(void *lib) {
  hurray_get_api_fn fn = NULL;
  void *sym = dlsym(lib, "hurray_get_api");
  if (sym != NULL) memcpy(&fn, &sym, sizeof fn);
  return fn;
}

int main(int argc, char **argv) {
  const char *name = argc > 1 ? argv[1] : HURRAY_SONAME;
  if (argc > 2) {
    fprintf(stderr, "usage: %s [path-to-libhurray]\n", argv[0]);
    return 2;
  }

  /* 1. Load the library and resolve its one entry point. */
  void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "dlopen_runtime: could not load libhurray: tried dlopen(\"%s\"): %s\n", name,
            dlerror());
    return 2;
  }
  hurray_get_api_fn get_api = resolve_get_api(lib);
  if (get_api == NULL) {
    fprintf(stderr, "dlopen_runtime: %s has no hurray_get_api: %s\n", name, dlerror());
    return 2;
  }
  const hurray_api *api = NULL;
  int32_t st = get_api(HURRAY_API_VERSION, &api);
  if (st != HURRAY_OK) {
    /* No table, so no hurray_last_error either: report the number. */
    fprintf(stderr,
            "dlopen_runtime: %s refused function table version %u.%u (status %d; "
            "HURRAY_ERR_UNSUPPORTED_VERSION is %d)\n",
            name, (unsigned)HURRAY_API_VERSION_MAJOR, (unsigned)HURRAY_API_VERSION_MINOR, (int)st,
            (int)HURRAY_ERR_UNSUPPORTED_VERSION);
    return 2;
  }
  const uint32_t v = api->version();
  printf("loaded %s: libhurray %u.%u.%u, function table %u.%u, %zu bytes\n", name,
         (unsigned)(v >> 16), (unsigned)((v >> 8) & 0xFFu), (unsigned)(v & 0xFFu),
         (unsigned)(api->abi_version >> 16), (unsigned)(api->abi_version & 0xFFFFu),
         api->struct_size);

  /* 2. Import the producer's tensor: from here on libhurray owns it. */
  DLManagedTensorVersioned producer;
  make_producer_tensor(&producer);
  hurray_buffer h;
  st = api->from_dlpack_versioned(&producer, HURRAY_IMPORT_DEFAULT, &h);
  if (st != HURRAY_OK) return report(api, "from_dlpack_versioned", st);

  /* 3. One handle per consumer; h is consumed. */
  hurray_buffer consumers[N_CONSUMERS];
  st = api->share(&h, N_CONSUMERS, consumers);
  if (st != HURRAY_OK) {
    (void)api->buffer_release(&h);
    return report(api, "share", st);
  }

  /* 4. Consumer 0 is a DLPack framework. */
  DLManagedTensorVersioned *exported = NULL;
  st = api->to_dlpack_versioned(&consumers[0], &exported);
  if (st != HURRAY_OK) return report(api, "to_dlpack_versioned", st);
  const DLTensor *dl = &exported->dl_tensor;
  printf("DLPack consumer sees element [1][2] = %.1f\n",
         (double)((const float *)dl->data)[1 * dl->strides[0] + 2 * dl->strides[1]]);

  /* 5. The other consumers let go on their own threads. Each job takes its
   *    handle over with hurray_buffer_move, so consumers[i] is left empty. */
  consumer_job jobs[N_THREADS];
  pthread_t threads[N_THREADS];
  for (int i = 0; i < N_THREADS; ++i) {
    jobs[i].api = api;
    jobs[i].handle = hurray_buffer_move(&consumers[i + 1]);
    jobs[i].status = -1;
    if (pthread_create(&threads[i], NULL, release_on_thread, &jobs[i]) != 0) {
      fprintf(stderr, "dlopen_runtime: pthread_create failed\n");
      return 1;
    }
  }
  int failed = 0;
  for (int i = 0; i < N_THREADS; ++i) {
    pthread_join(threads[i], NULL);
    if (jobs[i].status != HURRAY_OK) failed = report(api, "buffer_release", jobs[i].status);
  }
  const int before = atomic_load(&g_deleter_calls);
  printf(
      "after %d releases on %d threads: producer's deleter ran %d time(s) (the DLPack "
      "consumer still holds it)\n",
      N_THREADS, N_THREADS, before);

  /* 6. The DLPack consumer is done: the last reference goes. */
  st = api->dlpack_versioned_delete(exported);
  if (st != HURRAY_OK) return report(api, "dlpack_versioned_delete", st);
  const int after = atomic_load(&g_deleter_calls);
  printf("after the DLPack consumer: producer's deleter ran %d time(s)\n", after);

  /* libhurray stays mapped (-z nodelete); nothing of it is used after this. */
  dlclose(lib);
  if (failed || before != 0 || after != 1) {
    fprintf(stderr, "dlopen_runtime: FAILED: expected the deleter to run once, at the end\n");
    return 1;
  }
  return 0;
}
