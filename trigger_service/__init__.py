"""Durable delayed-callback service: the HTTP API and the shared core."""
