"""Settings from TRIGGER_* variables and the callers file: read once, in main()."""
