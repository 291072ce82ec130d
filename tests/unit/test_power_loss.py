"""The power-loss test mode: after power_cut, only what syncs covered is left."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mqstore.store import faults
from mqstore.store.mapped_file import Segment, fsync_dir, sync_file_system


@pytest.fixture
def image(tmp_path: Path):
    store = tmp_path / "store"
    store.mkdir()
    (store / "old").write_bytes(b"before")  # there when the mode starts: counts as durable
    faults.enable_power_loss(store, tmp_path / "image")
    yield store, tmp_path / "image"
    faults.disable_power_loss()


def _write(path: Path, data: bytes, *, sync: bool = False) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, data, 0)
        if sync:
            os.fdatasync(fd)
            faults.synced(path)
    finally:
        os.close(fd)


def test_names_need_a_directory_fsync_and_bytes_a_data_sync(image) -> None:
    store, img = image
    _write(store / "named_no_data", b"lost")  # name made durable below, data never synced
    (store / "old").unlink()
    fsync_dir(store)
    _write(store / "synced_no_name", b"data", sync=True)  # data durable, its name never
    faults.power_cut(store, img)
    assert sorted(os.listdir(store)) == ["named_no_data"]
    assert (store / "named_no_data").read_bytes() == b"\0" * 4  # size kept, bytes not


def test_rename_carries_the_data_synced_under_the_old_name(image) -> None:
    store, img = image
    _write(store / "f.tmp", b"new content", sync=True)
    os.replace(store / "f.tmp", store / "f")
    faults.power_cut(store, img)
    assert sorted(os.listdir(store)) == ["old"]  # the rename was never made durable
    assert (store / "old").read_bytes() == b"before"


def test_rename_made_durable(image) -> None:
    store, img = image
    _write(store / "f.tmp", b"new content", sync=True)
    os.replace(store / "f.tmp", store / "f")
    fsync_dir(store)
    faults.power_cut(store, img)
    assert (store / "f").read_bytes() == b"new content"


def test_a_segment_keeps_only_the_synced_range(image) -> None:
    store, img = image
    (store / "commitlog").mkdir()
    fsync_dir(store)
    seg = Segment.create(store / "commitlog" / ("0" * 20), 0, 16384)  # created with a directory fsync
    seg.write(0, b"a" * 5000)
    seg.sync(0, 5000)
    seg.write(5000, b"b" * 5000)  # written, never synced
    seg.close()
    faults.power_cut(store, img)
    data = (store / "commitlog" / ("0" * 20)).read_bytes()
    assert len(data) == 16384 and data[:5000] == b"a" * 5000 and data[5000:] == bytes(16384 - 5000)


def test_syncfs_keeps_everything(image) -> None:
    store, img = image
    (store / "d").mkdir()
    _write(store / "d" / "x", b"x1")
    sync_file_system(store)
    faults.power_cut(store, img)
    assert (store / "d" / "x").read_bytes() == b"x1" and (store / "old").read_bytes() == b"before"


def test_files_outside_the_store_are_not_modelled(image, tmp_path: Path) -> None:
    store, img = image
    _write(tmp_path / "acks", b"ack", sync=True)
    faults.power_cut(store, img)
    assert (tmp_path / "acks").read_bytes() == b"ack" and sorted(os.listdir(store)) == ["old"]
