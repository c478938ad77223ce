// SPDX-License-Identifier: Apache-2.0
/* extension_host.c - a host that links nothing of libhurray and loads an
 * extension (extension_probe.c) with dlopen(RTLD_NOW | RTLD_LOCAL), as an
 * interpreter loads an extension module; libhurray comes in as the
 * extension's DT_NEEDED dependency.
 *
 * Usage: hurray_extension_host PATH-TO-EXTENSION.so */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s PATH-TO-EXTENSION\n", argv[0]);
    return 2;
  }
  void *ext = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (ext == NULL) {
    fprintf(stderr, "extension_host: dlopen(\"%s\"): %s\n", argv[1], dlerror());
    return 2;
  }
  void *sym = dlsym(ext, "hurray_extension_probe_run");
  int (*run)(void) = NULL;
  if (sym != NULL) memcpy(&run, &sym, sizeof run);
  if (run == NULL) {
    fprintf(stderr, "extension_host: %s has no hurray_extension_probe_run\n", argv[1]);
    return 2;
  }
  return run();
}
