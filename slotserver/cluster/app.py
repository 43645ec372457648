"""The Ray Serve application: N ``SlotReplica`` deployments behind one ``ClusterIngress``.

``build_app(argv, replicas=...)`` is what ``slotserver cluster`` runs; ``app_builder`` is what a Serve
config file names (``import_path: slotserver.cluster.app:app_builder``, ``deploy/ray-serve.yaml``).
"""

from __future__ import annotations

import shlex

from ray import serve
from ray.serve.config import RequestRouterConfig

from slotserver.cluster.ingress import ClusterIngress
from slotserver.cluster.replica import SlotReplica
from slotserver.cluster.router import ROUTING_STATS_S, AffinityRouter
from slotserver.flags.command_line import build_parser, config_from_args


def build_app(argv: list[str], *, replicas: int = 2, cpus_per_replica: float = 1.0,
              min_replicas: int | None = None, max_replicas: int | None = None,
              metrics_sd_dir: str = "") -> serve.Application:
    """``argv``: the single server's flags (its own host and port are ignored: replicas listen on
    loopback, the cluster on Serve's HTTP port). Autoscaling when ``max_replicas`` is given: between
    ``min_replicas`` and ``max_replicas``, aiming at one ongoing request per slot. ``metrics_sd_dir``:
    where replicas write their Prometheus discovery files (``discovery.py``; needs ``--metrics``)."""
    config = config_from_args(build_parser().parse_args(argv))  # flags checked once, here, before Ray
    if metrics_sd_dir and not config.metrics:
        raise ValueError("--metrics-sd-dir lists the replicas' /metrics: start them with --metrics")
    n_slots = config.engine.n_parallel if config.engine.n_parallel > 0 else 4
    options: dict = {"ray_actor_options": {"num_cpus": cpus_per_replica},
                     "request_router_config": RequestRouterConfig(request_router_class=AffinityRouter,
                                                                  request_routing_stats_period_s=ROUTING_STATS_S),
                     "health_check_period_s": 2.0, "health_check_timeout_s": 30.0,
                     "max_ongoing_requests": 4 * n_slots}
    if max_replicas is not None:
        options["autoscaling_config"] = {"min_replicas": min_replicas or 1, "max_replicas": max_replicas,
                                         "target_ongoing_requests": n_slots}
    else:
        options["num_replicas"] = replicas
    replica = serve.deployment(SlotReplica, name="SlotReplica").options(**options)
    ingress = serve.deployment(ClusterIngress, name="ClusterIngress").options(
        max_ongoing_requests=1000, ray_actor_options={"num_cpus": 0})
    max_body = config.limits.body_bytes(config.engine.n_ctx or 131072)
    return ingress.bind(replica.bind(list(argv), metrics_sd_dir), max_body)


def app_builder(args: dict) -> serve.Application:
    """For ``serve run``/``serve deploy``: the config file's ``args`` (``server_args``: the single
    server's flags as one string; ``replicas``, ``replica_cpus``, ``min_replicas``, ``max_replicas``)."""
    unknown = set(args) - {"server_args", "replicas", "replica_cpus", "min_replicas", "max_replicas", "metrics_sd_dir"}
    if unknown:
        raise ValueError(f"unknown slotserver cluster args: {', '.join(sorted(unknown))}")
    maybe = lambda name: int(args[name]) if args.get(name) is not None else None  # noqa: E731
    return build_app(shlex.split(str(args.get("server_args", ""))), replicas=int(args.get("replicas", 2)),
                     cpus_per_replica=float(args.get("replica_cpus", 1.0)),
                     min_replicas=maybe("min_replicas"), max_replicas=maybe("max_replicas"),
                     metrics_sd_dir=str(args.get("metrics_sd_dir", "")))
