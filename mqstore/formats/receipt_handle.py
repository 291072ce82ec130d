"""Pop receipt handle: what a client gets with a popped message and sends back to ack
it, change its invisible time or send it to the dead-letter queue. An ASCII string,
fields separated by single spaces (RocketMQ-like, but signed):

    field             form                         meaning
    version           "m2"                         m1 had no tag: refused (malformed) since
    shard             decimal, 0..2^31-1           the shard that made it
    queue_id          decimal, 0..2^31-1           the message's queue
    offset            decimal, 0..2^63-1           its queue offset
    generation        decimal, 0..2^63-1           the in-flight entry's generation it was issued with
    pop_ms            decimal, 0..2^63-1           when it was issued (epoch ms)
    invisible_ms      decimal, 0..2^63-1           for how long: deadline = pop_ms + invisible_ms
    commitlog_offset  decimal, 0..2^63-1           the record's PhysicalOffset
    tag               22 url-safe base64 chars     HMAC-SHA256 (first 16 bytes, unpadded) under
                                                   the shard's secret of
                                                   b"<len(group)>:<group><len(topic)>:<topic><fields>"
                                                   (lengths in decimal of the UTF-8 bytes,
                                                   <fields> the seven decimals as written here)

Decimals are canonical (no sign, no leading zeros), so ``parse(t).encode() == t``. The
handle does not name the group or topic: the request does (as in RocketMQ), and the
tag binds them. RocketMQ's handles carry no secret, so anyone who guesses the fields
acks another consumer's message; here a guessed, altered or other-group handle fails
:func:`authentic`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from dataclasses import dataclass, field

from mqstore.errors import InvalidReceiptHandle

HANDLE_VERSION = "m2"
TAG_BYTES = 16  # HMAC-SHA256 cut to 128 bits: no guessing, 22 characters on the wire
TAG_CHARS = 22
FIELDS = 7

_I32_MAX = (1 << 31) - 1
_I64_MAX = (1 << 63) - 1
_TAG_RE = re.compile(r"[A-Za-z0-9_-]{22}")
# canonical decimals only, then the tag
_HANDLE_RE = re.compile(r"m2((?: (?:0|[1-9][0-9]{0,18})){7}) ([A-Za-z0-9_-]{22})")
MAX_CHARS = len(HANDLE_VERSION) + FIELDS * 20 + 1 + TAG_CHARS


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    """One handle's fields (see the module docstring); on the wire :meth:`encode`.

    Every field is >= 0; shard and queue_id fit in 31 bits, the others in 63.
    ``tag`` does not take part in ``==``; "" is an unsigned handle (never handed out,
    refused by every check)."""

    shard: int
    queue_id: int
    offset: int
    generation: int
    pop_ms: int
    invisible_ms: int
    commitlog_offset: int
    tag: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.tag, str) or (self.tag and _TAG_RE.fullmatch(self.tag) is None):
            raise InvalidReceiptHandle(f"receipt handle tag must be {TAG_CHARS} url-safe base64 characters")
        for name in ("shard", "queue_id", "offset", "generation", "pop_ms", "invisible_ms", "commitlog_offset"):
            value = getattr(self, name)
            high = _I32_MAX if name in ("shard", "queue_id") else _I64_MAX
            if type(value) is not int or not 0 <= value <= high:
                raise InvalidReceiptHandle(
                    f"receipt handle field {name} must be an integer in 0..{high}, got {value!r}"
                )

    @property
    def deadline_ms(self) -> int:
        """When the message becomes visible again: ``pop_ms + invisible_ms``."""
        return self.pop_ms + self.invisible_ms

    def fields(self) -> str:
        """The seven numbers as :meth:`encode` writes them (what the tag covers)."""
        return (
            f"{self.shard} {self.queue_id} {self.offset} {self.generation} "
            f"{self.pop_ms} {self.invisible_ms} {self.commitlog_offset}"
        )

    def encode(self) -> str:
        """The handle as the client sees it (see the module docstring)."""
        return f"{HANDLE_VERSION} {self.fields()} {self.tag}"

    @classmethod
    def parse(cls, text: str) -> ReceiptHandle:
        """The handle :meth:`encode` wrote; InvalidReceiptHandle (reason ``malformed``)
        for anything else, so ``parse(t).encode() == t`` whenever it returns."""
        if not isinstance(text, str):
            raise InvalidReceiptHandle(f"a receipt handle is a string, got {type(text).__name__}")
        if len(text) > MAX_CHARS:  # before the regex: a huge input costs nothing
            raise InvalidReceiptHandle(f"receipt handle is {len(text)} characters long; at most {MAX_CHARS}")
        m = _HANDLE_RE.fullmatch(text)
        if m is None:
            raise InvalidReceiptHandle(
                f"malformed receipt handle {text[:80]!r}: expected {HANDLE_VERSION!r}, 7 decimal fields and a tag"
            )
        return cls(*(int(v) for v in m.group(1).split()), tag=m.group(2))


def handle_tag(secret: bytes, group: str, topic: str, h: ReceiptHandle) -> str:
    """The tag of ``h``'s fields for (group, topic) under ``secret`` (module docstring)."""
    g, t = group.encode(), topic.encode()
    msg = b"%d:%s%d:%s%s" % (len(g), g, len(t), t, h.fields().encode())
    mac = hmac.new(secret, msg, hashlib.sha256).digest()[:TAG_BYTES]
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def signed(secret: bytes, group: str, topic: str, h: ReceiptHandle) -> ReceiptHandle:
    """``h`` with its tag for (group, topic) under ``secret``."""
    return ReceiptHandle(
        h.shard, h.queue_id, h.offset, h.generation, h.pop_ms, h.invisible_ms, h.commitlog_offset,
        tag=handle_tag(secret, group, topic, h),
    )  # fmt: skip


def authentic(secret: bytes, shard: int, group: str, topic: str, h: ReceiptHandle) -> bool:
    """True iff ``h`` was made by ``shard`` (whose secret this is) for (group, topic):
    its tag is the one ``secret`` gives (compared in constant time)."""
    return bool(h.tag) and h.shard == shard and hmac.compare_digest(h.tag, handle_tag(secret, group, topic, h))


__all__ = ["FIELDS", "HANDLE_VERSION", "MAX_CHARS", "TAG_BYTES", "TAG_CHARS", "ReceiptHandle", "authentic", "signed"]
