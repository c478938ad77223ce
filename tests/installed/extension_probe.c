// SPDX-License-Identifier: Apache-2.0
/* extension_probe.c - an extension-style shared object: it links libhurray
 * (DT_NEEDED libhurray.so.M.m, found through its RUNPATH) and calls it
 * directly, the way a Python extension module, a JNI library or a Go
 * c-shared library does. extension_host.c loads it with dlopen, so
 * libhurray arrives in the process by dlopen too. */
#include <hurray/hurray.h>

#define HR(name) hurray_##name
#define PROBE "extension_probe"
#include "fresh_threads.h"

/* The extension's one entry point: runs the probe; 0 when every check held. */
__attribute__((visibility("default"))) int hurray_extension_probe_run(void) {
  if (hurray_check_version(HURRAY_VERSION) != HURRAY_OK) {
    fprintf(stderr, "extension_probe: %s\n", hurray_last_error());
    return 1;
  }
  return ft_run();
}
