"""The ``slotserver`` command: serve (flags parsed by ``flags/command_line.py``), ``calibrate``, and
``cluster`` (replicas on Ray Serve, ``cluster/``)."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from aiohttp import web
from aiohttp.web_runner import GracefulExit

from slotserver.api.app import create_app
from slotserver.api.shutdown import HARD_EXIT_GRACE_S, drain, exit_now, start_exit_timer
from slotserver.api.state import STATE
from slotserver.cluster.command import main as cluster_main
from slotserver.engine import kv_layout
from slotserver.engine.calibrate import load_or_measure, profile_dir
from slotserver.engine.engine import Engine
from slotserver.flags.command_line import config_from_args, listen_hosts, parse_args, startup_warnings
from slotserver.flags.common import apply_repack
from slotserver.speculation.persistence import StartupFileError


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["calibrate"]:
        return calibrate_main(argv[1:])
    if argv[:1] == ["cluster"]:
        return cluster_main(argv[1:])
    args = parse_args(argv)
    level = "DEBUG" if args.verbose else args.log_level.upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = config_from_args(args)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    for line in startup_warnings(args):
        logging.getLogger("slotserver").warning(line)
    apply_repack(args)
    failures: list[str] = []

    def on_fatal(reason: str) -> None:
        """The engine cannot run: close the server at once, then exit 1."""
        failures.append(reason)
        asyncio.get_running_loop().call_soon(_exit_run_app)

    app = create_app(config, on_fatal=on_fatal)
    app.on_startup.append(_handle_signals)
    try:
        # Our signal handlers drain first (shutdown.drain); aiohttp then needs only a short grace.
        hosts = listen_hosts(config.host)
        web.run_app(app, host=hosts if len(hosts) > 1 else hosts[0], port=config.port, handler_cancellation=True, handle_signals=False,
                    shutdown_timeout=1.0, print=lambda msg: logging.getLogger("slotserver").info(msg))
    except StartupFileError as exc:
        raise SystemExit(f"error: {exc}") from None
    if app[STATE].engine_stuck:  # the engine thread is stuck in a C call: Python's exit would wait for it
        exit_now(app[STATE].engine_stuck)
    if failures:
        raise SystemExit(f"error: {failures[0]}")


def calibrate_main(argv: list[str]) -> None:
    """``slotserver calibrate [server flags]``: measure the verify-cost profile of the model and
    settings those flags give, cache it where the server will read it, and print it."""
    args = parse_args(argv)
    apply_repack(args)
    logging.basicConfig(level="INFO", format="%(message)s")
    try:
        config = config_from_args(args)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    # the layout a speculating server of these flags would take (timed with -np > 1 and without -kvu)
    engine = Engine(kv_layout.resolve(config.engine, True, profile_dir(config.spec), force=True))
    try:
        profile, _ = load_or_measure(engine, profile_dir(config.spec), force=True)
    finally:
        engine.close()
    print(f"verify-cost profile of {engine.description}, {engine.n_threads} threads, depth {profile.depth}, "
          f"{engine.config.n_parallel} slots, KV layout {engine.config.layout}:")
    print(f"{'rows':>5} {'ms':>9} {'ms/row':>8} {'tokens/s if all accepted':>25}")
    for n, t in zip(profile.rows, profile.t_rows_s):
        print(f"{n:>5} {t * 1e3:>9.2f} {t * 1e3 / n:>8.2f} {n / t:>25.1f}")
    print(f"each further sequence {profile.t_seq_s * 1e3:.2f} ms, each prompt row {profile.t_input_row_s * 1e3:.3f} ms, "
          f"each output row +{profile.t_depth_row_s * 1e6:.3f} ms per 1000 cached tokens")


def _exit_run_app() -> None:
    """Raised from a loop callback, GracefulExit ends ``run_app``'s loop and runs its cleanup."""
    raise GracefulExit()


async def _handle_signals(app: web.Application) -> None:
    """SIGTERM/SIGINT: drain (503 for new requests, save, let in-flight ones finish), then exit 0.
    A second signal during the drain exits at once. Whatever hangs (an engine step stuck in a C
    call), the process ends --shutdown-timeout + HARD_EXIT_GRACE_S seconds after the first signal,
    with status 3 (``api/shutdown.py``)."""
    loop = asyncio.get_running_loop()
    draining: list[asyncio.Task] = []
    grace = app[STATE].config.limits.shutdown_timeout_s + HARD_EXIT_GRACE_S

    def on_signal() -> None:
        if draining:
            _exit_run_app()
        start_exit_timer(grace)
        task = asyncio.ensure_future(drain(app))
        task.add_done_callback(lambda _: loop.call_soon(_exit_run_app))
        draining.append(task)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
