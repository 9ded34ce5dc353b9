"""Errors cross to another process whole (a costly caller's parsing runs in a worker,
``app/costly_pool.py``): every ``ApiError`` subclass, with its extras, reads the same to the
HTTP layer after a pickle round trip; so do the other errors parsing and planning raise."""

from __future__ import annotations

import inspect
import pickle
from collections.abc import Iterator
from typing import Any

import pytest

from trigger_service.app.cpu_shares import CpuShareExceeded  # an ApiError defined there
from trigger_service.core.errors import ApiError, ConfigError, StoreTimeout
from trigger_service.core.urls import UrlError


def subclasses(cls: type[ApiError]) -> Iterator[type[ApiError]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from subclasses(sub)


# What each constructor's required parameters get, by name.
_ARGUMENTS: dict[str, Any] = {"message": "when: cannot read it", "retry_after_s": 7,
                              "trigger_id": "trg_1"}


def example(cls: type[ApiError]) -> ApiError:
    """An instance of ``cls`` with an extra beyond what its constructor sets."""
    parameters = list(inspect.signature(cls).parameters.values())
    args = [_ARGUMENTS[p.name] for p in parameters
            if p.default is p.empty and p.kind is not p.VAR_KEYWORD]
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return cls(*args, candidates=["a", "b"])
    error = cls(*args)
    error.extra["candidates"] = ["a", "b"]
    return error


def read(error: ApiError) -> tuple[object, ...]:
    """What the HTTP layer reads of an error (``http/app.py``, ``routes/batch.py``)."""
    return (type(error), str(error), error.args, error.message, error.status, error.code,
            error.to_json(), error.headers(), getattr(error, "retry_after_s", None))


API_ERRORS: list[type[ApiError]] = sorted({ApiError, *subclasses(ApiError)},
                                          key=lambda c: c.__qualname__)


def test_every_api_error_is_found() -> None:
    names = {c.__name__ for c in API_ERRORS}
    assert CpuShareExceeded in API_ERRORS
    assert {"RuleTooCostly", "OutcomeUnknown", "TooManyStreams", "NotReady"} <= names


@pytest.mark.parametrize("cls", API_ERRORS, ids=lambda c: c.__name__)
def test_every_api_error_round_trips_with_its_extras(cls: type[ApiError]) -> None:
    error = example(cls)
    copy = pickle.loads(pickle.dumps(error))
    assert read(copy) == read(error)
    assert copy.to_json()["candidates"] == ["a", "b"]


@pytest.mark.parametrize("error", [
    ValueError("not an RFC 3339 timestamp with a time zone offset or Z"),
    UrlError("callbackUrl: not http(s)"), ConfigError("TRIGGER_X: bad"),
    StoreTimeout("cassandra timed out"),
], ids=lambda e: type(e).__name__)
def test_the_other_errors_round_trip(error: Exception) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), copy.args, str(copy)) == (type(error), error.args, str(error))
