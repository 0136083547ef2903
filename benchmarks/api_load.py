"""The HTTP API under load, on PostgreSQL, with the daemon's tick sweep running; and the framework
comparison behind the choice of Starlette with uvicorn.

Setup (not timed): a throwaway PostgreSQL 15 server (``benchmarks/daemon.py``'s ``database``), ``--regions``
regions (str keys, fixed policy on N = 4, 2^10 slots, a rebalance threshold no window reaches), each
initialized by one tick, and one ``job:REGION`` token per region.

Comparison (``--compare-seconds`` each, before the daemon starts): ``--clients`` job clients, one per
region, each report a batch once a second, first against the API (Starlette on uvicorn, the code
``repart run --api-port`` serves), then against the same call served by the standard library's
``ThreadingHTTPServer`` (a thread per connection) doing the same work: the token checked in one
transaction, the batch recorded through ``SqlControllerClient`` in another. Reported: p50 and p99 of
the call on each, and their ratios.

Load (``--duration`` seconds): the daemon (interval ``--interval``, ``--workers`` tick threads) runs in
this process and the API in one of its own (``repart serve``), so that the ticks and the calls do not
share one interpreter's lock; one asynchronous client process (asyncio
streams, one keep-alive connection per job client) runs ``--clients`` job clients, each of which, once a
second (at its own phase), reports batch k and submits batch k's snapshot (``--items`` items, window k).
Then 50 slow connections are opened to the health server and 50 to the API (each sent half a request
and nothing more), and ``/healthz`` and an API call are timed beside them.

Report (``--json FILE`` too): ``errors`` (calls not answered 200), ``lost`` (batches or snapshots answered
200 but not in the database), ``doubled`` (a batch or a snapshot stored twice, or stored without being
sent), ``p99_ms`` of the job calls, ``sweep_on_schedule`` (every region ticked in every interval, its
worst start lag below the interval), ``healthz_s`` and ``api_call_s`` (the two calls timed beside the
slow connections), the comparison, and the load average before and after.

CPU (``cpu``): the CPU seconds each party used during the load (``/proc``): the API server process, the
client process, this process (the daemon's sweep and ticks, the health server), and PostgreSQL (its
postmaster with every backend, those that exited included); per call and in cores (CPU seconds over
the load's wall time), beside the machine's cores. Where the sum approaches the cores, the calls wait
for a CPU, whatever the server does.

Latency is open-loop: a call is timed from the moment it was due (its batch's second, at the job's
phase), not from when it was sent, so a client that falls behind its schedule counts its lateness.
``calls_per_s`` is the call rate achieved (answers over the clients' wall time ``clients_wall_s``,
from the first due moment to the last answer or the end of the schedule, whichever is later), beside
``calls_per_s_offered``, the rate asked for.

    .venv/bin/python benchmarks/api_load.py --json docs/results/api-load.json | tee docs/results/api-load.txt
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import multiprocessing
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, func, select

from daemon import START, Recorder, database
from repart.api.server import ApiServer
from repart.controller import service
from repart.controller.daemon import Daemon, DaemonConfig
from repart.controller.metrics import DaemonMetrics, MetricsServer
from repart.controller.tick import tick
from repart.protocol.snapshot import CounterEntry, Snapshot
from repart.storage import RegionConfig, make_engine, models, run_in_transaction, upgrade
from repart.storage.client import SqlControllerClient
from repart.storage.regions import region_by_name
from repart.storage.tokens import authenticate, create_token

SLOW_CLIENTS = 50
COMPARISON_BATCHES = 1_000_000
"""Batch ids of the comparison's calls start here (the load's start at 0)."""
HOST = "127.0.0.1"


# -- the client process ---------------------------------------------------------------------------------


def snapshot_document(region: str, batch: int, items: int) -> dict[str, Any]:
    """Batch ``batch``'s snapshot of ``region``: window ``batch + 1``, ``items`` keys of Zipf-like counts."""
    counts = [max(1, 1000 // (rank + 1)) for rank in range(items)]
    snapshot = Snapshot(
        region=region,
        seq=batch + 1,
        window_start=START + timedelta(seconds=batch),
        window_end=START + timedelta(seconds=batch + 1),
        tuples=sum(counts) + 100,
        distinct_estimate=items + 10,
        epsilon=0.001,
        key_type="str",
        items=tuple(CounterEntry(f"key-{rank}", count, 0) for rank, count in enumerate(counts)),
        slot_bits=10,
        batch=batch,
    )
    return snapshot.to_document()


async def _send(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str, token: str, body: bytes
) -> int:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {HOST}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    writer.write(head.encode() + body)
    await writer.drain()
    status = int((await reader.readline()).split()[1])
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    await reader.readexactly(length)
    return status


async def _job(
    port: int,
    region: str,
    token: str,
    phase: float,
    origin: float,
    seconds: float,
    items: int,
    batch_offset: int,
    snapshots: bool,
    results: list[tuple[str, str, int, float, int]],
) -> None:
    loop = asyncio.get_running_loop()
    reader, writer = await asyncio.open_connection(HOST, port)
    document = snapshot_document(region, 0, items) if snapshots else None
    k = 0
    while (due := origin + phase + k) < origin + seconds:
        await asyncio.sleep(max(0.0, due - loop.time()))
        batch = batch_offset + k
        calls = [("batch", f"/v1/regions/{region}/batches", {"batch_id": batch, "payload": {"rows": 100}})]
        if document is not None:
            document["window"]["seq"] = batch + 1
            document["window"]["start"] = (START + timedelta(seconds=batch)).isoformat()
            document["window"]["end"] = (START + timedelta(seconds=batch + 1)).isoformat()
            document["batch"] = batch
            calls.append(("snapshot", f"/v1/regions/{region}/snapshots", document))
        for kind, path, body in calls:
            try:
                status = await _send(reader, writer, path, token, json.dumps(body).encode())
            except (OSError, ValueError, IndexError, asyncio.IncompleteReadError):
                status = 0
                writer.close()
                reader, writer = await asyncio.open_connection(HOST, port)
            results.append((kind, region, batch, loop.time() - due, status))  # from the due moment
        k += 1
    writer.close()


def run_clients(
    port: int,
    tokens: dict[str, str],
    seconds: float,
    items: int,
    batch_offset: int,
    snapshots: bool,
    out: Any,
) -> None:
    """The asynchronous client process: every region's job client for ``seconds``; sends its calls
    (kind, region, batch, seconds from the call's due moment, status), the clients' wall time (the
    first due moment to the last answer) and the CPU seconds the process used to ``out``."""

    async def main() -> tuple[list[tuple[str, str, int, float, int]], float]:
        results: list[tuple[str, str, int, float, int]] = []
        loop = asyncio.get_running_loop()
        origin = loop.time() + 1.0
        regions = sorted(tokens)
        await asyncio.gather(
            *(
                _job(
                    port,
                    region,
                    tokens[region],
                    i / len(regions),
                    origin,
                    seconds,
                    items,
                    batch_offset,
                    snapshots,
                    results,
                )
                for i, region in enumerate(regions)
            )
        )
        return results, max(loop.time() - origin, seconds)  # at least the schedule itself

    started = time.process_time()
    results, wall = asyncio.run(main())
    out.put((results, wall, time.process_time() - started))


def load(
    port: int, tokens: dict[str, str], seconds: float, items: int, batch_offset: int, snapshots: bool
) -> tuple[list[Any], float, float]:
    """The calls of ``run_clients`` in a process of its own, the clients' wall time and the client
    process's CPU seconds."""
    spawn = multiprocessing.get_context("spawn")
    queue = spawn.Queue()
    process = spawn.Process(
        target=run_clients, args=(port, tokens, seconds, items, batch_offset, snapshots, queue)
    )
    process.start()
    results, wall, cpu = queue.get()
    process.join()
    return results, wall, cpu


# -- CPU --------------------------------------------------------------------------------------------------


def cpu_seconds(pid: int, children: bool = False) -> float:
    """CPU seconds process ``pid`` used (user and system, every thread), with those of its exited
    children when ``children``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    used = sum(int(value) for value in fields[11 : 15 if children else 13])
    return used / os.sysconf("SC_CLK_TCK")


def postgres_cpu_seconds(port: int) -> float:
    """CPU seconds of the PostgreSQL server listening on ``port``: its postmaster, its exited children
    and its running ones."""
    processes = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                processes[int(entry.name)] = (
                    int(stat.rsplit(")", 1)[1].split()[1]),
                    (entry / "cmdline").read_bytes().split(b"\0"),
                )
    [postmaster] = [
        pid
        for pid, (_, argv) in processes.items()
        if argv[0].endswith(b"/postgres")
        and b"-p" in argv
        and argv[argv.index(b"-p") + 1] == str(port).encode()
    ]
    total = cpu_seconds(postmaster, children=True)
    for pid, (parent, _) in processes.items():
        if parent == postmaster:
            with contextlib.suppress(OSError):
                total += cpu_seconds(pid)
    return total


# -- the alternative server ------------------------------------------------------------------------------


class StdlibBatches(ThreadingHTTPServer):
    """The batch call on the standard library's threaded server, doing the API's work (comparison)."""

    daemon_threads = True
    engine: Engine
    client: SqlControllerClient


class _StdlibHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: StdlibBatches

    def do_POST(self) -> None:
        region = self.path.split("/")[3]
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        token = self.headers.get("Authorization", "").removeprefix("Bearer ")
        granted = run_in_transaction(
            self.server.engine, lambda s: authenticate(s, token).region_id == region_by_name(s, region).id
        )
        if not granted:
            self._reply(403, {"error": "forbidden"})
            return
        report = self.server.client.report_batch(
            region, body["batch_id"], body["payload"], body.get("plan_id")
        )
        self._reply(200, {"report_id": report})

    def _reply(self, status: int, value: Any) -> None:
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


# -- measurements ----------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)] if ordered else math.nan


def timed_beside_slow_clients(
    metrics_port: int, api_url: str, token: str, region: str
) -> tuple[float, float]:
    """Seconds ``/healthz`` and an API call take while 50 slow connections are open on each server."""
    held = []
    for port in (metrics_port, int(api_url.rsplit(":", 1)[1])):
        for _ in range(SLOW_CLIENTS):
            connection = socket.create_connection((HOST, port))
            connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            held.append(connection)
    try:
        started = time.perf_counter()
        urllib.request.urlopen(f"http://{HOST}:{metrics_port}/healthz", timeout=10).read()
        health = time.perf_counter() - started
        request = urllib.request.Request(
            f"{api_url}/v1/regions/{region}/merge", headers={"Authorization": f"Bearer {token}"}
        )
        started = time.perf_counter()
        urllib.request.urlopen(request, timeout=10).read()
        return health, time.perf_counter() - started
    finally:
        for connection in held:
            connection.close()


def integrity(engine: Engine, results: list[Any]) -> tuple[int, int]:
    """(lost, doubled): calls answered 200 whose batch or snapshot is not stored; batches or snapshots
    stored more than once, or stored without being sent (the comparison's batches left out)."""
    sent = {(kind, region, batch) for kind, region, batch, _, status in results if status == 200}
    attempted = {(kind, region, batch) for kind, region, batch, _, _ in results}
    with engine.connect() as connection:
        stored = Counter(
            ("batch", region, batch)
            for region, batch in connection.execute(
                select(models.Region.name, models.BatchReport.batch)
                .join(models.BatchReport, models.BatchReport.region_id == models.Region.id)
                .where(models.BatchReport.batch < COMPARISON_BATCHES)
            )
        )
        stored.update(
            ("snapshot", region, batch)
            for region, batch in connection.execute(
                select(models.Region.name, models.Snapshot.batch)
                .join(models.Snapshot, models.Snapshot.region_id == models.Region.id)
                .where(models.Snapshot.batch.is_not(None))
            )
        )
    lost = len(sent - set(stored))
    doubled = sum(count - 1 for count in stored.values()) + len(set(stored) - attempted)
    return lost, doubled


def setup(engine: Engine, regions: list[str]) -> dict[str, str]:
    upgrade(engine)
    config = RegionConfig(
        key_type="str", n_channels_initial=4, slot_bits=10, settings={"rebalance_threshold": 50.0}
    )
    run_in_transaction(engine, lambda s: [service.create_region(s, name, config) for name in regions])
    for name in regions:
        tick(engine, name)
    return {
        name: run_in_transaction(engine, lambda s, n=name: create_token(s, f"job:{n}")[0]) for name in regions
    }


def compare(engine: Engine, tokens: dict[str, str], seconds: float) -> dict[str, Any]:
    """p50 and p99 of the batch call on each server, 200 clients at one call a second each."""
    measured: dict[str, list[float]] = {}
    errors: dict[str, int] = {}
    api_engine = make_engine(str(engine.url.render_as_string(hide_password=False)))
    api = ApiServer(api_engine, 0)
    api.serve()
    try:
        results, _, _ = load(api.port, tokens, seconds, 0, COMPARISON_BATCHES, False)
    finally:
        api.close()
        api_engine.dispose()
    measured["starlette+uvicorn"] = [r[3] for r in results if r[4] == 200]
    errors["starlette+uvicorn"] = sum(r[4] != 200 for r in results)
    stdlib = StdlibBatches((HOST, 0), _StdlibHandler)
    stdlib.engine = make_engine(str(engine.url.render_as_string(hide_password=False)))
    stdlib.client = SqlControllerClient(stdlib.engine)
    thread = threading.Thread(target=stdlib.serve_forever, daemon=True)
    thread.start()
    try:
        results, _, _ = load(int(stdlib.server_address[1]), tokens, seconds, 0, 2 * COMPARISON_BATCHES, False)
    finally:
        stdlib.shutdown()
        stdlib.server_close()
        stdlib.engine.dispose()
    measured["stdlib-threading"] = [r[3] for r in results if r[4] == 200]
    errors["stdlib-threading"] = sum(r[4] != 200 for r in results)
    report = {
        name: {
            "calls": len(values),
            "errors": errors[name],
            "p50_ms": 1000 * statistics.median(values),
            "p99_ms": 1000 * percentile(values, 0.99),
        }
        for name, values in measured.items()
    }
    report["p50_ratio_stdlib_over_starlette"] = (
        report["stdlib-threading"]["p50_ms"] / report["starlette+uvicorn"]["p50_ms"]
    )
    report["p99_ratio_stdlib_over_starlette"] = (
        report["stdlib-threading"]["p99_ms"] / report["starlette+uvicorn"]["p99_ms"]
    )
    return report


def serve_api(url: str) -> tuple[subprocess.Popen[str], str]:
    """``repart serve`` on the database at ``url``, on a free loopback port: its process and URL."""
    command = [str(Path(sys.executable).with_name("repart")), "serve", "--db", url, "--api-port", "0"]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    for line in process.stderr:
        if '"event": "api"' in line:
            return process, str(json.loads(line)["url"])
    raise RuntimeError(f"repart serve did not start (exit {process.wait()})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--regions", type=int, default=200, help="regions, one job client each")
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--interval", type=float, default=10.0, help="the daemon's tick interval")
    parser.add_argument("--workers", type=int, default=4, help="the daemon's tick threads")
    parser.add_argument("--items", type=int, default=100, help="items of each snapshot")
    parser.add_argument("--compare-seconds", type=float, default=15.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    regions = [f"region-{i:04d}" for i in range(args.regions)]
    report: dict[str, Any] = {"regions": args.regions, "duration_s": args.duration, "items": args.items}

    with (
        contextlib.ExitStack() as stack,
        tempfile.TemporaryDirectory() as directory,
        database("postgresql", Path(directory)) as url,
    ):
        engine = make_engine(url)
        tokens = setup(engine, regions)
        report["load_before"] = os.getloadavg()
        report["comparison"] = compare(engine, tokens, args.compare_seconds)

        metrics = DaemonMetrics()
        metrics_server = MetricsServer(0, metrics)
        api, api_url = serve_api(url)
        stack.callback(api.kill)  # stopped by SIGTERM below; killed if the run fails first
        recorder = Recorder()
        daemon = Daemon(
            engine,
            DaemonConfig(
                interval_seconds=args.interval, lease_ttl_seconds=3 * args.interval, workers=args.workers
            ),
            ticker=recorder,
            metrics=metrics,
        )
        metrics_server.serve(daemon.health)
        pg_port = int(str(engine.url.port))
        cpu_before = (cpu_seconds(api.pid), time.process_time(), postgres_cpu_seconds(pg_port))
        origin = time.monotonic()
        daemon.start()
        results, clients_wall, client_cpu = load(
            int(api_url.rsplit(":", 1)[1]), tokens, args.duration, args.items, 0, True
        )
        load_wall = time.monotonic() - origin
        used = {
            "api_server": cpu_seconds(api.pid) - cpu_before[0],
            "clients": client_cpu,
            "daemon_and_benchmark": time.process_time() - cpu_before[1],
            "postgresql": postgres_cpu_seconds(pg_port) - cpu_before[2],
        }
        health_s, api_s = timed_beside_slow_clients(
            metrics_server.port, api_url, tokens[regions[0]], regions[0]
        )
        ran = time.monotonic() - origin
        daemon.stop()
        api.send_signal(signal.SIGTERM)
        api.communicate(timeout=60)
        metrics_server.close()
        report["load_after"] = os.getloadavg()
        lost, doubled = integrity(engine, results)
        with engine.connect() as connection:
            report["batch_reports_stored"] = connection.scalar(
                select(func.count()).select_from(models.BatchReport)
            )
        engine.dispose()

    latencies = [r[3] for r in results if r[4] == 200]
    starts: dict[str, list[float]] = {}
    for region, started, _, _ in sorted(recorder.spans, key=lambda span: span[1]):
        starts.setdefault(region, []).append(started)
    lags = [
        started - origin - k * args.interval - daemon.phase(region)
        for region, region_starts in starts.items()
        for k, started in enumerate(region_starts)
    ]
    due = {region: math.floor((ran - 1.0 - daemon.phase(region)) / args.interval) + 1 for region in regions}
    short = sum(len(starts.get(region, [])) < due[region] for region in regions)
    report.update(
        {
            "calls": len(results),
            "clients_wall_s": clients_wall,
            "calls_per_s": len(results) / clients_wall,
            "calls_per_s_offered": 2 * len(regions),
            "errors": sum(r[4] != 200 for r in results),
            "lost": lost,
            "doubled": doubled,
            "p50_ms": 1000 * statistics.median(latencies),
            "p99_ms": 1000 * percentile(latencies, 0.99),
            "p99_ms_batch": 1000
            * percentile([r[3] for r in results if r[0] == "batch" and r[4] == 200], 0.99),
            "p99_ms_snapshot": 1000
            * percentile([r[3] for r in results if r[0] == "snapshot" and r[4] == 200], 0.99),
            "ticks": len(recorder.spans),
            "tick_failures": dict(recorder.failures),
            "regions_short_of_ticks": short,
            "worst_tick_lag_s": max(lags) if lags else math.nan,
            "sweep_on_schedule": short == 0 and bool(lags) and max(lags) < args.interval,
            "healthz_s": health_s,
            "api_call_s": api_s,
            "cpu": {
                "wall_s": load_wall,
                "machine_cores": os.cpu_count(),
                "seconds": used,
                "ms_per_call": {name: 1000 * value / len(results) for name, value in used.items()},
                "cores": {name: value / load_wall for name, value in used.items()},
                "cores_total": sum(used.values()) / load_wall,
            },
        }
    )
    text = json.dumps(report, indent=1)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
