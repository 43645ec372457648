"""Ray Serve's ``RequestRouter`` for slotserver replicas: ``affinity.choose`` over live replicas.

The ingress (``ingress.py``) passes the routing key as the first argument of ``SlotReplica.forward``;
each replica reports its slots every ``ROUTING_STATS_S`` (``record_routing_stats``). The chosen
replica comes first; the others follow in the key's rendezvous order, so if the chosen one refuses
(Ray Serve's own back-pressure, ``max_ongoing_requests``) the request goes to the next owner rather
than anywhere.
"""

from __future__ import annotations

from typing import List, Optional

from ray.serve._private.request_router.common import PendingRequest
from ray.serve._private.request_router.replica_wrapper import RunningReplica
from ray.serve.request_router import RequestRouter

from slotserver.cluster.affinity import ReplicaLoad, choose, rendezvous

ROUTING_STATS_S = 0.5  # how often each replica reports its slots to the routers


class AffinityRouter(RequestRouter):
    async def choose_replicas(self, candidate_replicas: List[RunningReplica],
                              pending_request: Optional[PendingRequest] = None) -> List[List[RunningReplica]]:
        if not candidate_replicas:
            return []
        key = pending_request.args[0] if pending_request is not None and pending_request.args else None
        if not isinstance(key, str):  # not a forward (a health probe, a broadcast): any replica
            return [candidate_replicas]
        by_id = {r.replica_id.unique_id: r for r in candidate_replicas}
        loads = [ReplicaLoad(rid, int(r.routing_stats.get("n_slots", 0)), int(r.routing_stats.get("n_idle", 0)))
                 for rid, r in by_id.items()]
        choice = choose(key, loads)
        rest = [rid for rid in rendezvous(key, list(by_id)) if rid != choice.replica]
        return [[by_id[choice.replica]], *([by_id[rid]] for rid in rest)]
