"""The image's tests (``make test-deploy``): they build the image from this checkout and run its
processes with podman against ``make up``'s stores, so ``make test`` skips them (they run only
with ``DEPLOY_TESTS=1``, which ``make test-deploy`` sets)."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("DEPLOY_TESTS") == "1":
        return
    skip = pytest.mark.skip(reason="the image's tests: make test-deploy (DEPLOY_TESTS=1)")
    for item in items:
        if item.get_closest_marker("deploy"):
            item.add_marker(skip)
