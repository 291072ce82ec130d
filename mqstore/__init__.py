"""mqstore: Apache RocketMQ's broker store (CommitLog, ConsumeQueue, IndexFile), in Python.

The format layer is ``mqstore.formats`` (bytes only), the store core ``mqstore.store``
(plain Python, one process). See README.md for a tour.
"""

from mqstore.errors import MqStoreError
from mqstore.logging import configure_library_default
from mqstore.store import Bodies, CommitLog, FlushMode, Message, MessageBatch, PutStatus, StoreConfig, Texts
from mqstore.store.message_store import MessageStore

configure_library_default()  # a library logs warnings on stderr, not every info event on stdout
__version__ = "0.1.0"
__all__ = [
    "Bodies",
    "CommitLog",
    "FlushMode",
    "Message",
    "MessageBatch",
    "MessageStore",
    "MqStoreError",
    "PutStatus",
    "StoreConfig",
    "Texts",
    "__version__",
]
