from __future__ import annotations

import pytest

from tests.unit.dispatcher.fakes import Env


@pytest.fixture
def env() -> Env:
    return Env()
