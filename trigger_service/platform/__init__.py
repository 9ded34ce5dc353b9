"""What every process shares: wiring the adapters, the supervisor, logs, metrics."""
