"""API errors as exceptions carrying the code, message, field and HTTP status."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from mock_api import Script, error
from trigger_client import (
    ApiError,
    Conflict,
    FireAtOutOfRange,
    Forbidden,
    InvalidRequest,
    NotFound,
    QuotaExceeded,
    RateLimited,
    RetryPolicy,
    ServerError,
    TriggerClient,
    Unauthorized,
    Unprocessable,
)
from trigger_client.errors import error_from_response

NO_RETRY = RetryPolicy(max_attempts=1)


@pytest.mark.parametrize(("response", "cls"), [
    (error(400, "invalid_request", field="delaySeconds"), InvalidRequest),
    (error(400, "fire_at_out_of_range", field="fireAt"), FireAtOutOfRange),
    (error(401, "unauthorized"), Unauthorized),
    (error(403, "forbidden"), Forbidden),
    (error(404, "not_found"), NotFound),
    (error(409, "not_cancellable", status="FIRED"), Conflict),
    (error(422, "idempotency_key_reused"), Unprocessable),
    (error(429, "quota_exceeded"), QuotaExceeded),
    (error(500, "internal_error"), ServerError),
    (httpx.Response(502, text="<html>bad gateway</html>"), ServerError),
    (httpx.Response(418, text="teapot"), ApiError),
])
def test_each_answer_maps_to_its_class(response: httpx.Response, cls: type[ApiError]) -> None:
    e = error_from_response(response)
    assert type(e) is cls and e.status == response.status_code


def test_an_error_carries_code_message_field_and_request_id(script: Script) -> None:
    script.answers = [error(400, "invalid_request", "delaySeconds: must be >= 0",
                            field="delaySeconds", headers={"X-Request-Id": "3f9c2a7d51e04b8c"})]
    with pytest.raises(InvalidRequest) as e:
        TriggerClient("http://api", transport=script.transport).triggers.create(delay_s=-1)
    assert (e.value.status, e.value.error, e.value.field, e.value.request_id) == (
        400, "invalid_request", "delaySeconds", "3f9c2a7d51e04b8c")
    assert e.value.message == "delaySeconds: must be >= 0" and e.value.candidates == ()


def test_conflict_names_the_trigger_status() -> None:
    e = error_from_response(error(409, "not_cancellable", status="FIRED"))
    assert isinstance(e, Conflict) and e.trigger_status == "FIRED"


def test_rate_limited_reads_retry_after_in_seconds_or_as_a_date(script: Script) -> None:
    e = error_from_response(error(429, "rate_limited", headers={"Retry-After": "4"}))
    assert isinstance(e, RateLimited) and e.retry_after_s == 4
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=120), usegmt=True)
    e = error_from_response(error(429, "rate_limited", headers={"Retry-After": when}))
    assert isinstance(e, RateLimited) and e.retry_after_s is not None
    assert 100 < e.retry_after_s <= 120
    script.answers = [error(429, "rate_limited", headers={"Retry-After": "1"})]
    with pytest.raises(RateLimited) as raised:
        TriggerClient("http://api", transport=script.transport, retry=NO_RETRY).triggers.get("x")
    assert raised.value.retry_after_s == 1
