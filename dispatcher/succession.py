"""Who holds a claim, and the proof that a dispatcher process is dead.

Every claim id names the process that wrote it: ``<incarnation>.<random>``, the incarnation
drawn when the process starts (``Incarnation``). A process started with a slot file
(``TRIGGER_DISPATCH_SLOT_FILE``: one per dispatcher of a host, on a local filesystem, as
``infra/app.sh`` names them) holds an exclusive ``flock`` on it for its whole life and writes
its incarnation in it. The kernel drops that lock only once the process is gone, every
thread of it, so the next process to take the lock (its successor, restarted after a crash)
knows that the incarnation it finds in the file can make no send any more. It waits
``TAKEOVER_MARGIN_MS`` (the kernel flushing a request the dead process had written), then
declares it dead (``DispatcherDeaths``), and again every ``DECLARE_EVERY_S`` for a while, so a
Redis flush loses the record for seconds at most.

A dispatcher that finds an IN_FLIGHT row whose claim it would have to watch for its lease
(``claim_keeping.Sightings``) first asks whether the claim's incarnation was declared dead
(``proven_dead``); if so it takes the claim over at once. A dead claimer's trigger is then
late by the time its message takes to come back, not that and a lease more.

No clock is trusted: the proof is the kernel's lock. Without one (no slot file, a slot held
by another live process, a host that died with its processes, a record lost or expired) a
claim is watched for its lease, as before. A graceful stop is declared too (it is true: the
process is gone).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import random
import re
import secrets
from dataclasses import dataclass
from typing import Any

import structlog

from dispatcher.claim_keeping import TAKEOVER_MARGIN_MS
from trigger_service.core.errors import AdapterError
from trigger_service.core.ports import Clock, Metrics
from trigger_service.core.ports.deaths import DispatcherDeaths

log = structlog.get_logger("dispatcher")

# A successor declares its predecessor dead this often, for this long: long past any claim's
# lease and message visibility (after that a claim is simply watched), each record kept a
# little longer than the next declaration needs.
DECLARE_EVERY_S = 5
DECLARE_FOR_S = 600
DEATH_TTL_S = DECLARE_FOR_S + 300
# Incarnations found dead, remembered (a herd of one dead dispatcher's claims: one read).
_MAX_KNOWN_DEAD = 1_000
# An incarnation found alive (not declared dead) is not asked about again for this long: a
# herd of one claimer's watched claims costs a read a second, not one a claim a second.
_ALIVE_FOR_MS = 1_000
_INCARNATION = re.compile(r"[0-9a-f]{16}")


@dataclass(frozen=True, slots=True)
class Incarnation:
    """One dispatcher process's life: the prefix of every claim id it writes."""

    id: str

    @classmethod
    def new(cls) -> Incarnation:
        return cls(secrets.token_hex(8))

    def claim_id(self) -> str:
        # The random part from the random module (no system call per claim): unique within
        # the incarnation is all it must be (the module reseeds in a forked child).
        return f"{self.id}.{random.getrandbits(64):016x}"


def incarnation_of(claim_id: str | None) -> str | None:
    """The incarnation that wrote ``claim_id``; None for a claim id without one (written
    before claim ids named their process, or by a test)."""
    if claim_id is None or "." not in claim_id:
        return None
    return claim_id.split(".", 1)[0]


