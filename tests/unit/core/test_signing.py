"""Which secrets sign during a rotation (pure)."""

from __future__ import annotations

from trigger_service.core.notify.signing import active_secrets, new_secret

OVERLAP_MS = 86_400_000
FILE = ["whsec_file"]


def test_without_rotations_the_files_secrets_sign() -> None:
    assert active_secrets([], FILE, 0, OVERLAP_MS) == FILE


def test_after_a_rotation_the_new_secret_leads_and_the_old_ones_sign_for_the_overlap() -> None:
    stored = [(1_000, "whsec_new")]
    assert active_secrets(stored, FILE, 1_000, OVERLAP_MS) == ["whsec_new", "whsec_file"]
    assert active_secrets(stored, FILE, 1_000 + OVERLAP_MS, OVERLAP_MS) == ["whsec_new"]


def test_two_rotations_each_older_secret_ends_an_overlap_after_the_next() -> None:
    stored = [(5_000, "whsec_c"), (1_000, "whsec_b")]
    now = 1_000 + OVERLAP_MS  # b was replaced at 5,000: still valid; the file's ended
    assert active_secrets(stored, FILE, now, OVERLAP_MS) == ["whsec_c", "whsec_b"]
    assert active_secrets(stored, FILE, 5_000 + OVERLAP_MS, OVERLAP_MS) == ["whsec_c"]


def test_new_secrets_are_distinct_standard_webhooks_secrets() -> None:
    a, b = new_secret(), new_secret()
    assert a != b and a.startswith("whsec_") and len(a) == 6 + 44
