"""Every error the service raises on purpose, in one tree.

::

    TriggerError                      base; never raised itself
    ├── ConfigError                   a bad TRIGGER_* variable or callers file (fails at start-up)
    ├── ApiError                      becomes {"error": code, "message": ...} with `status`
    │   ├── InvalidRequest            400 invalid_request (``field`` names the field)
    │   │   └── RuleTooCostly         an rrule or cron whose expansion ran out of its step
    │   │                             budget (core.time.rule_walk): refused, or its series ends
    │   ├── FireAtOutOfRange          400 fire_at_out_of_range (``field`` too)
    │   ├── Unauthorized              401 unauthorized
    │   ├── Forbidden                 403 forbidden (the token's role may not do this)
    │   ├── NotFound                  404 not_found
    │   ├── NotCancellable            409 not_cancellable
    │   ├── NotEditable               409 not_editable (finished, or an occurrence in flight)
    │   ├── NotRunnable               409 not_runnable (run now: the trigger finished, or
    │   │                             keeps changing state)
    │   ├── AlreadyReplayed           409 already_replayed (a dead letter replayed already)
    │   ├── TooManySubscriptions      409 too_many_subscriptions (a new event subscription past
    │   │                             the caller's ``TRIGGER_EVENTS_MAX_SUBSCRIPTIONS``)
    │   ├── NotReplayable             409 not_replayable (its trigger has expired)
    │   ├── PayloadTooLarge           413 payload_too_large
    │   ├── CallbackNotAllowed        422 callback_not_allowed
    │   ├── RecipientNotAllowed       422 recipient_not_allowed (an email domain or SMS country
    │   │                             the callers file does not list for the caller; ``field``)
    │   ├── RecipientNotFound         422 recipient_not_found (a trigger names a recipient
    │   │                             profile the caller does not have; ``field``)
    │   ├── IdempotencyKeyReused      422 idempotency_key_reused
    │   ├── NonexistentLocalTime      422 nonexistent_local_time (a DST gap under "skip")
    │   ├── ExpiresBeforeFire         422 expires_before_fire (``expiresAt`` before the first
    │   │                             fire time: nothing could ever be sent; ``field``)
    │   ├── NothingToReplay           422 nothing_to_replay (a bulk replay matching no letter)
    │   ├── NotBackfillable           422 not_backfillable (a backfill of a one-time trigger,
    │   │                             or of a range starting at or after now)
    │   ├── RateLimited               429 rate_limited (the caller's token bucket is empty;
    │   │                             ``Retry-After`` says when a token is back)
    │   ├── QuotaExceeded             429 quota_exceeded (the caller's max_pending is reached,
    │   │                             its unfinished bulk replay jobs are MAX_OPEN_JOBS, or a
    │   │                             channel's daily_budget is spent: ``Retry-After`` then)
    │   ├── TooManyStreams            429 too_many_streams (the caller's or the process's open
    │   │                             inbox streams are at their cap; ``Retry-After``)
    │   ├── TooManyConnections        429 too_many_connections (the caller holds its share of
    │   │                             the API process's connections; ``Retry-After``)
    │   ├── DependencyUnavailable     503 dependency_unavailable (an AdapterError reached the API)
    │   ├── OutcomeUnknown            503 outcome_unknown (a registration's write timed out, and
    │   │                             so did its retries: it may exist; ``triggerId`` names it)
    │   └── NotReady                  503 not_ready (a readiness check failed)
    └── StoreError / QueueError / CacheError
                                      a driver failure translated at an adapter's boundary
                                      (cassandra, botocore/aiobotocore, redis); the original is
                                      the ``__cause__``. Their text never reaches an answer.
        ├── CipherError               (a StoreError) a stored value cannot be sealed or
        │                             opened: unknown key id, tampered value, KMS down
        └── StoreTimeout              (a StoreError) no answer in time: a write may have
                                      applied, or may still
"""

from __future__ import annotations

from typing import Any, ClassVar


