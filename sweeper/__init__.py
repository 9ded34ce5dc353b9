"""Sweeper: in-memory timing wheel and its driver for near-term timers."""
