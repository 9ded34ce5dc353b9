"""``python -m trigger_service.platform.keys add [--current | --if-missing] [--id ID]``: add
a random key-encryption key to ``TRIGGER_ENCRYPTION_KEY_FILE`` (created, mode 0600, if
missing).

``--if-missing``: only when the file does not exist (what ``make up`` runs, so a fresh
checkout has a key). Without ``--current`` the key goes last: it unwraps but does not wrap
yet; docs/operations/security.md "Encryption at rest" gives the rotation's steps.
"""

from __future__ import annotations

import argparse
import sys
import time

from trigger_service.adapters.crypto.keyfile import add_key
from trigger_service.config.settings import Settings
from trigger_service.core.errors import TriggerError


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m trigger_service.platform.keys")
    sub = p.add_subparsers(dest="command", required=True)
    add = sub.add_parser("add", help="add a new random key to the key file")
    when = add.add_mutually_exclusive_group()
    when.add_argument("--current", action="store_true",
                      help="put it first: processes started next wrap with it")
    when.add_argument("--if-missing", action="store_true",
                      help="only create the file (with one key) if there is none")
    add.add_argument("--id", help="the key's id (default: k<unix seconds>)")
    args = p.parse_args()
    try:
        path = Settings.from_env().encryption.key_file
        if args.if_missing and path.exists():
            return
        key_id = args.id or f"k{int(time.time())}"
        add_key(path, key_id, current=args.current)
        print(f"keys: added {key_id} to {path}" + (" (current)" if args.current else ""))
    except TriggerError as e:
        print(f"keys: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
