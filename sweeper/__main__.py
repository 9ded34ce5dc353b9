"""``python -m sweeper``: one sweeper process (run several; they share the shards)."""

from __future__ import annotations

from sweeper.sweeper import Sweeper
from trigger_service.platform.process import Component, main_for
from trigger_service.platform.wiring import Runtime


async def build(runtime: Runtime) -> Component:
    sweeper = Sweeper(runtime.settings, runtime.store, runtime.queue, runtime.lease,
                      runtime.clock, runtime.metrics, tracing=runtime.tracing)
    return Component({"sweep": sweeper.run}, status=lambda: {
        "owner": sweeper.owner, "shards": len(sweeper.owned), "pending": sweeper.pending},
        metrics_port=runtime.settings.sweep.metrics_port)


def main() -> None:
    main_for("sweeper", build)


if __name__ == "__main__":
    main()
