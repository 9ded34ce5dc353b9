"""settle_heap: what start-up made is frozen out of the collector's walks, and the youngest
generation is collected less often."""

from __future__ import annotations

import gc

from trigger_service.platform.heap import GEN0_THRESHOLD, settle_heap


def test_settle_heap_freezes_what_lives_and_raises_the_youngest_threshold() -> None:
    before = gc.get_threshold()
    try:
        settle_heap()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (GEN0_THRESHOLD, *before[1:])
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
