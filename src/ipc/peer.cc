// SPDX-License-Identifier: Apache-2.0
// SO_PEERCRED: the credentials the kernel recorded for the peer when the
// connection was made (connect/accept, or socketpair), not forgeable by it.
#include "ipc/peer.h"

#include <sys/socket.h>

namespace hurray::detail {

PeerCheck check_peer_uid(int socket_fd, uid_t expected, uid_t *peer_uid) {
  struct ucred cred;
  socklen_t len = sizeof cred;
  if (getsockopt(socket_fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof cred) {
    return kPeerUnknown;
  }
  *peer_uid = cred.uid;
  return cred.uid == expected ? kPeerOk : kPeerOtherUser;
}

}  // namespace hurray::detail
