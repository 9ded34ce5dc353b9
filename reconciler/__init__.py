"""Periodic safety net that re-injects leaked triggers."""
