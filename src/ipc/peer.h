// SPDX-License-Identifier: Apache-2.0
// The same-user check of hurray_ipc_send / hurray_ipc_recv
// (docs/impl/ipc.md §7). Free of the rest of the library, so that a test can
// compile it and pass any expected uid.
#ifndef HURRAY_SRC_IPC_PEER_H_
#define HURRAY_SRC_IPC_PEER_H_

#include <sys/types.h>

namespace hurray {
namespace detail {

enum PeerCheck { kPeerOk = 0, kPeerOtherUser = 1, kPeerUnknown = 2 };

// Asks the kernel (SO_PEERCRED) for the uid of socket_fd's peer, stored in
// *peer_uid, and compares it with `expected`. kPeerUnknown (errno set) when
// the socket has no peer credentials (not AF_UNIX, not connected).
PeerCheck check_peer_uid(int socket_fd, uid_t expected, uid_t *peer_uid);

}  // namespace detail
}  // namespace hurray

#endif  // HURRAY_SRC_IPC_PEER_H_
