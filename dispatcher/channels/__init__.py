"""How a due trigger reaches its receiver: one ``Channel`` (``core.ports``) per module."""
