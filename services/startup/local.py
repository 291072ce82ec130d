"""A whole deployment in one process, without Ray: per shard a commitlog, a
consume-queue builder, an index builder and a dispatcher, and a front, each host on
its own event-loop thread and every hop over gRPC on loopback (tests, embedding)."""

from __future__ import annotations

from pathlib import Path

from mqstore.services.commitlog.host import CommitLogHost
from mqstore.services.common.internal_auth import InternalAuth
from mqstore.services.common.peers import ShardResolvers, fixed
from mqstore.services.common.server import TlsFiles
from mqstore.services.dispatcher.host import DispatcherHost
from mqstore.services.index.host import BuilderHost
from mqstore.services.query.host import FrontHost
from mqstore.services.query.routing import STORE_PORT_BASE, shard_dir
from mqstore.services.startup.front_ports import PortReservations, front_ports
from mqstore.store.config import StoreConfig
from mqstore.store.retention import RetentionConfig


def shard_config(config: StoreConfig, shard: int, shards: int) -> StoreConfig:
    """Shard ``shard``'s config: with several shards each records its own store host
    port (10911 + shard), so an offset msgId names the shard that holds it."""
    if shards == 1:
        return config
    from dataclasses import replace

    return replace(config, store_host=config.store_host._replace(port=STORE_PORT_BASE + shard))


class LocalStack:
    """A whole deployment in this process (no Ray): per shard a commitlog, a
    consume-queue builder, an index builder and a dispatcher, and a front; every hop
    over gRPC on loopback. ``front_endpoint`` is the public API."""

    def __init__(
        self,
        root: str | Path,
        config: StoreConfig | None = None,
        *,
        shards: int = 1,
        host: str = "127.0.0.1",
        front_port: int = 0,
        retention: RetentionConfig | None = None,
        metrics_port: int = 0,
        tls: TlsFiles | None = None,
        acl: str | Path | None = None,
        auth: InternalAuth | None = None,
        rocketmq_port: int | None = None,
        max_delivery_attempts: int | None = None,
        fronts: int = 1,
    ) -> None:
        """``host``: the front's address (internal servers listen on 127.0.0.1).
        ``auth``: the deployment's secret (default: a fresh one, with internal TLS
        when the front speaks TLS): ``self.auth``. ``acl``, ``rocketmq_port`` (the
        RocketMQ 5 protocol: ``self.rocketmq_endpoint``), ``max_delivery_attempts``:
        see ``FrontHost``. ``fronts``: N fronts sharing the public ports (SO_REUSEPORT;
        a port given as 0 is picked once for all), ``self.fronts`` (``self.front`` is
        front 0); each front's own metrics port is ``metrics_port`` + k."""
        cfg = config or StoreConfig()
        root = Path(root)
        self.auth = auth = auth or InternalAuth.new(tls=tls is not None)
        inner = "127.0.0.1"
        self.shards: list[CommitLogHost] = []
        self.queue_builders: list[BuilderHost] = []
        self.index_builders: list[BuilderHost] = []
        self.dispatchers: list[DispatcherHost] = []
        resolvers: list[ShardResolvers] = []
        for i in range(shards):
            d, c = shard_dir(root, i, shards), shard_config(cfg, i, shards)
            d.mkdir(parents=True, exist_ok=True)
            shard = CommitLogHost(d, c, shard=i, host=inner, retention=retention, auth=auth)
            cq = BuilderHost(
                "consumequeue", d, c, resolve_commitlog=fixed(shard.endpoint), shard=i, host=inner, auth=auth
            )
            r: ShardResolvers = {"cl": fixed(shard.endpoint), "cq": fixed(cq.endpoint)}
            self.shards.append(shard)
            self.queue_builders.append(cq)
            if cfg.message_index_enable:
                ix = BuilderHost("index", d, c, resolve_commitlog=fixed(shard.endpoint), shard=i, host=inner, auth=auth)
                self.index_builders.append(ix)
                r["ix"] = fixed(ix.endpoint)
            resolvers.append(r)
            self.dispatchers.append(DispatcherHost(r, shard=i, config=cfg, host=inner, auth=auth, store_dir=d))
        reserved = PortReservations(host)
        try:
            ports = front_ports(fronts, front_port, rocketmq_port, metrics_port, pick=reserved.pick)
            self.fronts = [
                FrontHost(
                    [(r, fixed(d.endpoint)) for r, d in zip(resolvers, self.dispatchers)],
                    host=host,
                    port=p.port,
                    default_queue_nums=cfg.default_queue_nums,
                    metrics_port=p.metrics_port,
                    tls=tls,
                    acl=acl,
                    auth=auth,
                    rocketmq_port=p.rocketmq_port,
                    max_body=cfg.max_message_bytes,
                    index=k,
                    reuse_port=fronts > 1,
                    **({} if max_delivery_attempts is None else {"max_delivery_attempts": max_delivery_attempts}),
                )
                for k, p in enumerate(ports)
            ]
        finally:
            reserved.close()
        self.front = self.fronts[0]
        self.front_endpoint = self.front.endpoint
        self.rocketmq_endpoint = self.front.rocketmq_endpoint

    def wait_ready(self, timeout: float = 60.0) -> bool:
        """True once every commitlog serves, every builder is open and the front's
        health says SERVING."""
        hosts = self.shards + self.queue_builders + self.index_builders
        return all(h.wait_ready(timeout) for h in hosts) and all(f.wait_serving(timeout) for f in self.fronts)

    def close(self) -> None:
        """Front first (no new work), then dispatchers (after dispatching what is
        confirmed), then builders, then commitlogs (each closes cleanly)."""
        for front in self.fronts:
            front.close()
        for group in (self.dispatchers, self.queue_builders + self.index_builders, self.shards):
            for h in group:
                h.close()

    def __enter__(self) -> LocalStack:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["LocalStack", "shard_config"]
