"""The floor under the burst mode: how long 5,000 bare HTTP POSTs take on this machine, from one
Python process (aiohttp, 500 at once, keep-alive) to the benchmark's receiver process, with
no scheduler at all. A burst of 5,000 due at one instant cannot be delivered faster than
this by one dispatcher process, whatever the store does.

Usage::

    python bench/post_floor.py [--n 5000] [--concurrency 500] [--rounds 3]
                               [--out bench/results/post-floor.json]

Starts its own receiver (``bench/receiver.py``) on 127.0.0.1:9190, warms the connections with
500 POSTs, then times ``--rounds`` rounds of ``--n``; prints and saves each round's seconds.
Run it with the stack idle: the dispatcher shares these cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
PORT = 9190  # clear of the stack (the sweepers' metrics listen on 9111 and up)


async def _round(session: aiohttp.ClientSession, n: int, concurrency: int) -> float:
    slots = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with slots, session.post(f"http://127.0.0.1:{PORT}/cb/{i}", data=b'{"i":1}',
                                       headers={"X-Trigger-Id": str(i)}) as r:
            await r.read()
            assert r.status == 200, r.status

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    return time.perf_counter() - started


async def _wait_listening() -> None:
    for _ in range(100):
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", PORT)
        except OSError:
            await asyncio.sleep(0.1)
            continue
        writer.close()
        return
    raise SystemExit(f"the receiver did not listen on {PORT}")


async def measure(n: int, concurrency: int, rounds: int) -> list[float]:
    receiver = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "bench" / "receiver.py"), "--port", str(PORT))
    try:
        await _wait_listening()
        connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            await _round(session, min(n, concurrency), concurrency)  # connections, warm-up
            return [round(await _round(session, n, concurrency), 3) for _ in range(rounds)]
    finally:
        receiver.terminate()
        await asyncio.wait_for(receiver.wait(), 10)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=5000)
    p.add_argument("--concurrency", type=int, default=500)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "post-floor.json")
    args = p.parse_args()
    seconds = asyncio.run(measure(args.n, args.concurrency, args.rounds))
    result = {"posts": args.n, "concurrency": args.concurrency, "seconds": seconds,
              "posts_per_s": [round(args.n / s) for s in seconds]}
    print(f"{args.n} bare POSTs, {args.concurrency} at once, one process: "
          + ", ".join(f"{s:.2f} s" for s in seconds)
          + f" ({', '.join(str(r) for r in result['posts_per_s'])}/s)")
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
