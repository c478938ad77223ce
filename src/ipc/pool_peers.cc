// SPDX-License-Identifier: Apache-2.0
// pool_peers.h: who has which pool, per connection (docs/impl/ipc.md §6,
// kinds 5 and 6).
#include "ipc/pool_peers.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "common/error.h"

namespace hurray::detail {

struct PoolRef {
  WireSender sender;
  uint64_t id;
  // Set by the import, under the import lock; set again by an import
  // after a reset of the context the import was made in (`context`, its
  // incarnation: dead, the pool went with it and is neither used nor
  // destroyed).
  const GpuIpc *ipc;
  hurray_device device;
  void *pool;
  uint64_t context;
  // A dup of the pool's fd (kind 5), kept for the entry's life (set under
  // the state lock, closed by destroy): what imports the pool again after
  // a context reset, or after a failed import. -1: none could be kept.
  int fd;
  std::set<uint64_t> conns;  // connections that brought the pool
  int refs;                  // pointer imports, and acquirers under way
};

namespace {

using Key = std::tuple<uint32_t, uint64_t, uint64_t>;  // pid, start, id

struct State {
  std::mutex mu;
  std::map<std::pair<const void *, uint64_t>, uint64_t> numbers;  // sender: (pool, epoch) -> number
  uint64_t next = 1;
  std::set<std::pair<uint64_t, uint64_t>> sent;  // sender: (conn, pool number)
  std::map<Key, PoolRef *> pools;                // receiver: other processes' pools
  std::map<uint64_t, int> conns;  // connections with records -> the fd last used (-1)
  uint64_t swept = 0;             // the connection the last sweep looked at
  // conns.size(), written under mu: sends and receives of a process that
  // never moved pool memory read it and take no lock.
  std::atomic<size_t> nconns{0};
  std::mutex import_mu;  // one pool import at a time
};

// Never destroyed: releases may run while the process exits.
State &state() {
  static State *s = new State;
  return *s;
}

Key key_of(const WireSender &s, uint64_t id) { return Key{s.pid, s.start_time, id}; }

// With s.mu held.
void register_locked(State &s, uint64_t conn) {
  s.conns.emplace(conn, -1);
  s.nconns.store(s.conns.size(), std::memory_order_relaxed);
}

// With s.mu held: whether `r` is to go (nothing holds it); if so it is
// taken out of the table.
bool unused_locked(State &s, PoolRef *r) {
  if (r->refs > 0 || !r->conns.empty()) return false;
  s.pools.erase(key_of(r->sender, r->id));
  return true;
}

void destroy(PoolRef *r) {
  if (r->pool != nullptr) r->ipc->close_pool(r->device, r->pool, r->context);  // if alive
  if (r->fd >= 0) close(r->fd);
  delete r;
}

bool names(int fd, uint64_t conn) { return fd >= 0 && connection_of(fd) == conn; }

// An fd of this process that refers to the socket `conn`, or -1.
int find_socket(uint64_t conn) {
  DIR *dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -2;  // cannot tell: taken as still open
  int found = -1;
  while (found < 0) {
    struct dirent *e = readdir(dir);
    if (e == nullptr) break;
    char *end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    struct stat st;
    if (fstat(static_cast<int>(fd), &st) == 0 && S_ISSOCK(st.st_mode) &&
        names(static_cast<int>(fd), conn)) {
      found = static_cast<int>(fd);
    }
  }
  closedir(dir);
  return found;
}

}  // namespace

uint64_t connection_of(int socket_fd) {
  uint64_t cookie = 0;
  socklen_t len = sizeof cookie;
  if (getsockopt(socket_fd, SOL_SOCKET, SO_COOKIE, &cookie, &len) != 0 || len != sizeof cookie) {
    return 0;
  }
  return cookie;
}

uint64_t pool_number(const void *pool, uint64_t epoch) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.numbers.find({pool, epoch});
  if (it != s.numbers.end()) return it->second;
  const uint64_t id = s.next++;
  s.numbers[{pool, epoch}] = id;
  return id;
}

bool pool_sent_on(uint64_t conn, uint64_t id) {
  if (conn == 0) return false;
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.sent.count({conn, id}) != 0;
}

void mark_pool_sent(uint64_t conn, uint64_t id) {
  if (conn == 0) return;
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.sent.insert({conn, id});
  register_locked(s, conn);
}

void keep_pool_fd(uint64_t conn, const WireSender &sender, uint64_t id, int fd) {
  if (conn == 0 || fd < 0) return;
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.pools.find(key_of(sender, id));
  PoolRef *r = it != s.pools.end() ? it->second : nullptr;
  if (r == nullptr) {
    r = new (std::nothrow) PoolRef{sender, id, nullptr, {}, nullptr, 0, -1, {}, 0};
    if (r == nullptr) return;
    s.pools[key_of(sender, id)] = r;
  }
  r->conns.insert(conn);
  register_locked(s, conn);
  if (r->fd < 0) r->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);  // -1: not kept
}

