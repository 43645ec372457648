"""``slotserver cluster [--replicas N] [--replica-cpus C] [--ray-address A] [server flags]``.

Server flags are the single server's (model, slots, context, speculation, keys...): every replica
gets them. ``--host``/``--port`` are the cluster's HTTP address (Ray Serve's proxy). ``--ray-address``:
``local`` starts a Ray instance in this process (the default, one machine), ``auto`` joins the cluster
``ray start`` made, or an address. Runs until interrupted.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(prog="slotserver cluster", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    p.add_argument("--replicas", type=int, default=2, help="replicas (each loads the model; default 2)")
    p.add_argument("--min-replicas", type=int, default=None, help="autoscaling: fewest replicas")
    p.add_argument("--max-replicas", type=int, default=None, help="autoscaling: most replicas (turns it on)")
    p.add_argument("--replica-cpus", type=float, default=1.0, help="Ray CPUs reserved per replica (default 1)")
    p.add_argument("--ray-address", default="local", help="local (start Ray here), auto, or ray://HOST:PORT")
    p.add_argument("--metrics-sd-dir", default="", metavar="DIR",
                   help="replicas write Prometheus file_sd targets here (with --metrics; docs/cluster.md)")
    p.add_argument("--host", default="127.0.0.1", help="the cluster's HTTP address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="the cluster's HTTP port (default 8080)")
    own, server_argv = p.parse_known_args(argv)
    if own.replicas < 1 or (own.max_replicas is not None and own.max_replicas < (own.min_replicas or 1)):
        p.error("--replicas must be >= 1 and --max-replicas >= --min-replicas")
    return own, server_argv


def main(argv: list[str]) -> None:
    own, server_argv = parse(argv)
    import ray  # the cluster extra: pip install 'slotserver-spec[cluster]'
    from ray import serve

    from slotserver.cluster.app import build_app

    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        app = build_app(server_argv, replicas=own.replicas, cpus_per_replica=own.replica_cpus,
                        min_replicas=own.min_replicas, max_replicas=own.max_replicas,
                        metrics_sd_dir=own.metrics_sd_dir)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    ray.init(address=None if own.ray_address == "local" else own.ray_address, include_dashboard=False)
    serve.start(http_options={"host": own.host, "port": own.port})
    serve.run(app, name="slotserver", route_prefix="/")
    logging.getLogger("slotserver").info("cluster serving http://%s:%d with %s", own.host, own.port,
                                         f"{own.min_replicas or 1}-{own.max_replicas} replicas"
                                         if own.max_replicas else f"{own.replicas} replicas")
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    serve.shutdown()
    ray.shutdown()
