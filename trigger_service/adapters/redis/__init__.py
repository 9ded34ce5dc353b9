"""Redis: the idempotency fast path and the sweepers' shard leases, on one client."""