PoolRef *acquire_pool(uint64_t conn, const WireSender &sender, uint64_t id, int fd,
                      const GpuIpc *ipc, hurray_device device, int32_t *st, void **pool,
                      uint64_t *context) {
  State &s = state();
  PoolRef *r = nullptr;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.pools.find(key_of(sender, id));
    r = it != s.pools.end() ? it->second : nullptr;
    if (fd < 0 && (r == nullptr || r->conns.count(conn) == 0)) {
      *st = fail(HURRAY_ERR_IPC,
                 "the descriptor (kind 6) names pool %" PRIu64 " of process %" PRIu32
                 ", which did not come on this connection: a pool's fd travels once per "
                 "connection, and kind 6 is received only by hurray_ipc_recv on the connection "
                 "that brought it",
                 id, sender.pid);
      return nullptr;
    }
    if (r == nullptr) {
      r = new (std::nothrow) PoolRef{sender, id, nullptr, {}, nullptr, 0, -1, {}, 0};
      if (r == nullptr) {
        *st = fail(HURRAY_ERR_OUT_OF_MEMORY, "allocating host bookkeeping for a pool failed");
        return nullptr;
      }
      s.pools[key_of(sender, id)] = r;
    }
    if (conn != 0) {
      r->conns.insert(conn);  // kind 5 whose fd could not be kept (keep_pool_fd)
      register_locked(s, conn);
    }
    // Kept for the entry's life (keep_pool_fd's, or this kind-5 message's).
    if (r->fd < 0 && fd >= 0) r->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    ++r->refs;
  }
  *st = HURRAY_OK;
  {
    std::lock_guard<std::mutex> imp(s.import_mu);
    if (r->pool != nullptr && !r->ipc->pool_context_alive(r->device, r->context)) {
      // A reset of the context it was imported in (cuDevicePrimaryCtxReset)
      // destroyed the import and the pointers imported from it: not named
      // to the driver again (their releases check the same), imported anew.
      r->pool = nullptr;
    }
    if (r->pool == nullptr) {
      int kept = -1;
      {
        std::lock_guard<std::mutex> lock(s.mu);
        kept = r->fd;  // closed only by destroy, which waits for refs 0
      }
      const int from = kept >= 0 ? kept : fd;
      void *handle = nullptr;
      uint64_t context = 0;
      if (from < 0) {
        *st = fail(HURRAY_ERR_IPC,
                   "pool %" PRIu64 " of process %" PRIu32
                   " came on this connection, but its fd could not be kept and no import of it "
                   "lives here (its import failed, or a reset of the device's context destroyed "
                   "it): later buffers of that pool cannot be imported on this connection",
                   id, sender.pid);
      } else {
        *st = ipc->open_pool(device, from, &handle, &context);
      }
      if (*st == HURRAY_OK) {
        r->ipc = ipc;
        r->device = device;
        r->pool = handle;
        r->context = context;
      }
    } else if (r->ipc != ipc || r->device.device_type != device.device_type ||
               r->device.device_id != device.device_id) {
      *st = fail(HURRAY_ERR_IPC,
                 "the descriptor names pool %" PRIu64 " of process %" PRIu32
                 ", imported here on %s device %" PRId32 ", as memory of %s device %" PRId32,
                 id, sender.pid, device_type_name(r->device.device_type), r->device.device_id,
                 device_type_name(device.device_type), device.device_id);
    }
    if (*st == HURRAY_OK) {
      *pool = r->pool;
      *context = r->context;
    }
  }
  if (*st != HURRAY_OK) {
    unref_pool(r);
    return nullptr;
  }
  return r;
}

void unref_pool(PoolRef *r) {
  State &s = state();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    --r->refs;
    if (!unused_locked(s, r)) return;
  }
  destroy(r);
}

void note_connection(uint64_t conn, int socket_fd) {
  if (conn == 0) return;
  State &s = state();
  if (s.nconns.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.conns.find(conn);
  if (it != s.conns.end()) it->second = socket_fd;
}

void forget_connection(uint64_t conn) {
  if (conn == 0) return;
  State &s = state();
  std::vector<PoolRef *> last;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.conns.erase(conn);
    s.nconns.store(s.conns.size(), std::memory_order_relaxed);
    for (auto it = s.pools.begin(); it != s.pools.end();) {
      PoolRef *r = it->second;
      ++it;  // before unused_locked erases r's entry
      if (r->conns.erase(conn) != 0 && unused_locked(s, r)) last.push_back(r);
    }
    for (auto it = s.sent.begin(); it != s.sent.end();) {
      it = it->first == conn ? s.sent.erase(it) : std::next(it);
    }
  }
  for (PoolRef *r : last) destroy(r);
}

void sweep_connections(uint64_t current) {
  State &s = state();
  if (s.nconns.load(std::memory_order_relaxed) == 0) return;
  std::pair<uint64_t, int> look[2];
  int n = 0;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.conns.empty()) return;
    auto it = s.conns.upper_bound(s.swept);
    for (size_t seen = 0; seen < s.conns.size() && n < 2; ++seen, ++it) {
      if (it == s.conns.end()) it = s.conns.begin();
      if (it->first == current) continue;
      look[n++] = *it;
      s.swept = it->first;
    }
  }
  for (int i = 0; i < n; ++i) {
    const uint64_t conn = look[i].first;
    if (names(look[i].second, conn)) continue;
    const int fd = find_socket(conn);
    if (fd == -1) {
      forget_connection(conn);  // no fd of this process refers to it any more
    } else if (fd >= 0) {
      note_connection(conn, fd);
    }
  }
}

}  // namespace hurray::detail
