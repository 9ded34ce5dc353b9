"""Which secrets sign during a rotation (pure)."""

from __future__ import annotations

from trigger_service.core.notify.signing import active_secrets, new_secret, retire_before

OVERLAP_MS = 86_400_000
FILE = ["whsec_file"]
MAX_LIVE = 3


def test_without_rotations_the_files_secrets_sign() -> None:
    assert active_secrets([], FILE, 0, OVERLAP_MS, MAX_LIVE) == FILE


def test_after_a_rotation_the_new_secret_leads_and_the_old_ones_sign_for_the_overlap() -> None:
    stored = [(1_000, "whsec_new")]
    assert active_secrets(stored, FILE, 1_000, OVERLAP_MS, MAX_LIVE) == ["whsec_new", "whsec_file"]
    assert active_secrets(stored, FILE, 1_000 + OVERLAP_MS, OVERLAP_MS, MAX_LIVE) == ["whsec_new"]


def test_two_rotations_each_older_secret_ends_an_overlap_after_the_next() -> None:
    stored = [(5_000, "whsec_c"), (1_000, "whsec_b")]
    now = 1_000 + OVERLAP_MS  # b was replaced at 5,000: still valid; the file's ended
    assert active_secrets(stored, FILE, now, OVERLAP_MS, MAX_LIVE) == ["whsec_c", "whsec_b"]
    assert active_secrets(stored, FILE, 5_000 + OVERLAP_MS, OVERLAP_MS, MAX_LIVE) == ["whsec_c"]


def test_at_most_max_live_secrets_sign_the_newest_and_the_rest_retire() -> None:
    """50 rotations within one overlap: 3 sign (3 signatures a delivery), 47 retire."""
    stored = [(1_000 + i, f"whsec_{i}") for i in reversed(range(50))]
    now = 2_000
    assert active_secrets(stored, FILE, now, OVERLAP_MS, MAX_LIVE) == [
        "whsec_49", "whsec_48", "whsec_47"]
    assert retire_before(stored, now, OVERLAP_MS, MAX_LIVE) == 1_047
    assert active_secrets(stored[:1], FILE, now, OVERLAP_MS, 1) == ["whsec_49"]


def test_secrets_retire_once_past_their_overlap_and_never_the_newest() -> None:
    stored = [(5_000, "whsec_c"), (1_000, "whsec_b")]
    assert retire_before(stored, 1_000 + OVERLAP_MS, OVERLAP_MS, MAX_LIVE) is None
    assert retire_before(stored, 5_000 + OVERLAP_MS, OVERLAP_MS, MAX_LIVE) == 5_000
    assert retire_before(stored[:1], 10 * OVERLAP_MS, OVERLAP_MS, MAX_LIVE) is None
    assert retire_before([], 0, OVERLAP_MS, MAX_LIVE) is None


def test_new_secrets_are_distinct_standard_webhooks_secrets() -> None:
    a, b = new_secret(), new_secret()
    assert a != b and a.startswith("whsec_") and len(a) == 6 + 44
