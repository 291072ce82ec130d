"""Where a command acts: a store directory (``--store DIR``) or a running server
(``--server HOST:PORT``), and how it opens either.

Owns the options every ``--server`` command shares (``--server``, ``--tls-ca``,
``--access-key``, ``--secret-key``), the one-of-them check, and the three ways in:
``remote()`` (a FrontClient), ``open_store()`` (the store opened for writing) and
``open_view()`` (read-only, no lock, no recovery). The command modules (queries.py,
remote.py, acl.py, main.py) import it and nothing of each other, so the CLI has no
import cycle.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

DEFAULT_FRONT_PORT = 8080  # `mqstore serve --port`'s default: what a --server without a port means
DEFAULT_ROCKETMQ_PORT = 8081  # `mqstore serve --rocketmq-port`'s default


def server_address(value: str | None) -> str | None:
    """``--server`` as ``host:port``, checked: no port means the front's default 8080
    (gRPC would try 443), a port must be a number in 1..65535 (gRPC would wrap
    99999 to 34463), an IPv6 address goes in brackets (``[::1]:8080``).
    typer.BadParameter otherwise: a usage error, exit 2."""
    return checked_address(value, DEFAULT_FRONT_PORT)


def rocketmq_address(value: str | None) -> str | None:
    """``server_address`` for RocketMQ 5's port: no port means 8081."""
    return checked_address(value, DEFAULT_ROCKETMQ_PORT)


def checked_address(value: str | None, default_port: int) -> str | None:
    """``value`` as ``host:port`` (see ``server_address``), ``default_port`` if it has none."""
    if value is None:
        return None
    text = value.strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise typer.BadParameter(f"{value!r} is not HOST:PORT (an IPv6 address: [::1]:8080)")
        host, port = f"[{host}]", rest[1:] if rest else None
    elif text.count(":") > 1:
        raise typer.BadParameter(f"{value!r}: write an IPv6 address in brackets, e.g. [{text}]:8080")
    else:
        host, sep, port = text.partition(":")
        port = port if sep else None
    if not host or host == "[]":
        raise typer.BadParameter(f"{value!r} names no host (HOST:PORT, e.g. 127.0.0.1:8080)")
    if port is None:
        return f"{host}:{default_port}"
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise typer.BadParameter(f"port {port!r} of {value!r} is not a port number (1..65535)")
    return f"{host}:{int(port)}"


ServerOpt = Annotated[
    str | None,
    typer.Option(
        "--server",
        callback=server_address,
        help="HOST:PORT of a running `mqstore serve` (instead of --store; no port: 8080).",
    ),
]
TlsCaOpt = Annotated[
    Path | None,
    typer.Option(
        "--tls-ca",
        envvar="MQSTORE_TLS_CA",
        dir_okay=False,
        help="With --server: the front speaks TLS; trust these PEM certificates (env MQSTORE_TLS_CA).",
    ),
]
AccessKeyOpt = Annotated[
    str | None,
    typer.Option(
        "--access-key",
        envvar="MQSTORE_ACCESS_KEY",
        show_default=False,
        help="With --server: sign calls as this user (a front serving --acl; env MQSTORE_ACCESS_KEY).",
    ),
]
SecretKeyOpt = Annotated[
    str | None,
    typer.Option(
        "--secret-key",
        envvar="MQSTORE_SECRET_KEY",
        show_default=False,
        help="With --server: the user's secret key (env MQSTORE_SECRET_KEY, which keeps it out of the process list).",
    ),
]


def store_type_choice(value: str | None) -> str | None:
    from mqstore.store.config import STORE_TYPES

    if value is not None and value not in STORE_TYPES:
        raise typer.BadParameter(f"--store-type is {' or '.join(STORE_TYPES)}, got {value!r}")
    return value


StoreTypeOpt = Annotated[
    str | None,
    typer.Option(
        "--store-type",
        callback=store_type_choice,
        show_default=False,
        help="Consume queues of a new store (RocketMQ storeType): default (a file per queue) or defaultRocksDB (every "
        "queue in one RocksDB, for very many queues). Unset: an existing store's own type; a type that is not the "
        "store's is refused.",
    ),
]


def check_target(store: Path | None, server: str | None) -> None:
    """Exactly one of --store and --server."""
    if (store is None) == (server is None):
        raise typer.BadParameter("give --store DIR or --server HOST:PORT (one of them)")


@contextlib.contextmanager
def remote(
    server: str, tls_ca: Path | None = None, access_key: str | None = None, secret_key: str | None = None
) -> Iterator:
    """A FrontClient for ``server`` (TLS trusting ``tls_ca`` if given; every call
    signed as ``access_key`` if given, see services/acl.py); gRPC failures become
    one-line errors."""
    # Imported here: the gRPC client is heavy, and --store commands never need it.
    from mqstore.services.query.client import FrontClient, remote_errors

    with remote_errors(), FrontClient(server, tls_ca=tls_ca, access_key=access_key, secret_key=secret_key) as c:
        yield c


@contextlib.contextmanager
def open_store(store: Path, *, create: bool = False, store_type: str | None = None) -> Iterator:
    """The store at ``store``, opened for writing (recovered, locked); a clear error
    if there is none and ``create`` is not given. ``store_type``: see StoreTypeOpt."""
    from mqstore.store.config import StoreConfig
    from mqstore.store.message_store import MessageStore

    check_store(store, create=create)
    s = MessageStore(store, StoreConfig(store_type=store_type), background_dispatch=False)
    try:
        yield s
    finally:
        s.close()


@contextlib.contextmanager
def open_view(store: Path) -> Iterator:
    """The store at ``store``, opened for questions only (store/read_view.py: no
    lock, no recovery, no file changed)."""
    from mqstore.store.read_view import ReadView

    check_store(store)
    with ReadView(store) as v:
        yield v


def check_store(store: Path, *, create: bool = False) -> None:
    """FileNotFoundError naming ``store`` unless it holds a store (or ``create``)."""
    if not create and not (store / "commitlog").is_dir():
        what = "does not exist" if not store.exists() else "has no commitlog/ directory"
        raise FileNotFoundError(
            f"no store at {store}: it {what} (give the directory `mqstore serve` or "
            "`bench` made, or --create to make a new one)"
        )


__all__ = [
    "DEFAULT_FRONT_PORT",
    "DEFAULT_ROCKETMQ_PORT",
    "AccessKeyOpt",
    "SecretKeyOpt",
    "ServerOpt",
    "TlsCaOpt",
    "check_store",
    "checked_address",
    "check_target",
    "open_store",
    "StoreTypeOpt",
    "open_view",
    "remote",
    "rocketmq_address",
    "server_address",
]
