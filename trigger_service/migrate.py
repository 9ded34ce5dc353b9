"""``python -m trigger_service.migrate [--backfill]``: apply the pending schema files once,
under a lock (see :mod:`trigger_service.adapters.cassandra.migrate`), then the data step of
a file that needs one. ``make migrate`` (and ``make up``) run it.

Data steps: when migration 014 (the open index) or 015 (the newest-first index) is applied,
every trigger written by an earlier release gets its entries there
(``adapters.cassandra.backfill``); ``--backfill`` runs that again (it is idempotent), e.g.
after a backfill was interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from trigger_service.adapters.cassandra.backfill import backfill_listings
from trigger_service.adapters.cassandra.migrate import migrate
from trigger_service.adapters.cassandra.store import CassandraStore
from trigger_service.adapters.crypto.keyring import open_cipher
from trigger_service.config.settings import Settings
from trigger_service.core.errors import TriggerError
from trigger_service.core.time.clock import SystemClock
from trigger_service.platform.logs import configure_logging, log_notices

LISTING_VERSIONS = {14, 15}  # the listing indexes, filled from the earlier listing


async def _backfill(settings: Settings) -> int:
    cipher = await open_cipher(settings.encryption, settings.sqs)  # the backfill reads rows
    store = await CassandraStore.connect(settings.cassandra, cipher,
                                         seal_payloads=settings.encryption.payloads)
    try:
        return await backfill_listings(store.triggers, settings, SystemClock().now_ms())
    finally:
        await store.close()


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m trigger_service.migrate")
    p.add_argument("--backfill", action="store_true",
                   help="write the listing indexes' entries of every stored trigger again")
    args = p.parse_args()
    try:
        settings = Settings.from_env()
        configure_logging(settings.log_level, settings.log_format)
        log_notices("migrate", settings.notices)
        applied = migrate(settings.cassandra, SystemClock().now_ms())
        print(f"migrate: keyspace {settings.cassandra.keyspace}: "
              + (f"applied {applied}" if applied else "up to date"))
        if args.backfill or LISTING_VERSIONS & set(applied):
            n = asyncio.run(_backfill(settings))
            print(f"migrate: listing indexes: written for every stored trigger ({n} open)")
    except TriggerError as e:
        print(f"migrate: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
