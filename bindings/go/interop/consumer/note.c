// SPDX-License-Identifier: Apache-2.0
/* Calls a C function pointer handed to the Go consumer. */
#include "note.h"

void hgo_call_note(hgo_note_fn f) {
  if (f != 0) f();
}