class TriggerError(Exception):
    """Base of every error raised on purpose by this project."""


class ConfigError(TriggerError):
    """A setting or the callers file is invalid; the message names the variable or key."""


class ApiError(TriggerError):
    """An error with an HTTP status and a stable machine-readable code."""

    status: int = 500
    code: str = "internal_error"

    def __init__(self, message: str, **extra: object) -> None:
        super().__init__(message)
        self.message = message
        self.extra = extra  # more context for the body, e.g. the status for not_cancellable

    def to_json(self) -> dict[str, object]:
        return {"error": self.code, "message": self.message, **self.extra}

    def headers(self) -> dict[str, str]:
        """Response headers that go with the error (none unless a subclass says)."""
        return {}

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled whole (a costly caller's parsing raises it in another process,
        # app/costly_pool.py): the default would call the subclass's __init__ with
        # ``args``, which fails or loses attributes where its signature differs
        # (``RateLimited``'s retry_after_s, ``OutcomeUnknown``'s trigger id); this copies
        # the attributes back without calling it.
        return _restored, (type(self), self.args), self.__dict__


def _restored(cls: type[ApiError], args: tuple[object, ...]) -> ApiError:
    """An ``ApiError`` being unpickled: ``args`` set, ``__init__`` not run (its attributes
    follow, the pickled ``__dict__``)."""
    error = cls.__new__(cls)
    error.args = args
    return error


class _FieldError(ApiError):
    """An error about one request field: the body names it in ``field`` (given, or the
    message's ``field: ...`` prefix)."""

    def __init__(self, message: str, **extra: object) -> None:
        if "field" not in extra:
            extra["field"] = message.split(": ", 1)[0] if ": " in message else None
        super().__init__(message, **extra)


class InvalidRequest(_FieldError):
    status, code = 400, "invalid_request"


class RuleTooCostly(InvalidRequest):
    """A recurrence rule yields nothing soon enough (or starts too far back) for its
    expansion's step budget; ``field`` is ``rrule`` or ``cron``. A request is refused with
    it; a series' step after a fire treats it as the end of the series."""


class FireAtOutOfRange(_FieldError):
    status, code = 400, "fire_at_out_of_range"


class Unauthorized(ApiError):
    status, code = 401, "unauthorized"


class Forbidden(ApiError):
    """Authenticated, but this token's role may not do this (an ops token creating a
    trigger, a viewer replaying a dead letter)."""

    status, code = 403, "forbidden"


class NotFound(ApiError):
    status, code = 404, "not_found"


class NotCancellable(ApiError):
    status, code = 409, "not_cancellable"


class NotEditable(ApiError):
    status, code = 409, "not_editable"


class NotRunnable(ApiError):
    status, code = 409, "not_runnable"


class AlreadyReplayed(ApiError):
    status, code = 409, "already_replayed"


class TooManySubscriptions(ApiError):
    status, code = 409, "too_many_subscriptions"


class NotReplayable(ApiError):
    status, code = 409, "not_replayable"


class PayloadTooLarge(ApiError):
    status, code = 413, "payload_too_large"


class UnsupportedMediaType(ApiError):
    status, code = 415, "unsupported_media_type"


class CallbackNotAllowed(ApiError):
    status, code = 422, "callback_not_allowed"


class RecipientNotAllowed(_FieldError):
    status, code = 422, "recipient_not_allowed"


class RecipientNotFound(_FieldError):
    status, code = 422, "recipient_not_found"


class IdempotencyKeyReused(ApiError):
    status, code = 422, "idempotency_key_reused"


class NonexistentLocalTime(_FieldError):
    status, code = 422, "nonexistent_local_time"


class ExpiresBeforeFire(_FieldError):
    status, code = 422, "expires_before_fire"


class NothingToReplay(ApiError):
    """A bulk replay whose filters match no open dead letter: no job is made (an empty one
    would only take a place among the caller's unfinished jobs)."""

    status, code = 422, "nothing_to_replay"


class NotBackfillable(ApiError):
    """A backfill (``app.backfills``) of a trigger that has no schedule of occurrences (a
    one-time trigger), or of a range that starts at or after now (nothing in it is past)."""

    status, code = 422, "not_backfillable"


class RateLimited(ApiError):
    status, code = 429, "rate_limited"
    # A refusal for going too fast is answered after a wait (http/guards.py); one that frees
    # a slot by being answered (a stream or connection cap) is answered at once.
    frees_a_slot: ClassVar[bool] = False

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}


