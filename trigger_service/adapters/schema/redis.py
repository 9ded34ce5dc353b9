"""Every name the service stores things under in Redis:

(``{group}`` below is literal braces around the group's name: a Redis Cluster hash tag, so
all of a group's keys share one slot.)

- ``lease:{group}:shard:{n}`` string ``{owner}:{fence}``, PX ``TRIGGER_SWEEP_LEASE_TTL_S``: the
  shard's sweeper. Taken with SET NX (Lua, atomically with the fence INCR), renewed with PEXPIRE
  only by the holder, compared before every promotion.
- ``lease:{group}:fence:{n}`` integer, no TTL: the fencing token, incremented on each acquisition.
- ``sweeper:{group}:members`` zset: sweeper id → last heartbeat ms (shares of the shards).
- ``idem:{caller}:{key}`` string (JSON) ``{"state": "pending"|"done", "hash", "triggerId",
  "fireAtMs"}``: claimed with one ``SET NX GET PX`` by the key's owner (``pending``,
  ``IDEM_LOCK_TTL_MS``; the GET tells the others), then ``done`` for a day at most
  (``app.idempotency``); deleted by an owner that failed. A cache: the truth is the derived
  row, so losing Redis (or an entry it cannot parse) loses nothing.
- ``ops:{ns}:breakers`` hash (``ns``: the main queue's name, i.e. one deployment): field
  ``{dispatcher}|{caller}|{origin}`` → JSON ``{"state", "changedAtMs", "expiresAtMs"}``, written
  by each dispatcher every second and HDEL'd when it drops that circuit, key EXPIRE
  ``OPS_BREAKER_TTL_S``; readers skip (and delete) expired fields, so a dead dispatcher's go.
- ``ops:{ns}:lag:{slot}`` hash: fire-lag bucket index → count for the 10 s slot starting at
  epoch second ``slot`` (HINCRBY by every dispatcher), EXPIRE ``OPS_LAG_TTL_S`` (the 5 min window
  of the ops page, and a margin).
- ``rate:{key}`` hash ``{tokens, ms}``: a caller's request token bucket, refilled by the Lua
  script that takes from it (Redis' clock); PEXPIRE the time to refill it whole plus 1 s.
- ``pending:{caller}`` zset: trigger id → the ms until which it counts against ``max_pending``
  (its fire time; a series: far future, until cancelled); the reserve script drops entries
  past their score, cancel ZREMs. No TTL; losing it lets a caller register more for a while.
- ``streams:{caller}`` zset: inbox stream slot → ms its stream ends by (then dropped); PEXPIREd.
- ``budget:{caller}:{channel}:{yyyymmdd}`` integer: recipients sent to that UTC day (the take
  script), EX 2 days.
- ``flow:{h}:{part}:{scope}`` (``scope``: ``flow_scope_name``, the key in its
  caller's namespace, ``<len(caller)>.<caller>.<k|d>.<key>``; ``h``: a hash of it, the slot's
  tag) ``runs`` zset + ``ends`` hash: reserved rate slots as runs (start → end ms, floats);
  ``reserved`` zset member → slot start; ``leases`` zset holder → lease end; ``starts`` zset
  holder → start (the rate's window). PEXPIREd 10 min past the last slot or lease. Keys of
  releases before the caller's namespace (``flow:{h}:{part}:{key}``) are read by no one and
  expire by their own PEXPIRE.
- ``ops:{ns}:flow`` hash ``{dispatcher}|{scope}`` → JSON view for the ops page, EXPIRE 30 s.
- ``inbox:{caller}:{recipient}`` pub/sub channel: each new inbox message's id once stored (the API
  PSUBSCRIBEs ``inbox:*``); at most once: a stream that missed one replays it from Cassandra.

"""

from __future__ import annotations

import hashlib
from typing import Final

# --- Redis -------------------------------------------------------------------------------
IDEM_KEY_PREFIX: Final = "idem"
IDEM_LOCK_TTL_MS: Final = 10_000
IDEM_STATE: Final = "state"
IDEM_STATE_PENDING: Final = "pending"
IDEM_STATE_DONE: Final = "done"
IDEM_HASH: Final = "hash"
IDEM_TRIGGER_ID: Final = "triggerId"
IDEM_FIRE_AT_MS: Final = "fireAtMs"



def _tag(group: str) -> str:
    # A Redis Cluster hash tag: every key of a sweeper group lands in one slot, so the acquire
    # script (lease + fence) and the MGET of the fencing check never go CROSSSLOT.
    return "{" + group + "}"


def lease_key(group: str, shard: int) -> str:
    return f"lease:{_tag(group)}:shard:{shard}"


def lease_value(owner: str, fence: int) -> str:
    """What a lease key holds while ``owner`` has it with fencing token ``fence``."""
    return f"{owner}:{fence}"


def fence_key(group: str, shard: int) -> str:
    return f"lease:{_tag(group)}:fence:{shard}"


def dead_dispatcher_key(incarnation: str) -> str:
    """A dispatcher process declared dead by its successor (``dispatcher.succession``)."""
    return f"dispatcher:dead:{incarnation}"


def sweeper_members_key(group: str) -> str:
    return f"sweeper:{_tag(group)}:members"


def redis_idem_key(caller: str, idem_key: str) -> str:
    """Redis key for one caller's idempotency key."""
    return f"{IDEM_KEY_PREFIX}:{caller}:{idem_key}"


OPS_BREAKER_TTL_S: Final = 30
OPS_LAG_TTL_S: Final = 360
INBOX_CHANNELS: Final = "inbox:*"  # every inbox channel: the API's one PSUBSCRIBE
STREAM_SLOTS_KEY: Final = "streams:{{{caller}}}"  # .format(caller=...): a hash tag, as _tag


def ops_breakers_key(ns: str) -> str:
    return f"ops:{_tag(ns)}:breakers"


def ops_lag_key(ns: str, slot: int) -> str:
    return f"ops:{_tag(ns)}:lag:{slot}"


def ops_breaker_field(source: str, caller: str, origin: str) -> str:
    return f"{source}|{caller}|{origin}"


def rate_bucket_key(key: str) -> str:
    return f"rate:{_tag(key)}"


def pending_key(caller: str) -> str:
    return f"pending:{_tag(caller)}"


def budget_key(caller: str, channel: str, day: str) -> str:
    return f"budget:{_tag(caller)}:{channel}:{day}"


def flow_scope_name(caller: str, key: str, default: bool) -> str:
    """A flow-control key's name in its caller's namespace (``core.flow.FlowScope``):
    ``<len(caller)>.<caller>.<k|d>.<key>``: the caller length-prefixed, then ``k`` for a key
    the caller wrote or ``d`` for its default per origin. Injective: the length delimits the
    caller whatever it holds, and the kind letter sits at a fixed place after it."""
    return f"{len(caller)}.{caller}.{'d' if default else 'k'}.{key}"


def flow_key(caller: str, key: str, default: bool, part: str) -> str:
    name = flow_scope_name(caller, key, default)
    return f"flow:{_tag(hashlib.sha1(name.encode()).hexdigest()[:16])}:{part}:{name}"


def ops_flow_key(ns: str) -> str:
    return f"ops:{_tag(ns)}:flow"


def inbox_channel(caller: str, recipient: str) -> str:
    return f"inbox:{caller}:{recipient}"  # unambiguous: a caller's name has no ':'
