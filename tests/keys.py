"""The cipher of the test fixtures' stores: over the settings' key file (``var/`` unless
``TRIGGER_ENCRYPTION_KEY_FILE`` says), created if missing as ``make up`` does, so the
processes a test starts (``Runtime.open``) read what the fixtures write and the other way
round."""

from __future__ import annotations

import os

from trigger_service.adapters.crypto.envelope import EnvelopeCipher, new_data_key
from trigger_service.adapters.crypto.keyfile import KeyFile, add_key
from trigger_service.adapters.crypto.keyring import file_cipher
from trigger_service.config.settings import VARIABLES, Settings


def service_settings() -> Settings:
    """The service's settings from the environment, without the suites' own ``TRIGGER_*``
    variables (test keyspaces), which a service refuses."""
    names = {v.name for v in VARIABLES}
    return Settings.from_env({k: v for k, v in os.environ.items() if k in names})


def fixture_cipher() -> EnvelopeCipher:
    path = service_settings().encryption.key_file
    if not path.exists():
        add_key(path, "dev", current=True)
    return file_cipher(path)


def throwaway_cipher() -> EnvelopeCipher:
    """A cipher over a random key that no file holds: for one process's unit tests."""
    keys = KeyFile([("throwaway", os.urandom(32))])
    data_key = new_data_key()
    return EnvelopeCipher([keys], data_key, keys.wrap_now(data_key))