class QuotaExceeded(ApiError):
    status, code = 429, "quota_exceeded"

    def __init__(self, message: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s  # when known: the quota is back by then

    def headers(self) -> dict[str, str]:
        return {} if self.retry_after_s is None else {"Retry-After": str(self.retry_after_s)}


class TooManyStreams(RateLimited):
    """An inbox stream over the caller's or the API process's cap; ``Retry-After`` is when
    the oldest of those streams reaches its maximum lifetime (one may end sooner)."""

    code = "too_many_streams"
    frees_a_slot = True


class TooManyConnections(RateLimited):
    """A caller's request on one more connection while it holds its share of the API
    process's connections (``TRIGGER_LIMITS_CALLER_CONNECTION_SHARE``); the connection is
    closed after the answer. Retry on one of its own connections, or once one is closed."""

    code = "too_many_connections"
    frees_a_slot = True


class DependencyUnavailable(ApiError):
    """A dependency failed while serving a request; nothing was accepted."""

    status, code = 503, "dependency_unavailable"

    @classmethod
    def for_request(cls, request_id: str) -> DependencyUnavailable:
        """The generic answer: the driver's own text can name nodes and addresses, and even
        which dependency failed says more than a caller needs; all of that goes to the log
        under ``request_id``, which the body and ``X-Request-Id`` carry."""
        return cls(f"a dependency is unavailable; try again (request id {request_id})")


class OutcomeUnknown(ApiError):
    """A registration's write did not say whether it applied, again and again (timeouts):
    the trigger may exist and may fire. Not ``DependencyUnavailable`` ("nothing was
    accepted"): a retry without the key would make a second trigger. ``triggerId`` is the
    id it has if it exists (a GET says)."""

    status, code = 503, "outcome_unknown"

    def __init__(self, trigger_id: str) -> None:
        super().__init__(
            "outcome unknown: the trigger may or may not have been registered; retry with the "
            "same Idempotency-Key (or GET triggerId to see whether it exists)",
            triggerId=trigger_id)


class NotReady(ApiError):
    status, code = 503, "not_ready"


class AdapterError(TriggerError):
    """A driver error translated at an adapter boundary; the driver's error is ``__cause__``."""

    dependency = "a dependency"


class StoreError(AdapterError):
    """Cassandra could not do what was asked (timeout, unavailable, bad query)."""

    dependency = "cassandra"


class StoreTimeout(StoreError):
    """Cassandra did not answer in time (the driver's timeout, or a coordinator's read or
    write timeout), or a write failed on some replicas only: a write's outcome is unknown,
    it may have applied or still apply. Retrying is safe only for an idempotent write."""


class QueueError(AdapterError):
    """SQS could not do what was asked."""

    dependency = "sqs"


class MessageNotInFlight(QueueError):
    """A visibility change for a message SQS no longer hides for this receipt: its
    visibility lapsed (it is shown again, perhaps received again already) or it was
    deleted. Nothing was changed; the message itself is not lost."""


class CacheError(AdapterError):
    """Redis could not do what was asked. Callers treat the cache as optional."""

    dependency = "redis"


class CipherError(StoreError):
    """A stored value could not be sealed or opened (``core.ports.crypto``): its key is not
    known here, it was altered, or the key service failed. A ``StoreError``, so every reader
    treats it as a store that cannot answer (retried, or 503 at the API)."""

    dependency = "encryption keys"
