// SPDX-License-Identifier: Apache-2.0
// pool_peers.h: who has which pool, per connection (docs/impl/ipc.md §6,
// kinds 5 and 6).
#include "ipc/pool_peers.h"

#include <sys/socket.h>

#include <map>
#include <mutex>
#include <new>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

namespace hurray::detail {

struct PoolRef {
  uint64_t conn;
  WireSender sender;
  uint64_t id;
  const GpuIpc *ipc;
  hurray_device device;
  void *pool;
  int refs;
};

namespace {

using Key = std::tuple<uint64_t, uint32_t, uint64_t, uint64_t>;  // conn, pid, start, id

struct State {
  std::mutex mu;
  std::map<const void *, uint64_t> numbers;  // sender: pool -> its number
  uint64_t next = 1;
  std::set<std::pair<uint64_t, uint64_t>> sent;  // sender: (conn, pool number)
  std::map<Key, PoolRef *> imported;             // receiver: cached pools of connections
};

// Never destroyed: releases may run while the process exits.
State &state() {
  static State *s = new State;
  return *s;
}

Key key_of(uint64_t conn, const WireSender &s, uint64_t id) {
  return Key{conn, s.pid, s.start_time, id};
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

uint64_t pool_number(const void *pool) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.numbers.find(pool);
  if (it != s.numbers.end()) return it->second;
  const uint64_t id = s.next++;
  s.numbers[pool] = id;
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
}

void *pool_handle(const PoolRef *r) { return r->pool; }

PoolRef *find_pool(uint64_t conn, const WireSender &sender, uint64_t id) {
  if (conn == 0) return nullptr;
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.imported.find(key_of(conn, sender, id));
  if (it == s.imported.end()) return nullptr;
  ++it->second->refs;
  return it->second;
}

PoolRef *add_pool(uint64_t conn, const WireSender &sender, uint64_t id, const GpuIpc *ipc,
                  hurray_device device, void *pool) {
  State &s = state();
  PoolRef *r = new (std::nothrow) PoolRef{conn, sender, id, ipc, device, pool, 1};
  if (r == nullptr) {
    ipc->close_pool(device, pool);
    return nullptr;
  }
  if (conn == 0) return r;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.imported.find(key_of(conn, sender, id));
    if (it == s.imported.end()) {
      r->refs = 2;  // the caller's and the connection's
      s.imported[key_of(conn, sender, id)] = r;
      return r;
    }
    ++it->second->refs;
    PoolRef *existing = it->second;
    // Another thread imported the same pool first: this import is undone
    // (outside the lock, below).
    delete r;
    r = existing;
  }
  ipc->close_pool(device, pool);
  return r;
}

void unref_pool(PoolRef *r) {
  State &s = state();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (--r->refs > 0) return;
  }
  r->ipc->close_pool(r->device, r->pool);
  delete r;
}

void forget_connection(uint64_t conn) {
  if (conn == 0) return;
  State &s = state();
  std::vector<PoolRef *> last;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    for (auto it = s.imported.begin(); it != s.imported.end();) {
      if (std::get<0>(it->first) != conn) {
        ++it;
        continue;
      }
      if (--it->second->refs == 0) last.push_back(it->second);
      it = s.imported.erase(it);
    }
    for (auto it = s.sent.begin(); it != s.sent.end();) {
      it = it->first == conn ? s.sent.erase(it) : std::next(it);
    }
  }
  for (PoolRef *r : last) {
    r->ipc->close_pool(r->device, r->pool);
    delete r;
  }
}

}  // namespace hurray::detail
