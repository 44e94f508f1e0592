"""Idempotency keys and ids: UUIDv7s, and the transfer id a key stands for.

A write names its command by ``(consumer, key)``. :func:`new_key` makes the
key the client sends when the caller gives none: a UUIDv7 in text, like
libtally's and the CLI's, so keys grow with time (the server's inbox grows at
its right edge) and carry their creation time (the server refuses one older
than its dedupe window with ``key_expired`` instead of applying it twice).
"""
from __future__ import annotations

import hashlib
import os
import threading
import time
from typing import Optional

_TRANSFER_ID_DOMAIN = b"tally.transfer-id.v1"
_HEX_DIGITS = "0123456789abcdefABCDEF"

_lock = threading.Lock()
_last_ms = 0
_last_rand = 0


def uuid7_bytes(unix_ms: Optional[int] = None) -> bytes:
    """16 bytes of a UUIDv7: 48 bits of Unix milliseconds, then version 7,
    74 random bits and the variant. Within one millisecond of one process
    the ids still increase (the random part counts up), so keys made one
    after another sort in the order they were made."""
    global _last_ms, _last_rand
    ms = int(time.time() * 1000) if unix_ms is None else unix_ms
    with _lock:
        if unix_ms is None and ms <= _last_ms:
            ms = _last_ms
            rand = (_last_rand + 1) & ((1 << 74) - 1)
        else:
            rand = int.from_bytes(os.urandom(10), "big") >> 6
        if unix_ms is None:
            _last_ms, _last_rand = ms, rand
    ms &= (1 << 48) - 1
    value = (ms << 80) | (0x7 << 76) | ((rand >> 62) << 64) | (0x2 << 62) | (rand & ((1 << 62) - 1))
    return value.to_bytes(16, "big")


def uuid_text(raw: bytes) -> str:
    """The UUID text (8-4-4-4-12 lower-case hex) of 16 bytes."""
    h = raw.hex()
    return f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def new_key() -> str:
    """A new idempotency key: a UUIDv7 in text (36 characters).

    Keep it to retry the same write: a call with the same key and the same
    fields is answered from the server's inbox, never applied twice."""
    return uuid_text(uuid7_bytes())


def new_id() -> str:
    """A new 16-byte id (a UUIDv7) as 32 hex digits: a transfer id for a
    ``chain`` or ``batch`` member, where the server derives none."""
    return uuid7_bytes().hex()


def parse_id(text: str) -> Optional[bytes]:
    """16 bytes from 32 hex digits (dashes anywhere are skipped, as tallyd
    reads ids), or None when ``text`` is not such an id."""
    digits = text.replace("-", "")
    if len(digits) != 32 or any(c not in _HEX_DIGITS for c in digits):
        return None
    return bytes.fromhex(digits)


def transfer_id_for_key(consumer: str, key: str) -> str:
    """The id tallyd gives a ``transfer`` sent without one: the first 16
    bytes of SHA-256("tally.transfer-id.v1" || consumer || 0x00 || key),
    with the key's time and the UUIDv7 marks when the key is a UUIDv7
    (docs/PROTOCOL.md, "JSON API"; common/transfer_id.c). 32 hex digits."""
    digest = bytearray(hashlib.sha256(_TRANSFER_ID_DOMAIN + consumer.encode("utf-8") + b"\0"
                                      + key.encode("utf-8")).digest()[:16])
    key_id = parse_id(key)
    if key_id is not None and key_id[6] >> 4 == 7 and key_id[8] >> 6 == 2:
        digest[0:6] = key_id[0:6]
        digest[6] = 0x70 | (digest[6] & 0x0F)
        digest[8] = 0x80 | (digest[8] & 0x3F)
    return bytes(digest).hex()
