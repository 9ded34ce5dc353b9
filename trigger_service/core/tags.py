"""Tags and labels: what a trigger may carry to be found again, the index terms
they make, and the filter of a listing or a bulk job. Pure: no I/O.

Limits (each breach is a 400 ``invalid_request`` naming the field):

- ``tags``: up to ``MAX_TAGS`` (10) distinct strings, each 1 to ``MAX_TAG_LEN`` (64)
  characters of ``A-Z a-z 0-9 _ . - /``, starting with a letter or digit. Case matters.
- ``labels``: up to ``MAX_LABELS`` (10) entries, key → value. A key is written like a tag
  (1 to 64 of the same characters), a value is 1 to ``MAX_LABEL_VALUE_LEN`` (128) printable
  characters. ``?label=key:value`` splits at the first ``:`` (a key has none).

An index term is ``t:<tag>``, ``l:<key>=<value>`` or ``r:<recipient>`` (a key has no ``=``,
so every term names one thing). Status is no term: it changes at every transition, so a
listing checks it on the row.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from trigger_service.core.errors import InvalidRequest
from trigger_service.core.model import Status, Trigger
from trigger_service.core.ports import TriggerCatalog
from trigger_service.core.ports.values import ListCursor, ListPage

MAX_TAGS = 10
MAX_LABELS = 10
MAX_TAG_LEN = 64
MAX_LABEL_VALUE_LEN = 128
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_./-]{0,63}")
_NAME_RULE = "1 to 64 characters of A-Z a-z 0-9 _ . - /, starting with a letter or digit"

Labels = tuple[tuple[str, str], ...]  # sorted by key: one value, one order, one equality


def parse_tags(raw: Any) -> tuple[str, ...]:
    """The ``tags`` field of a create body (or null): validated, in the order given."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise InvalidRequest("tags: must be an array of strings", field="tags")
    if len(raw) > MAX_TAGS:
        raise InvalidRequest(f"tags: at most {MAX_TAGS}", field="tags")
    seen: set[str] = set()
    for i, tag in enumerate(raw):
        if not isinstance(tag, str) or not _NAME_RE.fullmatch(tag):
            raise InvalidRequest(f"tags[{i}]: {_NAME_RULE}", field="tags")
        if tag in seen:
            raise InvalidRequest(f"tags[{i}]: {tag!r} given twice", field="tags")
        seen.add(tag)
    return tuple(raw)


def parse_labels(raw: Any) -> Labels:
    """The ``labels`` field of a create body (or null): an object of string values."""
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise InvalidRequest("labels: must be an object of strings", field="labels")
    if len(raw) > MAX_LABELS:
        raise InvalidRequest(f"labels: at most {MAX_LABELS}", field="labels")
    for key, value in raw.items():
        check_label(key, value, field=f"labels.{key}")
    return tuple(sorted(raw.items()))


def check_label(key: object, value: object, *, field: str) -> None:
    """Raise ``InvalidRequest`` (naming ``field``) unless ``key``/``value`` is a label."""
    if not isinstance(key, str) or not _NAME_RE.fullmatch(key):
        raise InvalidRequest(f"{field}: a label key is {_NAME_RULE}", field="labels")
    if (not isinstance(value, str) or not 1 <= len(value) <= MAX_LABEL_VALUE_LEN
            or not value.isprintable()):
        raise InvalidRequest(f"{field}: a label value is 1 to {MAX_LABEL_VALUE_LEN} "
                             "printable characters", field="labels")


def check_tag(tag: str, *, field: str) -> None:
    if not _NAME_RE.fullmatch(tag):
        raise InvalidRequest(f"{field}: {_NAME_RULE}", field=field)


def tag_term(tag: str) -> str:
    return f"t:{tag}"


def label_term(key: str, value: str) -> str:
    return f"l:{key}={value}"


def recipient_term(recipient: str) -> str:
    return f"r:{recipient}"


