"""``python -m trigger_service.migrate``: apply the pending schema files once, under a lock
(see :mod:`trigger_service.adapters.cassandra.migrate`). ``make migrate`` runs it."""

from trigger_service.adapters.cassandra.migrate import main

if __name__ == "__main__":
    main()
