"""Durable delayed-callback service: the HTTP API and the shared core."""

import zoneinfo

# Zone rules come from the PyPI ``tzdata`` package only, never from the OS's zone files (which
# win by default and differ between hosts and images): every process of every deployment
# then turns a wall time into the same instant. Done here, before any zone is loaded.
zoneinfo.reset_tzpath(to=[])
