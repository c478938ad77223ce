// SPDX-License-Identifier: Apache-2.0
/* dlopen_probe.c - a runtime that dlopens an INSTALLED libhurray
 * (RTLD_NOW | RTLD_LOCAL, nothing of it linked) and runs the fresh-thread
 * probe of fresh_threads.h through hurray_get_api's function table.
 *
 * Usage: hurray_dlopen_probe PATH-TO-libhurray.so.M.m */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <hurray/hurray.h>

static const hurray_api *api;
#define HR(name) api->name
#define PROBE "dlopen_probe"
#include "fresh_threads.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s PATH-TO-libhurray\n", argv[0]);
    return 2;
  }
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "dlopen_probe: dlopen(\"%s\"): %s\n", argv[1], dlerror());
    return 2;
  }
  void *sym = dlsym(lib, "hurray_get_api");
  hurray_get_api_fn get_api = NULL;
  if (sym != NULL) memcpy(&get_api, &sym, sizeof get_api);
  if (get_api == NULL || get_api(HURRAY_API_VERSION, &api) != HURRAY_OK) {
    fprintf(stderr, "dlopen_probe: no function table %u.%u from %s\n",
            (unsigned)HURRAY_API_VERSION_MAJOR, (unsigned)HURRAY_API_VERSION_MINOR, argv[1]);
    return 2;
  }
  return ft_run();
}
