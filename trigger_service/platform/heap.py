"""The garbage collector of a long-running service process.

Once a process has started (settings, the drivers' metadata, botocore's service models,
aiohttp: some hundred thousand objects that live as long as the process), every full
collection walks all of them again: tens of milliseconds in which the event loop runs
nothing, so every send due then starts late. ``settle_heap`` collects once, moves what is
alive into the permanent generation (``gc.freeze``: never walked again) and collects the
youngest generation less often, so the collections that remain walk only what was made
since and are short.
"""

from __future__ import annotations

import gc

# Allocations (net of frees) between two collections of the youngest generation; Python's
# default is 700. Cyclic garbage lives a little longer; collections come 20x less often.
GEN0_THRESHOLD = 15_000


def settle_heap() -> None:
    """Call once, when start-up is done and before serving."""
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, gen1, gen2)
