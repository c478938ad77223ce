// SPDX-License-Identifier: Apache-2.0
// Who has which CUDA or HIP pool across processes (descriptor kinds 5 and
// 6, docs/impl/ipc.md §6): a pool's fd travels once per connection.
//
// Sender: each pool it sends from gets a number (first sight), and per
// connection (the socket's SO_COOKIE, never reused while the system runs)
// it remembers which pools' fds went.
//
// Receiver: one entry per pool of another process (the sender's pid, start
// time and pool number), imported once in this process however many
// connections bring it. The entry lists the connections that brought it
// (a kind-6 message is imported only on one of them) and counts the
// imported pointers; it goes (the pool destroyed, if its import lives)
// when both are none. A kind-5 message's fd is kept with the entry the
// moment hurray_ipc_recv has decoded it, before anything else about the
// message is checked, and for the entry's life: a message whose own import
// fails still leaves the pool importable by the kind-6 messages after it,
// and a reset of the context the pool was imported in (CUDA's
// cuDevicePrimaryCtxReset, which destroys the import) is followed by a new
// import from it.
//
// Connections end for this process when hurray_ipc_recv reads their end
// (forget_connection), or when no fd of this process refers to their
// socket any more: sweep_connections, run by hurray_ipc_recv and
// hurray_ipc_send, looks at a few registered connections per call.
#ifndef HURRAY_SRC_IPC_POOL_PEERS_H_
#define HURRAY_SRC_IPC_POOL_PEERS_H_

#include <cstdint>

#include "device/gpu_ipc.h"
#include "ipc/wire.h"

namespace hurray::detail {

// The connection `socket_fd` is one end of (SO_COOKIE), or 0 where the
// kernel has none (then every message carries its pool's fd).
uint64_t connection_of(int socket_fd);

// --- sender ---
// This process's number of `pool` (a CUmemoryPool / hipMemPool_t) in the
// context incarnation `epoch` (gpu_ipc.h: a pool made after a context reset
// is another pool, whatever its handle), given on first sight.
uint64_t pool_number(const void *pool, uint64_t epoch);
// Whether pool `id`'s fd went on connection `conn` (0: never).
bool pool_sent_on(uint64_t conn, uint64_t id);
// Pool `id`'s fd went on `conn` (after sendmsg succeeded).
void mark_pool_sent(uint64_t conn, uint64_t id);

// --- receiver ---
// A pool of another process, imported here or to be imported.
struct PoolRef;
// A kind-5 message of `sender`'s pool `id` arrived on `conn` (not 0): the
// connection brought the pool, and a dup of `fd` is kept with the entry
// (unless one is already). Never fails: without memory or fds the message's own import
// imports the pool (and records it) as before.
void keep_pool_fd(uint64_t conn, const WireSender &sender, uint64_t id, int fd);
// The pool for a pointer import, with a pointer reference for the caller:
// kind 6 (`fd` -1) only where `conn` brought it; kind 5 from `fd` (conn 0:
// hurray_ipc_import, the pool kept only while its pointers are). Imports
// the pool (open_pool on `device`) when no import is kept or the kept one's
// context incarnation is dead (pool_context_alive), from the kept fd or
// `fd`. *pool and *context: the live import and its incarnation (for
// open_pool_pointer and close_pool_pointer). nullptr with the message set
// on failure.
PoolRef *acquire_pool(uint64_t conn, const WireSender &sender, uint64_t id, int fd,
                      const GpuIpc *ipc, hurray_device device, int32_t *st, void **pool,
                      uint64_t *context);
// Drops a pointer reference; the pool goes with the last reference once no
// connection holds it. Release path: any thread, never sets the message.
void unref_pool(PoolRef *r);

// --- connections ---
// `socket_fd` refers to `conn` (called by hurray_ipc_recv / _send after a
// message): remembered for sweep_connections where the connection carries
// pools.
void note_connection(uint64_t conn, int socket_fd);
// The connection ended: its records (sent pools, brought pools) go.
void forget_connection(uint64_t conn);
// Looks at up to two registered connections other than `current`: one that
// no fd of this process refers to any more (its socket closed here, its end
// never read) is forgotten. A registered fd that still names the socket is
// one fcntl-free getsockopt; otherwise /proc/self/fd is searched for it.
void sweep_connections(uint64_t current);

}  // namespace hurray::detail

#endif  // HURRAY_SRC_IPC_POOL_PEERS_H_
