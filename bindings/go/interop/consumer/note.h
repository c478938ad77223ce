// SPDX-License-Identifier: Apache-2.0
/* note.h - C helper of the Go interop consumer: calls a C callback. */
#ifndef HURRAY_GO_INTEROP_NOTE_H_
#define HURRAY_GO_INTEROP_NOTE_H_
typedef void (*hgo_note_fn)(void);
void hgo_call_note(hgo_note_fn f);
#endif
