"""The metrics endpoint under the daemon benchmark's load (the target: ``/metrics`` answers within 50 ms
with 200 regions under ``benchmarks/daemon.py``).

The load is ``benchmarks/daemon.py``'s, built with its own functions: a fresh database with ``--regions``
regions and two preloaded rounds of windows, a daemon ticking every region every ``--interval`` seconds
on ``--workers`` threads, and the feeder process ingesting a new window per region every ``--feed-every``
intervals. Here the daemon also serves its metrics (``DaemonMetrics`` and ``MetricsServer`` on a free
port, as ``repart run --metrics-port 0`` does), and a scraper process (Prometheus is a process of its
own, so the client does not share the daemon's interpreter) sends ``GET /metrics`` every
``--scrape-every`` seconds from the start to the end of the run, then ``GET /healthz``, timing each
answer from the request to its last byte.

Report: the latency of ``/metrics`` (median, p90, p99, max over all scrapes; the target is on the max),
the size and sample count of one answer, the ``/healthz`` answers, and the daemon's ticks by action,
overruns, coalesced sweeps and the regions' last tick durations as scraped at the end (the load the
endpoint answered under), with the machine's load average.

    .venv/bin/python benchmarks/metrics_endpoint.py [--regions 200] [--interval 10] [--duration 60]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from daemon import PRELOADED, STREAMS, Feeder, database, feed_windows, setup, stream_template
from repart.controller.daemon import Daemon, DaemonConfig
from repart.controller.defaults import DEFAULT_WORKERS
from repart.controller.metrics import DaemonMetrics, MetricsServer
from repart.storage import make_engine

TARGET_SECONDS = 0.050


def fetch(url: str) -> tuple[int, bytes, float]:
    """Status, body and seconds from the request to the body's last byte."""
    began = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, body = error.code, error.read()
    return status, body, time.perf_counter() - began


def scrape(port: int, every: float, stop: Any, out: Any) -> None:
    """The scraper's process: ``GET /metrics`` then ``GET /healthz`` every ``every`` seconds until
    ``stop``; sends back the timings, the health statuses and the last ``/metrics`` body."""
    base = f"http://127.0.0.1:{port}"
    seconds: list[float] = []
    health: list[int] = []
    body = b""
    while not stop.wait(every):
        status, body, took = fetch(f"{base}/metrics")
        assert status == 200, status
        seconds.append(took)
        health.append(fetch(f"{base}/healthz")[0])
    out.put((seconds, health, body))


def samples(body: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--regions", type=int, default=200)
    parser.add_argument("--interval", type=float, default=10.0)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--feed-every", type=int, default=1, help="intervals between two windows of a region")
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS, help="the daemon's tick threads")
    parser.add_argument("--scrape-every", type=float, default=0.5, help="seconds between two scrapes")
    parser.add_argument("--db-dir", type=Path, default=None)
    args = parser.parse_args()
    regions = [f"region-{i:04d}" for i in range(args.regions)]
    templates = [stream_template(seed) for seed in range(STREAMS)]

    with (
        tempfile.TemporaryDirectory(dir=args.db_dir) as directory,
        database("sqlite", Path(directory)) as url,
    ):
        engine = make_engine(url)
        setup(engine, regions, Feeder(engine, regions, templates, args.feed_every), False)
        config = DaemonConfig(
            interval_seconds=args.interval,
            lease_ttl_seconds=3 * args.interval,
            workers=args.workers,
        )
        metrics = DaemonMetrics()
        server = MetricsServer(0, metrics)
        daemon = Daemon(engine, config, metrics=metrics)
        server.serve(daemon.health)
        spawn = multiprocessing.get_context("spawn")
        stop_feed, fed = spawn.Event(), spawn.Queue()
        stop_scrape, scraped = spawn.Event(), spawn.Queue()
        load_before = os.getloadavg()
        origin = time.monotonic()
        daemon.start()
        feeder = spawn.Process(
            target=feed_windows,
            args=(url, regions, args.feed_every, PRELOADED + 1, origin, args.interval, stop_feed, fed),
        )
        scraper = spawn.Process(target=scrape, args=(server.port, args.scrape_every, stop_scrape, scraped))
        feeder.start()
        scraper.start()
        time.sleep(max(0.0, origin + args.duration - time.monotonic()))
        stop_scrape.set()
        seconds, health, body = scraped.get()
        scraper.join()
        stop_feed.set()
        daemon.stop()
        fed.get()
        feeder.join()
        server.close()
        load_after = os.getloadavg()
        engine.dispose()

    final = samples(body)
    series = sum(1 for name, _ in final if name.startswith("repart_region_"))
    ticks = {key[1][0][1]: int(v) for key, v in final.items() if key[0] == "repart_ticks_total" and v}
    overruns = sum(v for (name, _), v in final.items() if name == "repart_overruns_total")
    last_ticks = [v for (name, _), v in final.items() if name == "repart_region_tick_duration_seconds"]
    ms = np.array(seconds) * 1000
    print(
        f"sqlite: {args.regions} regions, interval {args.interval:g} s, a new window per region every "
        f"{args.feed_every} interval(s), {args.workers} tick threads, duration {args.duration:g} s; "
        f"ticks at the last scrape: {ticks}, overruns {overruns:g}, sweeps coalesced "
        f"{final[('repart_sweeps_coalesced_total', ())]:g}; each region's last tick took "
        f"{np.mean(last_ticks):.3f} s on average, {max(last_ticks):.3f} s at most"
    )
    loads = " ".join(f"{load:.2f}" for load in load_before), " ".join(f"{load:.2f}" for load in load_after)
    print(f"load average (1/5/15 min) before {loads[0]}, after {loads[1]} ({os.cpu_count()} cores)")
    print(
        f"/metrics: {len(ms)} scrapes every {args.scrape_every:g} s, {len(body):,} bytes and {len(final)} "
        f"samples ({series} per-region) in the last; latency ms: median {np.median(ms):.1f}, "
        f"p90 {np.percentile(ms, 90):.1f}, p99 {np.percentile(ms, 99):.1f}, max {ms.max():.1f}"
    )
    print(f"/healthz: {dict(Counter(health))} (status: answers)")
    verdict = "PASS" if ms.max() <= TARGET_SECONDS * 1000 else "FAIL"
    print(f"{verdict}  every /metrics answer within {TARGET_SECONDS * 1000:g} ms (max {ms.max():.1f} ms)")


if __name__ == "__main__":
    main()
