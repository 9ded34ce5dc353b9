"""What one operation costs each dependency, in CPU-ms: the inputs of ``docs/capacity.md``.

Against the dependencies ``make up`` (or ``make test``) started, in a scratch keyspace and
scratch queues of their own: N operations of each kind, 64 in flight, and the CPU seconds the
Cassandra, LocalStack and Redis processes spent meanwhile (``bench/cpu.py``), minus what they
spent idle over as long (measured first), divided by N. The client's own CPU is reported too.

    .venv/bin/python -m bench.ops_cost [--n 5000]

Cassandra: a plain single-row write (the payload-sized row of a registration), a single-row
read, an LWT on an existing row (a claim), ``INSERT ... IF NOT EXISTS`` (the old keyed
registration), and a conditional ``BATCH`` of 10 and of 50 rows of one partition (one Paxos
round for all: a per-partition claim), counted per row. SQS: sends in
batches of 1 and of 10, receives of 10, deletes in batches of 10, per message. Redis: ``SET
NX GET`` and ``SET``. Writes ``bench/results/ops-cost.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import boto3
import redis
from cassandra.cluster import Cluster
from cassandra.query import BatchStatement, BatchType

from bench.common import RESULTS
from bench.cpu import CpuMeter

KEYSPACE = "ops_cost"
PAYLOAD = "x" * 300
IN_FLIGHT = 64
DEPS = ("cassandra", "localstack", "redis")


def measure(label: str, n_ops: int, run: Callable[[], None], idle_per_s: dict[str, float]
            ) -> dict[str, Any]:
    """Run ``run`` once; CPU-ms per operation for each dependency (idle subtracted)."""
    meter = CpuMeter(interval_s=0.2)
    meter.start()
    wall0, cpu0 = time.monotonic(), time.process_time()
    run()
    wall_s, client_s = time.monotonic() - wall0, time.process_time() - cpu0
    used = meter.stop()
    per_op = {d: round(max(0.0, used[d] - idle_per_s[d] * wall_s) * 1000 / n_ops, 4)
              for d in DEPS}
    row = {"op": label, "n": n_ops, "wall_s": round(wall_s, 2),
           "per_s": round(n_ops / wall_s, 1), "client_cpu_ms": round(client_s * 1000 / n_ops, 4),
           "cpu_ms": per_op}
    print(f"{label:38} {n_ops:>6} ops {row['per_s']:>9}/s  client {row['client_cpu_ms']:.3f}  "
          + "  ".join(f"{d} {v:.3f}" for d, v in per_op.items()), flush=True)
    return row


def idle(seconds: float = 5.0) -> dict[str, float]:
    meter = CpuMeter(interval_s=0.5)
    meter.start()
    time.sleep(seconds)
    used = meter.stop()
    return {d: used[d] / seconds for d in DEPS}


def pipelined(session: Any, calls: list[tuple[Any, list[Any]]]) -> None:
    """Execute ``calls`` with at most ``IN_FLIGHT`` outstanding."""
    futures: list[Any] = []
    for stmt, params in calls:
        futures.append(session.execute_async(stmt, params))
        if len(futures) >= IN_FLIGHT:
            for f in futures:
                f.result()
            futures = []
    for f in futures:
        f.result()


def cassandra_ops(n: int, idle_per_s: dict[str, float]) -> list[dict[str, Any]]:
    cluster = Cluster(["127.0.0.1"], protocol_version=4)
    s = cluster.connect()
    s.execute(f"CREATE KEYSPACE IF NOT EXISTS {KEYSPACE} WITH replication = "
              "{'class': 'SimpleStrategy', 'replication_factor': 1}")
    s.execute(f"CREATE TABLE IF NOT EXISTS {KEYSPACE}.rows (pk text, ck int, status text, "
              "claim text, payload text, PRIMARY KEY (pk, ck))")
    run_id = uuid.uuid4().hex[:8]
    write = s.prepare(f"UPDATE {KEYSPACE}.rows SET status = ?, payload = ? WHERE pk = ? AND ck = ?")
    read = s.prepare(f"SELECT status, claim, payload FROM {KEYSPACE}.rows WHERE pk = ? AND ck = ?")
    lwt = s.prepare(f"UPDATE {KEYSPACE}.rows SET status = ?, claim = ? WHERE pk = ? AND ck = ? "
                    "IF status = ?")
    insert_ne = s.prepare(f"INSERT INTO {KEYSPACE}.rows (pk, ck, status, payload) "
                          "VALUES (?, ?, ?, ?) IF NOT EXISTS")
    keys = [f"{run_id}-{i}" for i in range(n)]
    out = [
        measure("cassandra plain write (row)", n, lambda: pipelined(
            s, [(write, ["P", PAYLOAD, k, 0]) for k in keys]), idle_per_s),
        measure("cassandra read (row)", n, lambda: pipelined(
            s, [(read, [k, 0]) for k in keys]), idle_per_s),
        measure("cassandra LWT update (row)", n, lambda: pipelined(
            s, [(lwt, ["I", "c", k, 0, "P"]) for k in keys]), idle_per_s),
        measure("cassandra INSERT IF NOT EXISTS (row)", n, lambda: pipelined(
            s, [(insert_ne, [f"ne-{k}", 0, "P", PAYLOAD]) for k in keys]), idle_per_s),
    ]
    for size in (10, 50):
        parts = [f"{run_id}-b{size}-{p}" for p in range(n // size)]
        pipelined(s, [(write, ["P", PAYLOAD, p, c]) for p in parts for c in range(size)])
        batches = []
        for p in parts:
            b = BatchStatement(batch_type=BatchType.UNLOGGED)
            for c in range(size):
                b.add(lwt, ["I", "c", p, c, "P"])
            batches.append((b, None))
        row = measure(f"cassandra conditional batch of {size} (row)", len(parts) * size,
                      lambda batches=batches: pipelined(s, batches), idle_per_s)
        out.append(row)
    cluster.shutdown()
    return out


def sqs_ops(n: int, idle_per_s: dict[str, float]) -> list[dict[str, Any]]:
    sqs = boto3.client("sqs", endpoint_url="http://127.0.0.1:4566", region_name="us-east-1",
                       aws_access_key_id="test", aws_secret_access_key="test")
    url = sqs.create_queue(QueueName=f"ops-cost-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    body = json.dumps({"triggerId": "trg_" + "0" * 26, "fireAtMs": 1})

    async def many(calls: list[Callable[[], Any]]) -> None:
        sem = asyncio.Semaphore(16)

        async def one(c: Callable[[], Any]) -> None:
            async with sem:
                await asyncio.to_thread(c)

        await asyncio.gather(*(one(c) for c in calls))

    def run(calls: list[Callable[[], Any]]) -> Callable[[], None]:
        return lambda: asyncio.run(many(calls))

    def entries(k: int) -> list[dict[str, str]]:
        return [{"Id": str(i), "MessageBody": body} for i in range(k)]

    out = [
        measure("sqs send, 1 per call (message)", n // 5, run(
            [lambda: sqs.send_message(QueueUrl=url, MessageBody=body)] * (n // 5)), idle_per_s),
        measure("sqs send, 10 per call (message)", n, run(
            [lambda: sqs.send_message_batch(QueueUrl=url, Entries=entries(10))] * (n // 10)),
            idle_per_s),
    ]
    handles: list[str] = []

    def receive() -> None:
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0,
                                  VisibilityTimeout=300).get("Messages", [])
        handles.extend(m["ReceiptHandle"] for m in got)

    out.append(measure("sqs receive, 10 per call (message)", n, run([receive] * (n // 10)),
                       idle_per_s))
    chunks = [handles[i:i + 10] for i in range(0, len(handles), 10)]
    out.append(measure("sqs delete, 10 per call (message)", len(handles), run([
        (lambda c=c: sqs.delete_message_batch(QueueUrl=url, Entries=[
            {"Id": str(i), "ReceiptHandle": h} for i, h in enumerate(c)])) for c in chunks]),
        idle_per_s))
    sqs.delete_queue(QueueUrl=url)
    return out


def redis_ops(n: int, idle_per_s: dict[str, float]) -> list[dict[str, Any]]:
    r = redis.Redis(host="127.0.0.1", port=6379, db=7)
    run_id = uuid.uuid4().hex[:8]

    def set_nx_get() -> None:
        pipe = r.pipeline(transaction=False)
        for i in range(n):
            pipe.set(f"ops-cost:{run_id}:{i}", "pending", nx=True, get=True, px=60_000)
            if i % IN_FLIGHT == IN_FLIGHT - 1:
                pipe.execute()
        pipe.execute()

    return [measure("redis SET NX GET", n, set_nx_get, idle_per_s)]  # (keys expire in 60 s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=5000)
    args = ap.parse_args()
    idle_per_s = idle()
    print("idle CPU-s per s: " + "  ".join(f"{d} {v:.3f}" for d, v in idle_per_s.items()))
    rows = [*cassandra_ops(args.n, idle_per_s), *sqs_ops(args.n, idle_per_s),
            *redis_ops(args.n, idle_per_s)]
    out = {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "n": args.n,
           "idle_cpu_s_per_s": idle_per_s, "ops": rows}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "ops-cost.json").write_text(json.dumps(out, indent=1))
    print(f"wrote {RESULTS / 'ops-cost.json'}")


if __name__ == "__main__":
    main()
