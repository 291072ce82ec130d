"""Metrics: counters and latency histograms each shard keeps (served by
``CommitLogService.GetStats``), and the front's Prometheus registry, exported by
prometheus_client's HTTP server (``mqstore serve --metrics-port``, 9464 by default).

The front measures its own requests; the shards' figures are fetched on every
scrape (one GetStats per shard and one Status per dispatcher, in parallel), so a
scrape shows every shard without a metrics port per actor. Names (all ``mqstore_``):

    front_request_seconds{method}              histogram  every FrontService call (SendBatch: append
                                                          latency end to end; Pull, QueryBy*: query latency)
    front_requests_total{method,code}          counter    calls by status code
    front_sent_messages_total                  counter    messages acknowledged (PUT_OK) through the front
    shard_up{shard}                            gauge      1 serving, 0 recovering, failed or not answering
    shard_append_seconds{shard}                histogram  AppendBatch in the shard (sync flush: until its fsync)
    shard_flush_seconds{shard}                 histogram  each commitlog fsync (group commit or periodic)
    shard_appended_messages_total{shard}       counter    (rate() = append rate)
    shard_appended_bytes_total{shard}          counter
    shard_append_failures_total{shard}         counter
    shard_dispatch_lag_bytes{shard}            gauge      confirm - dispatched: bytes consumers can not see yet
    shard_commitlog_bytes{shard}               gauge      store size: commitlog bytes kept (wrote - min)
    shard_disk_free_bytes{shard}               gauge      free bytes of the store's file system
    shard_queues{shard}                        gauge      consume queues
    shard_wrote_offset / _flushed_offset / _dispatched_offset{shard}   gauges
    shard_writable{shard}                      gauge      0 while appends are refused
    shard_recovery_percent{shard,phase}        gauge      progress of the store's open
    shard_delay_delivered_total{shard}         counter    delayed messages delivered to their real topics
    shard_delay_skipped_total{shard}           counter    delay-topic records skipped (logged delay_record_skipped)
    shard_background_failures_total{shard}     counter    failed passes of the delay scheduler and retention (retried)
    shard_loop_stopped{shard,loop}             gauge      1 per background loop that stopped (health NOT_SERVING)
    rocketmq_set_aside_total{reason}           counter    records no RocketMQ 5 consumer could take, sent to
                                                          %DLQ%<group> alone (born_time, store_time,
                                                          delivery_time: consumer_rules; conversion: the front's guard)
    shard_writes_refused_total{shard}          counter    appends refused (a full disk, a failed flush)
    shard_refusing_writes{shard,cause}         gauge      1 while appends are refused, by cause
    shard_forced_deleted_segments_total{shard} counter    segments deleted unexpired (--clean-forcibly)
    shard_forced_deleted_bytes_total{shard}    counter    their bytes
    consumer_lost_messages_total{shard,group,topic}  counter  unread messages retention deleted (per queue: status)

Shard counters start at 0 when its process starts (a restart is a counter reset,
which Prometheus' rate() handles).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterable, Sequence

from mqstore.rpc.v1 import commitlog_pb2

LATENCY_BOUNDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
DEFAULT_METRICS_PORT = 9464  # outside Ray's worker ports (10002-19999)


class LatencyHistogram:
    """Fixed buckets of durations in seconds; ``observe`` from any thread."""

    def __init__(self, bounds: Sequence[float] = LATENCY_BOUNDS) -> None:
        self.bounds = tuple(bounds)
        self._counts = [0] * (len(self.bounds) + 1)
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, seconds: float) -> None:
        i = bisect.bisect_left(self.bounds, seconds)
        with self._lock:
            self._counts[i] += 1
            self._sum += seconds

    @property
    def count(self) -> int:
        return sum(self._counts)

    def to_pb(self) -> commitlog_pb2.Histogram:
        with self._lock:
            return commitlog_pb2.Histogram(bounds=self.bounds, counts=list(self._counts), sum=self._sum)


class ShardStats:
    """What one shard counts (its servicer and its flusher write, GetStats reads)."""

    def __init__(self) -> None:
        self.append_seconds = LatencyHistogram()
        self.flush_seconds = LatencyHistogram()
        self.appended_messages = 0
        self.appended_bytes = 0
        self.append_failures = 0
        self._lock = threading.Lock()

    def appended(self, messages: int, nbytes: int, seconds: float) -> None:
        self.append_seconds.observe(seconds)
        with self._lock:
            self.appended_messages += messages
            self.appended_bytes += nbytes

    def failed(self, seconds: float) -> None:
        self.append_seconds.observe(seconds)
        with self._lock:
            self.append_failures += 1


def _histogram_family(
    name: str, doc: str, label_names: list[str], rows: Iterable[tuple[list[str], commitlog_pb2.Histogram]]
):
    from prometheus_client.core import HistogramMetricFamily

    fam = HistogramMetricFamily(name, doc, labels=label_names)
    for labels, h in rows:
        cumulative, buckets = 0, []
        for bound, c in zip([*h.bounds, float("inf")], h.counts):
            cumulative += c
            buckets.append(("+Inf" if bound == float("inf") else repr(float(bound)), cumulative))
        fam.add_metric(labels, buckets, h.sum)
    return fam


class FrontMetrics:
    """The front's Prometheus registry: its request metrics, plus the shards' figures
    from ``fetch_shards()`` (a list of (shard index, GetStatsResponse or None when
    the shard did not answer)) on every scrape, and the groups' losses from
    ``fetch_losses()`` (a list of (shard index, [ConsumerLoss])) when given."""

    def __init__(self, fetch_shards: Callable[[], list], fetch_losses: Callable[[], list] | None = None) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        self.request_seconds = Histogram(
            "mqstore_front_request_seconds",
            "FrontService calls, seconds",
            ["method"],
            buckets=LATENCY_BOUNDS,
            registry=self.registry,
        )
        self.requests = Counter(
            "mqstore_front_requests", "FrontService calls by status code", ["method", "code"], registry=self.registry
        )
        self.sent_messages = Counter(
            "mqstore_front_sent_messages", "Messages acknowledged (PUT_OK) through the front", registry=self.registry
        )
        self.rocketmq_requests = Counter(
            "mqstore_rocketmq_requests",
            "RocketMQ-protocol calls (apache.rocketmq.v2) by protocol status code",
            ["method", "code"],
            registry=self.registry,
        )
        self.rocketmq_set_aside = Counter(
            "mqstore_rocketmq_set_aside",
            "Records no RocketMQ 5 consumer could take, dead-lettered alone with their reason",
            ["reason"],
            registry=self.registry,
        )
        self._fetch = fetch_shards
        self._fetch_losses = fetch_losses
        self.registry.register(_ShardCollector(self))
        self._server = None

    def observe(self, method: str, seconds: float, code: str) -> None:
        self.request_seconds.labels(method).observe(seconds)
        self.requests.labels(method, code).inc()

    def observe_rocketmq(self, method: str, code: str) -> None:
        self.rocketmq_requests.labels(method, code).inc()

    def set_aside(self, reason: str) -> None:
        self.rocketmq_set_aside.labels(reason).inc()

    def serve(self, host: str, port: int) -> int:
        """Start the HTTP endpoint (``/metrics``) on ``host:port``; returns the port."""
        from prometheus_client import start_http_server

        self._server, _ = start_http_server(port, addr=host, registry=self.registry)
        return self._server.server_address[1]

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class _ShardCollector:
    def __init__(self, metrics: FrontMetrics) -> None:
        self._metrics = metrics

    def describe(self):
        return []  # collected on demand: nothing to check at registration

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        try:
            shards = self._metrics._fetch()
        except Exception:  # noqa: BLE001 - a scrape must answer; shard_up says what is missing
            shards = []
        up = GaugeMetricFamily("mqstore_shard_up", "1 if the shard serves, 0 otherwise", labels=["shard"])
        recovery = GaugeMetricFamily(
            "mqstore_shard_recovery_percent", "Progress of the store's open", labels=["shard", "phase"]
        )
        gauges = {
            "wrote_offset": "Commitlog write position",
            "flushed_offset": "Commitlog flushed position",
            "dispatched_offset": "Everything below is in the consume queues and index",
            "dispatch_lag_bytes": "Bytes written and confirmed but not dispatched yet (confirm - dispatched)",
            "commitlog_bytes": "Commitlog bytes stored (wrote - min offset)",
            "disk_free_bytes": "Free bytes of the store's file system",
            "queues": "Consume queues",
            "writable": "1 if appends are accepted",
        }
        g = {k: GaugeMetricFamily(f"mqstore_shard_{k}", doc, labels=["shard"]) for k, doc in gauges.items()}
        counters = {
            "appended_messages": "Messages appended since the shard's process started",
            "appended_bytes": "Record bytes appended since the shard's process started",
            "append_failures": "Append calls that failed since the shard's process started",
            "delay_delivered": "Delayed messages delivered to their real topics since the shard's process started",
            "delay_skipped": "Delay-topic records the scheduler could not deliver and skipped (logged)",
            "background_failures": "Failed passes of the delay scheduler and retention (each retried)",
            "forced_deleted_segments": "Commitlog segments deleted before they expired (--clean-forcibly)",
            "forced_deleted_bytes": "Commitlog bytes deleted before they expired (--clean-forcibly)",
        }
        c = {k: CounterMetricFamily(f"mqstore_shard_{k}", doc, labels=["shard"]) for k, doc in counters.items()}
        stopped = GaugeMetricFamily(
            "mqstore_shard_loop_stopped", "1 per background loop that stopped", labels=["shard", "loop"]
        )
        refused = CounterMetricFamily(
            "mqstore_shard_writes_refused", "Appends refused (a full disk, a failed flush)", labels=["shard"]
        )
        refusing = GaugeMetricFamily(
            "mqstore_shard_refusing_writes", "1 while appends are refused, by cause", labels=["shard", "cause"]
        )
        append_rows, flush_rows = [], []
        for index, st in shards:
            label = [str(index)]
            serving = st is not None and st.state == "SERVING"
            up.add_metric(label, 1.0 if serving else 0.0)
            if st is None:
                continue
            recovery.add_metric([*label, st.recovery_phase or "ready"], st.recovery_percent)
            if not serving:
                continue
            values = {
                "wrote_offset": st.wrote_offset,
                "flushed_offset": st.flushed_offset,
                "dispatched_offset": st.dispatched_offset,
                "dispatch_lag_bytes": max(0, st.confirm_offset - st.dispatched_offset),
                "commitlog_bytes": st.commitlog_bytes,
                "disk_free_bytes": st.disk_free_bytes,
                "queues": st.queue_count,
                "writable": 1 if st.writable else 0,
            }
            for k, v in values.items():
                g[k].add_metric(label, float(v))
            for k in counters:
                c[k].add_metric(label, float(getattr(st, k)))
            for entry in st.stopped_loops:
                stopped.add_metric([*label, entry.split(":", 1)[0]], 1.0)
            refused.add_metric(label, float(st.write_refusals.count))
            if st.write_refusals.cause:
                refusing.add_metric([*label, st.write_refusals.cause], 1.0)
            append_rows.append((label, st.append_seconds))
            flush_rows.append((label, st.flush_seconds))
        yield up
        yield recovery
        yield from g.values()
        yield from c.values()
        yield stopped
        yield refused
        yield refusing
        yield from self._losses()
        yield _histogram_family(
            "mqstore_shard_append_seconds", "AppendBatch in the shard, seconds", ["shard"], append_rows
        )
        yield _histogram_family("mqstore_shard_flush_seconds", "Commitlog fsyncs, seconds", ["shard"], flush_rows)

    def _losses(self):
        from prometheus_client.core import CounterMetricFamily

        fetch = self._metrics._fetch_losses
        if fetch is None:
            return
        try:
            shards = fetch()
        except Exception:  # noqa: BLE001 - a scrape must answer
            shards = []
        lost = CounterMetricFamily(
            "mqstore_consumer_lost_messages",
            "Unread messages retention deleted, per consumer group (mqstore status: per queue)",
            labels=["shard", "group", "topic"],
        )
        totals: dict[tuple[str, str, str], int] = {}
        for index, losses in shards:
            for x in losses:
                key = (str(index), x.group, x.topic)
                totals[key] = totals.get(key, 0) + x.messages
        for key, n in sorted(totals.items()):
            lost.add_metric(list(key), float(n))
        yield lost


__all__ = ["DEFAULT_METRICS_PORT", "LATENCY_BOUNDS", "FrontMetrics", "LatencyHistogram", "ShardStats"]
