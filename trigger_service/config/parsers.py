"""Parsers of ``TRIGGER_*`` values (shared by the settings modules): each raises
``ValueError`` with a short reason, which ``Settings.from_env`` turns into a ``ConfigError``
naming the variable."""

from __future__ import annotations

from collections.abc import Callable


def pos_int(raw: str) -> int:
    value = int(raw)
    if value < 0:
        raise ValueError("must be >= 0")
    return value


def at_least_one(raw: str) -> int:
    value = pos_int(raw)
    if value < 1:
        raise ValueError("must be >= 1")
    return value


def flag(raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("true or false")


def pos_float(raw: str) -> float:
    value = float(raw)
    if value <= 0:
        raise ValueError("must be > 0")
    return value


def int_list(raw: str) -> tuple[int, ...]:
    values = tuple(int(x) for x in raw.split(",") if x.strip())
    if any(v < 0 for v in values):
        raise ValueError("values must be >= 0")
    return values


def str_list(raw: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in raw.split(",") if x.strip())


def int_up_to(limit: int) -> Callable[[str], int]:
    """A parser of ``pos_int`` values no larger than ``limit``."""

    def parse(raw: str) -> int:
        value = pos_int(raw)
        if value > limit:
            raise ValueError(f"must be <= {limit}")
        return value

    return parse