def trigger_terms(t: Trigger) -> tuple[str, ...]:
    """Every index term of ``t``: its tags, its labels, its recipient."""
    recipient = t.recipient
    return (*(tag_term(x) for x in t.tags), *(label_term(k, v) for k, v in t.labels),
            *((recipient_term(recipient),) if recipient else ()))


@dataclass(frozen=True, slots=True)
class TriggerFilter:
    """Which of a caller's triggers a listing or a bulk job means: each given part must
    match (and). One term drives the read (``driving_term``), the rest filter the rows."""

    tag: str | None = None
    label: tuple[str, str] | None = None
    recipient: str | None = None
    status: Status | None = None

    @property
    def driving_term(self) -> str | None:
        """The index term the read follows (None: no term given, only a status)."""
        if self.tag is not None:
            return tag_term(self.tag)
        if self.label is not None:
            return label_term(*self.label)
        return recipient_term(self.recipient) if self.recipient is not None else None

    def matches(self, t: Trigger) -> bool:
        """Does ``t`` (as read from its row, the truth) pass every part of the filter?"""
        return ((self.tag is None or self.tag in t.tags)
                and (self.label is None or self.label in t.labels)
                and (self.recipient is None or t.recipient == self.recipient)
                and (self.status is None or t.status is self.status))

    def to_json(self) -> dict[str, str]:
        out: dict[str, str] = {}
        if self.tag is not None:
            out["tag"] = self.tag
        if self.label is not None:
            out["label"] = f"{self.label[0]}:{self.label[1]}"
        if self.recipient is not None:
            out["recipient"] = self.recipient
        if self.status is not None:
            out["status"] = self.status.value
        return out


class FilteredListing(Protocol):
    """A caller's triggers by index term (the term index; ``CassandraStore``'s
    ``triggers_by_term``)."""

    async def list_by_filter(self, caller: str, flt: TriggerFilter, *, before: ListCursor,
                             limit: int) -> ListPage:
        """Up to ``limit`` of ``caller``'s triggers matching ``flt`` (which has a term),
        created before ``before`` ((0, created ms, id); ``NEWEST`` first), newest first, each
        checked against its row. One call reads at most 2,000 entries (the store's
        ``list_max_rows``), so a page may be short, even empty, with a cursor;
        ``next_cursor`` None once the term holds no more (or after one empty page).
        Raises ``StoreError``."""
        ...


class FilteredCatalog(TriggerCatalog, FilteredListing, Protocol):
    """The catalog the trigger use cases take: a ``TriggerCatalog`` that also lists by
    filter."""


def parse_filter(raw: Mapping[str, Any], *, prefix: str = "") -> TriggerFilter:
    """A filter from query parameters or a job's ``filter`` object (``tag``, ``label`` as
    ``key:value``, ``recipient``, ``status``); ``prefix`` goes before field names in errors.
    Raises ``InvalidRequest``."""
    tag = _text(raw, "tag", prefix)
    if tag is not None:
        check_tag(tag, field=f"{prefix}tag")
    label = None
    if (raw_label := _text(raw, "label", prefix)) is not None:
        key, sep, value = raw_label.partition(":")
        if not sep:
            raise InvalidRequest(f"{prefix}label: key:value", field=f"{prefix}label")
        check_label(key, value, field=f"{prefix}label")
        label = (key, value)
    recipient = _text(raw, "recipient", prefix)
    status = None
    if (raw_status := _text(raw, "status", prefix)) is not None:
        try:
            status = Status(raw_status.upper())
        except ValueError as e:
            raise InvalidRequest(f"{prefix}status: one of {', '.join(s.value for s in Status)}",
                                 field=f"{prefix}status") from e
    return TriggerFilter(tag, label, recipient, status)


def _text(raw: Mapping[str, Any], name: str, prefix: str) -> str | None:
    value = raw.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > 200:
        raise InvalidRequest(f"{prefix}{name}: a string of 1 to 200 characters",
                             field=f"{prefix}{name}")
    return value
