"""Encryption at rest (``core.ports.crypto``): the envelope cipher and its key sources, one
module each; ``keyring.open_cipher`` builds the one a process uses from its settings."""
