"""``python -m tests.integration.dying_api``: the API, except that it SIGKILLs itself where a
keyed registration writes Redis' ``done`` entry, after the trigger row and its SQS message
and before the answer: exactly what a crash there leaves behind (the row, and the key's
``pending`` claim in Redis until it expires)."""

from __future__ import annotations

import os
import signal
from typing import Any

from trigger_service.__main__ import main
from trigger_service.adapters.redis.idempotency import RedisIdempotencyCache


async def _die(*_args: Any, **_kwargs: Any) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    RedisIdempotencyCache.put_done = _die  # type: ignore[method-assign]
    main()
