"""Tags and labels: the limits, the filter and its terms (``core.tags``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tests.unit.app.support import CALLBACK, NOW_MS
from trigger_service.core.errors import InvalidRequest
from trigger_service.core.model import Route, Status, Trigger
from trigger_service.core.tags import (
    TriggerFilter,
    parse_filter,
    parse_labels,
    parse_tags,
    trigger_terms,
)


def trigger(**changes: Any) -> Trigger:
    return Trigger("trg_01HF7YAT00BAC73TC0CN0RCZ7Y", "orders", CALLBACK, "null", NOW_MS,
                   NOW_MS, 3, Route.DIRECT, **changes)


def test_tags_keep_their_order_and_labels_are_sorted_by_key() -> None:
    assert parse_tags(["b", "a-1", "x/y.z_9"]) == ("b", "a-1", "x/y.z_9")
    assert parse_tags(None) == ()
    assert parse_labels({"z": "1", "a": "two words"}) == (("a", "two words"), ("z", "1"))
    assert parse_labels(None) == ()


@pytest.mark.parametrize(("raw", "field"), [
    ("a", "tags"), (["ok", 3], "tags[1]"), ([""], "tags[0]"), (["-x"], "tags[0]"),
    (["a:b"], "tags[0]"), (["x" * 65], "tags[0]"), (["a", "a"], "tags[1]"),
    ([f"t{i}" for i in range(11)], "tags: at most 10"),
])
def test_bad_tags_are_refused_naming_the_field(raw: Any, field: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        parse_tags(raw)
    assert e.value.message.startswith(field)


@pytest.mark.parametrize(("raw", "field"), [
    (["a"], "labels: must"), ({"k": 1}, "labels.k"), ({"k:x": "v"}, "labels.k:x"),
    ({"k": ""}, "labels.k"), ({"k": "x" * 129}, "labels.k"), ({"k": "a\nb"}, "labels.k"),
    ({f"k{i}": "v" for i in range(11)}, "labels: at most 10"),
])
def test_bad_labels_are_refused_naming_the_field(raw: Any, field: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        parse_labels(raw)
    assert e.value.message.startswith(field)


def test_a_trigger_has_one_term_per_tag_and_label() -> None:
    t = trigger(tags=("a", "b"), labels=(("team", "growth"),))
    assert trigger_terms(t) == ("t:a", "t:b", "l:team=growth")
    assert trigger_terms(trigger()) == ()


def test_the_filter_drives_by_tag_then_label_then_recipient_and_checks_every_part() -> None:
    flt = parse_filter({"tag": "a", "label": "team:growth:eu", "status": "pending"})
    assert flt == TriggerFilter("a", ("team", "growth:eu"), None, Status.PENDING)
    assert flt.driving_term == "t:a"
    assert TriggerFilter(label=("k", "v")).driving_term == "l:k=v"
    assert TriggerFilter(recipient="r1").driving_term == "r:r1"
    assert TriggerFilter(status=Status.FIRED).driving_term is None
    t = trigger(tags=("a",), labels=(("team", "growth:eu"),))
    assert flt.matches(t)
    assert not flt.matches(trigger(tags=("a",)))
    assert not flt.matches(replace(t, status=Status.CANCELLED))
    assert not TriggerFilter(recipient="r1").matches(t)  # no trigger names one yet
    assert parse_filter(flt.to_json()) == flt


@pytest.mark.parametrize("raw", [{"tag": "a b"}, {"label": "novalue"}, {"label": ":v"},
                                 {"status": "sleeping"}, {"tag": 3}, {"recipient": ""}])
def test_bad_filters_are_refused(raw: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequest):
        parse_filter(raw)
