# SPDX-License-Identifier: Apache-2.0
"""Ray: a producer actor ray.put()s a 4 KiB NumPy array and returns the
reference (inside a list, so that Ray passes the reference, not the value);
a consumer actor ray.get()s it (a read-only view of the object store's
pages), reads its first and last byte and drops it. Either actor kills
itself with SIGKILL at the drawn point (census/roles.py's plan); Ray
restarts it (max_restarts=-1) and the run goes on. A local cluster of
2 CPUs started by this process; skipped, with the reason, if it cannot
start."""

from __future__ import annotations

import os
import re
import time
from typing import Any, Dict, Optional

from census import proc
from census.roles import plan

LABEL = "Ray (ray.put in an actor, ray.get in another)"
COUNTS = (
    "objects left in Ray's object store after the run (ray memory's summary); "
    "Ray frees an object when its owner's references are gone"
)


def _actors() -> Any:
    import ray

    @ray.remote(max_restarts=-1, max_task_retries=0)
    class Producer:
        def pid(self) -> int:
            return os.getpid()

        def make(self, point: str) -> list:
            import numpy as np

            from census.roles import die

            ref = ray.put(np.ones(4096, np.uint8))
            if point == "after_put":
                die()
            return [ref]

    @ray.remote(max_restarts=-1, max_task_retries=0)
    class Consumer:
        def pid(self) -> int:
            return os.getpid()

        def take(self, refs: list, point: str) -> int:
            from census.roles import die, die_soon

            if point == "before_map":
                die()
            a = ray.get(refs[0])
            v = int(a[0]) + int(a[-1])
            if point == "while_held":
                die()
            if point == "during_release":
                die_soon()
            del a
            if point == "after_release":
                die()
            return v

    return Producer, Consumer


def _store_objects() -> Optional[int]:
    try:
        from ray._private.internal_api import memory_summary

        s = memory_summary(stats_only=True)
    except Exception:
        return None
    m = re.search(r"(\d+) objects", s)
    return int(m.group(1)) if m else None


class _Side:
    """One actor and the baseline of its current incarnation."""

    def __init__(self, actor: Any) -> None:
        self.actor, self.pid, self.base = actor, 0, (0, 0, 0)

    def rebase(self) -> None:
        """After a kill: waits (at most 120 s) for Ray's restart."""
        import ray
        from ray.exceptions import RayError

        t0 = time.monotonic()
        while True:
            try:
                self.pid = ray.get(self.actor.pid.remote())
                break
            except RayError:
                if time.monotonic() - t0 > 120:
                    raise
                time.sleep(0.1)
        p = self.pid
        self.base = (proc.fd_count(p), proc.shared_mapped_bytes(p), proc.rss_kib(p))

    def growth(self) -> Dict[str, Any]:
        p = self.pid
        return {
            "pid": p,
            "fds": proc.fd_count(p) - self.base[0],
            "memfds": proc.memfd_links(p),
            "mapped_bytes": proc.shared_mapped_bytes(p) - self.base[1],
            "rss_kib": proc.rss_kib(p) - self.base[2],
            "fd_kinds": proc.fd_kinds(p),
            "handoffs": 0,
        }


def _handoff(
    prod: _Side, cons: _Side, i: int, seed: int, rate: float, kills: Dict[str, int]
) -> bool:
    """One hand-off; False when its receive failed (the owner was killed)."""
    import ray
    from ray.exceptions import ActorUnavailableError, RayActorError, RayError

    dead = (RayActorError, ActorUnavailableError)
    side, point = plan(seed, i, rate)
    pp = {"after_make": "after_put"}.get(point, "") if side == "producer" else ""
    cp = point if side == "consumer" else ""
    try:
        refs = ray.get(prod.actor.make.remote(pp))
    except dead:
        kills["producer"] += 1
        prod.rebase()
        return False
    ok = True
    try:
        ray.get(cons.actor.take.remote(refs, cp))
    except dead:
        kills["consumer"] += 1
        cons.rebase()
    except RayError:
        ok = False
    if side == "producer" and point in ("after_send", "after_return"):
        os.kill(prod.pid, 9)  # the producer actor, killed after the consumer read
        kills["producer"] += 1
        prod.rebase()
    return ok


def run_ray(n: int, seed: int, rate: float, settle_s: float) -> Dict[str, Any]:
    try:
        import ray

        shm0 = proc.dev_shm()
        ray.init(
            num_cpus=2, include_dashboard=False, object_store_memory=200 << 20, log_to_driver=False
        )
    except Exception as e:  # no ray, or it cannot start here
        return {"tool": "ray", "label": LABEL, "skipped": f"ray could not start: {e!r}"[:300]}
    load0, t0 = os.getloadavg()[0], time.monotonic()
    try:
        Producer, Consumer = _actors()
        prod, cons = _Side(Producer.remote()), _Side(Consumer.remote())
        prod.rebase()
        cons.rebase()
        kills, failed = {"producer": 0, "consumer": 0}, 0
        for i in range(n):
            failed += not _handoff(prod, cons, i, seed, rate, kills)
        secs = time.monotonic() - t0
        t1 = time.monotonic()
        while (_store_objects() or 0) > 0 and time.monotonic() - t1 < settle_s:
            time.sleep(0.2)
        objects = _store_objects()
        res = {
            "tool": "ray",
            "label": LABEL,
            "counts": COUNTS,
            "handoffs": n,
            "seconds": round(secs, 1),
            "settle_s": round(time.monotonic() - t1, 2),
            "kills": kills,
            "other_exits": [],
            "producer": prod.growth(),
            "consumer": cons.growth(),
            "memfds_all": proc.memfds_in(proc.tree(os.getpid())),
            "dev_shm_new": sorted(proc.dev_shm() - shm0),
            "allocs": n - kills["producer"],
            "releases": n - kills["producer"] - (objects or 0),
            "store_objects": objects,
            "failed_receives": failed,
            "exports": 0,
            "returns": 0,
            "memfd_maps_producer": 0,
            "load": [round(load0, 1), round(os.getloadavg()[0], 1)],
        }
    finally:
        ray.shutdown()
    return res
