"""Where a submission came from, without storing where: keyed hashes of address ranges.

The board's cohorts (``board/newkeys.py``) must know which keys arrived together from one
address range; the store must never hold an address. So each accepted submission stores
``origin_hash``: HMAC-SHA256 of its sender's *range* (IPv4 /24, IPv6 /48: what one person
or one cloud tenant usually holds, wider than the rate limits' buckets) under the secret
of the current *epoch* (``SPECSERVER_ADDRESS_HASH_ROTATION_DAYS``, default 30 days).

- Two submissions from one range in one epoch have equal hashes; nothing else can be read
  from a hash without the epoch's secret (a keyed hash, not a plain one: the 2**24 IPv4
  ranges would be tried in seconds against sha256).
- Secrets live in the store (``address_secrets``), so every replica computes the same hash;
  the first replica that needs an epoch's secret draws it (32 random bytes) and the others
  read it. An epoch's secret is deleted once ``SPECSERVER_ADDRESS_SECRET_RETENTION_DAYS``
  (default 90) have passed since the epoch ended: from then on nobody, the operator
  included, can tell which range a stored hash came from; the hashes stay, as opaque
  tokens that only say "these arrived from one range".
- Exports and the public API never show the hash (store/exportformat.py, queries.py).

Pure parts (``address_range``, ``origin_hash``, ``epoch_of``, ``stamp_origin``) apart from
the one store function (``epoch_secret``).
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
from datetime import UTC, datetime, timedelta
from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network

from sqlalchemy import Connection, delete, select, text

from specserver.store import tables
from specserver.store.tables import RowSet

RANGE_V4 = 24
RANGE_V6 = 48
_ORIGIN_COLUMN = [c.name for c in tables.submissions.columns].index("origin_hash")
_EPOCH_ZERO = datetime(1970, 1, 1)


def address_range(address: str) -> str | None:
    """The range an address (or a rate-limit bucket such as ``2001:db8::/64``) belongs to:
    its IPv4 /24 or IPv6 /48 (an IPv4-mapped IPv6 address as IPv4). None when it is no
    address at all (no peer known): such submissions form no cohort."""
    value = address.strip()
    if not value or value == "unknown":
        return None
    host = value.split("/", 1)[0]
    try:
        parsed = ip_address(host)
    except ValueError:
        return None
    if isinstance(parsed, IPv6Address) and parsed.ipv4_mapped is not None:
        parsed = parsed.ipv4_mapped
    prefix = RANGE_V4 if isinstance(parsed, IPv4Address) else RANGE_V6
    return str(ip_network(f"{parsed}/{prefix}", strict=False))


def origin_hash(secret: bytes, address_range_text: str) -> str:
    return hmac.new(secret, address_range_text.encode("ascii"), hashlib.sha256).hexdigest()


def epoch_of(moment: datetime, rotation_days: float) -> int:
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    return int((moment - _EPOCH_ZERO) // timedelta(days=rotation_days))


def epochs_kept(rotation_days: float, retention_days: float) -> int:
    """How many past epochs keep their secret besides the current one."""
    return math.ceil(retention_days / rotation_days)


def epoch_secret(conn: Connection, epoch: int, keep_epochs: int) -> bytes:
    """The secret of ``epoch``, drawn now if no replica has drawn it yet; secrets of epochs
    more than ``keep_epochs`` before it are deleted (their hashes become unreadable)."""
    table = tables.address_secrets
    found = conn.execute(select(table.c.secret).where(table.c.epoch == epoch)).scalar()
    if found is None:
        # ON CONFLICT: two replicas drawing at once keep the first secret (DuckDB and
        # PostgreSQL both have it); both then read the one that was kept.
        conn.execute(text(
            "INSERT INTO address_secrets (epoch, secret, created_at) VALUES (:e, :s, :c) "
            "ON CONFLICT (epoch) DO NOTHING"),
            {"e": epoch, "s": secrets.token_hex(32),
             "c": datetime.now(UTC).replace(tzinfo=None)})
        conn.execute(delete(table).where(table.c.epoch < epoch - keep_epochs))
        found = conn.execute(select(table.c.secret).where(table.c.epoch == epoch)).scalar_one()
    return bytes.fromhex(str(found))


def stamp_origin(rows: RowSet, origin: str | None) -> RowSet:
    """The same rows with ``submissions.origin_hash`` set (the worker built them without
    it: only the server process knows the address)."""
    stamped = [row[:_ORIGIN_COLUMN] + (origin,) + row[_ORIGIN_COLUMN + 1:]
               for row in rows.rows["submissions"]]
    return RowSet({**rows.rows, "submissions": stamped})
