// SPDX-License-Identifier: Apache-2.0
/*
 * host.c - loads the Go interop consumer (a -buildmode=c-shared library
 * whose DT_NEEDED includes libhurray) with dlopen, RTLD_LOCAL, nothing else
 * linked, the way a JVM or a Python process loads a Go library, and runs its
 * fresh-thread check: on each of several fresh OS threads the first
 * libhurray call is a Share of an imported tensor, and every field of every
 * handle is checked (any way of loading, any thread first: c-ffi §8).
 *
 *   host <libhurray_go_consumer.so> [threads [shares]]
 *
 * Prints one line; exits 0 when the check passed, 1 otherwise.
 */
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*fresh_fn)(int threads, int shares, char *msg, size_t cap);

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s <libhurray_go_consumer.so> [threads [shares]]\n", argv[0]);
    return 2;
  }
  int threads = argc > 2 ? atoi(argv[2]) : 8;
  int shares = argc > 3 ? atoi(argv[3]) : 4;
  void *so = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (so == NULL) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  fresh_fn fresh = (fresh_fn)dlsym(so, "HurrayGoFreshThreads");
  if (fresh == NULL) {
    fprintf(stderr, "dlsym HurrayGoFreshThreads: %s\n", dlerror());
    return 1;
  }
  char msg[1024] = "";
  if (fresh(threads, shares, msg, sizeof msg) != 0) {
    printf("FAIL dlopen'ed Go consumer, %d fresh threads: %s\n", threads, msg);
    return 1;
  }
  printf(
      "ok   dlopen'ed Go consumer: Share as the first call on %d fresh threads, %d shares each, "
      "all fields right\n",
      threads, shares);
  return 0;
}
