"""Time: the clock port's implementations, instants and zones, recurrence rules and series,
catch-up, jitter, natural-language times and lag. Pure: no I/O."""
