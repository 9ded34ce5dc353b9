"""One module (or package) per dependency, each implementing ports from ``core.ports`` and
translating its driver's errors; ``schema`` names everything they store; ``memory`` holds the
in-memory fakes the unit tests use."""
