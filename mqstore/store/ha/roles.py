"""Taking a role in an epoch (RocketMQ AutoSwitchHAService.changeToMaster /
changeToSlave), the epoch checks only: what the services do around them (stopping
appends, streams, the truncation's reopen) is in the package docstring.

- ``take_epoch`` (a replica elected master of ``epoch``): a lower epoch than the
  last one it holds is refused (StaleEpochError); the same epoch again (a master
  restarted within its epoch) keeps its entry; a higher one is appended at the log's
  end and persisted before the master accepts a write. RocketMQ instead drops an
  entry of the same epoch and appends it again at the present end, which moves an
  epoch's start that followers already hold (and breaks their consistent point).
- ``check_master_epoch`` (a replica told to follow a master of ``epoch``): a master
  of a lower epoch than the replica's last is refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from mqstore.errors import StaleEpochError
from mqstore.formats.epoch_file import EpochEntry
from mqstore.store.ha.epochs import EpochCache

if TYPE_CHECKING:
    from mqstore.store.commitlog import CommitLog

log = structlog.get_logger(__name__)


def take_epoch(commitlog: CommitLog, epochs: EpochCache, epoch: int) -> EpochEntry:
    """The entry this master writes in (module docstring). Call with appends stopped."""
    last = epochs.last_entry()
    if last is not None and epoch < last.epoch:
        raise StaleEpochError(
            f"cannot become master of epoch {epoch}: this replica already holds epoch {last.epoch}",
            epoch=epoch,
            last_epoch=last.epoch,
        )
    if last is not None and epoch == last.epoch:
        return last
    entry = epochs.append(epoch, commitlog.wrote_offset)
    log.info("epoch_taken", epoch=epoch, start_offset=entry.start_offset, store=str(commitlog.store_dir))
    return entry


def check_master_epoch(epochs: EpochCache, epoch: int) -> None:
    """StaleEpochError if a master of ``epoch`` is older than this replica's last epoch."""
    if epoch < epochs.last_epoch:
        raise StaleEpochError(
            f"a master of epoch {epoch}, but this replica holds epoch {epochs.last_epoch}: it is deposed",
            epoch=epoch,
            last_epoch=epochs.last_epoch,
        )


__all__ = ["check_master_epoch", "take_epoch"]
