"""``python -m trigger_service.migrate``: create the keyspace and apply pending CQL files."""

from __future__ import annotations

import sys

from trigger_service.cassandra_store import CassandraStore
from trigger_service.errors import TriggerError
from trigger_service.logs import configure_logging
from trigger_service.settings import Settings


def main() -> None:
    try:
        settings = Settings.from_env()
        configure_logging(settings.log_level, settings.log_format)
        store = CassandraStore._connect_sync(settings.cassandra, True)
        store._cluster.shutdown()
    except TriggerError as e:
        print(f"migrate: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
