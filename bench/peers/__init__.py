"""``make bench-peers``: the same loads against our service and against Celery ETA tasks."""
