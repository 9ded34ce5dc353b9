"""The ``api`` fixture (the app on in-memory fakes) for every HTTP unit test module."""

from tests.unit.http.test_routes import api  # noqa: F401
