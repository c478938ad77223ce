// SPDX-License-Identifier: Apache-2.0
// Per-connection state of CUDA and HIP pool memory across processes (descriptor
// kinds 5 and 6, docs/impl/ipc.md §6): a pool's fd travels once per
// connection. The sender numbers each pool it sends from and remembers, per
// connection (the socket's SO_COOKIE, never reused while the system runs),
// which pools went; the receiver keeps each pool it imported from a
// connection until that connection ends (hurray_ipc_recv sees it closed)
// and no pointer of it is still imported.
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
// This process's number of `pool` (a CUmemoryPool / hipMemPool_t), given on
// first sight.
uint64_t pool_number(const void *pool);
// Whether pool `id`'s fd went on connection `conn` (0: never).
bool pool_sent_on(uint64_t conn, uint64_t id);
// Pool `id`'s fd went on `conn` (after sendmsg succeeded).
void mark_pool_sent(uint64_t conn, uint64_t id);

// --- receiver ---
// A pool imported from another process, shared by its imported pointers
// and, for a connection, by that connection's cache.
struct PoolRef;
void *pool_handle(const PoolRef *r);
// The pool `id` of `sender` imported on connection `conn` (never for conn
// 0), with a reference for the caller; nullptr when there is none.
PoolRef *find_pool(uint64_t conn, const WireSender &sender, uint64_t id);
// Records `pool` (just imported by `ipc` on `device`) and returns it with a
// reference for the caller; with conn != 0 the connection's cache keeps
// another until forget_connection. When another thread recorded the same
// pool meanwhile, `pool` is destroyed and that one returned. nullptr (and
// `pool` destroyed) when the host is out of memory.
PoolRef *add_pool(uint64_t conn, const WireSender &sender, uint64_t id, const GpuIpc *ipc,
                  hurray_device device, void *pool);
// Drops a reference; the last destroys the imported pool (close_pool).
// Release path: any thread, never sets the message.
void unref_pool(PoolRef *r);
// The connection ended: its cache lets go of its pools.
void forget_connection(uint64_t conn);

}  // namespace hurray::detail

#endif  // HURRAY_SRC_IPC_POOL_PEERS_H_
