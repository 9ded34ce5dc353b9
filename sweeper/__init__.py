"""Sweepers: shard leases, due-bucket scans and a hierarchical timing wheel that hands
far-future triggers to SQS shortly before they are due."""