@dataclass(frozen=True, slots=True)
class Slot:
    """A slot file locked by this process: its descriptor (the lock lives as long as it is
    open) and the incarnation of the process that held it before (None: none recorded)."""

    fd: int
    predecessor: str | None

    @classmethod
    def take(cls, path: str, incarnation: Incarnation) -> Slot | None:
        """Lock ``path`` (created if missing) for this process and write ``incarnation`` in
        it; None when another live process holds it (then nothing is proved nor written).
        Raises ``OSError`` for a path that cannot be opened."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        found = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
        os.ftruncate(fd, 0)
        os.pwrite(fd, incarnation.id.encode(), 0)
        return cls(fd, found if _INCARNATION.fullmatch(found) else None)

    def release(self) -> None:
        """Unlock (the process's exit does the same)."""
        os.close(self.fd)


class Succession:
    """This process's incarnation, its slot, the declaration of its predecessor's death, and
    the proof of other claimers' deaths."""

    def __init__(self, deaths: DispatcherDeaths | None, clock: Clock, metrics: Metrics, *,
                 incarnation: Incarnation | None = None) -> None:
        """``deaths``: where deaths are declared and read (None: never, every claim is
        watched)."""
        self.incarnation = incarnation or Incarnation.new()
        self._deaths = deaths
        self._clock = clock
        self._metrics = metrics
        self._known_dead: dict[str, None] = {}
        self._alive_at: dict[str, int] = {}  # incarnation → when last found not declared
        self.slot: Slot | None = None

    def claim_id(self) -> str:
        return self.incarnation.claim_id()

    def take_slot(self, path: str) -> None:
        """Lock the slot file ``path`` for this process's life (nothing if empty)."""
        if not path:
            return
        self.slot = Slot.take(path, self.incarnation)
        if self.slot is None:
            log.warning("dispatcher_slot_busy", slot_file=path,
                        detail="another live process holds it: no death is proved from it")
            return
        log.info("dispatcher_slot_taken", slot_file=path, incarnation=self.incarnation.id,
                 predecessor=self.slot.predecessor)

    def release(self) -> None:
        """Unlock the slot now (tests: several dispatchers in one process). A dispatcher
        process never does: its exit does, once it can send nothing more."""
        if self.slot is not None:
            self.slot.release()
            self.slot = None

    async def run(self, stop: asyncio.Event) -> None:
        """Declare the predecessor dead (if the slot named one) every ``DECLARE_EVERY_S``
        for ``DECLARE_FOR_S``, the first time ``TAKEOVER_MARGIN_MS`` after the slot was
        taken; until ``stop``."""
        dead = self.slot.predecessor if self.slot is not None else None
        if dead is None or self._deaths is None:
            return
        if await self._stopped_within(stop, TAKEOVER_MARGIN_MS):
            return
        for _ in range(DECLARE_FOR_S // DECLARE_EVERY_S):
            try:
                await self._deaths.declare(dead, DEATH_TTL_S)
                self._metrics.inc("dispatcher_deaths_declared_total")
            except AdapterError as e:  # declared again at the next round
                log.warning("dispatcher_death_declare_failed", incarnation=dead, error=str(e))
            if await self._stopped_within(stop, DECLARE_EVERY_S * 1000):
                return

    async def _stopped_within(self, stop: asyncio.Event, duration_ms: int) -> bool:
        """Wait ``duration_ms`` on the clock, or less if ``stop`` is set: whether it was."""
        waits = [asyncio.ensure_future(self._clock.sleep_ms(duration_ms)),
                 asyncio.ensure_future(stop.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
            await asyncio.gather(*waits, return_exceptions=True)
        return stop.is_set()

    def known_dead(self, claim_id: str | None) -> bool:
        """Whether ``proven_dead`` already found ``claim_id``'s process dead (no read)."""
        return incarnation_of(claim_id) in self._known_dead

    async def proven_dead(self, claim_id: str | None) -> bool:
        """Whether the process that wrote ``claim_id`` was declared dead (False when not,
        unknown, or the record cannot be read: the claim is then watched)."""
        incarnation = incarnation_of(claim_id)
        if incarnation is None or self._deaths is None:
            return False
        if incarnation in self._known_dead:
            return True
        now_ms = self._clock.monotonic_ms()
        if now_ms - self._alive_at.get(incarnation, now_ms - _ALIVE_FOR_MS) < _ALIVE_FOR_MS:
            return False
        try:
            dead = await self._deaths.is_dead(incarnation)
        except AdapterError as e:
            log.warning("dispatcher_death_read_failed", incarnation=incarnation, error=str(e))
            return False
        if dead:
            _remember(self._known_dead, incarnation, None)
            self._alive_at.pop(incarnation, None)
        else:
            _remember(self._alive_at, incarnation, now_ms)
        return dead


def _remember(found: dict[str, Any], incarnation: str, value: Any) -> None:
    """Keep ``incarnation`` in ``found`` as its newest entry, the oldest forgotten past
    ``_MAX_KNOWN_DEAD`` entries."""
    found.pop(incarnation, None)
    if len(found) >= _MAX_KNOWN_DEAD:
        del found[next(iter(found))]
    found[incarnation] = value
