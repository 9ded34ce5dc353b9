#!/opt/trigger-service/venv/bin/python
"""The image's HEALTHCHECK: exit 0 when the API answers GET /healthz with 200.

The URL is HEALTHCHECK_URL, else http://127.0.0.1:$TRIGGER_API_PORT/healthz (the API
listens on TRIGGER_API_HOST, 127.0.0.1 unless set; with another address set
HEALTHCHECK_URL to one it answers on)."""

import os
import sys
import urllib.request

url = os.environ.get("HEALTHCHECK_URL") or (
    f"http://127.0.0.1:{os.environ.get('TRIGGER_API_PORT', '8080')}/healthz")
try:
    with urllib.request.urlopen(url, timeout=2) as resp:
        sys.exit(0 if resp.status == 200 else 1)
except Exception as exc:  # any failure is "unhealthy"
    print(f"unhealthy: {url}: {exc}", file=sys.stderr)
    sys.exit(1)
