"""Fixtures of the SDK's unit tests (run by the root pytest configuration too)."""

from __future__ import annotations

import pytest

from mock_api import Script


@pytest.fixture
def script() -> Script:
    return Script()
