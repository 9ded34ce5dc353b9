"""The stack under test, driven only through the operators' entry points: ``infra/up.sh NAME``,
``infra/down.sh NAME``, ``infra/app.sh up|down``, the PID files under ``var/run`` and
``redis-cli``. Plus the run's own clean slate (keyspace, queues, callers file)."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import subprocess
import time
import warnings
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from bench.chaos.config import ROOT, VAR, RunConfig
from trigger_service.adapters import schema
from trigger_service.config.callers import hash_token
from trigger_service.config.sqs import SqsSettings
from trigger_service.config.stores import CassandraSettings

RUN_DIR = ROOT / "var" / "run"
SUPERVISOR_LOG = VAR / "supervisor.log"

# The service's processes as infra/app.sh names them (PID file name → python -m module),
# with config.TIER_ENV's two API processes and two dispatchers. kill_api kills "api": the
# other API process keeps the port served meanwhile; kill_dispatcher kills "dispatcher-1",
# whose claims "dispatcher-2" takes over (or its own successor, once restarted).
APPS = {
    "api": "trigger_service",
    "api-2": "trigger_service",
    "dispatcher-1": "dispatcher",
    "dispatcher-2": "dispatcher",
    "sweeper-1": "sweeper",
    "sweeper-2": "sweeper",
    "reconciler-1": "reconciler",
}


def now_ms() -> int:
    return time.time_ns() // 1_000_000  # the same clock as bench.chaos.receiver's


@dataclass
class Script:
    """One infra script run: exit code and seconds taken."""

    rc: int
    seconds: float


class Stack:
    def __init__(self, cfg: RunConfig, env: dict[str, str]) -> None:
        self.cfg = cfg
        self.env = env
        VAR.mkdir(parents=True, exist_ok=True)

    # --- infra scripts ---------------------------------------------------------------------

    def run(self, *args: str, extra: dict[str, str] | None = None, check: bool = True) -> int:
        """Run an infra script in the foreground; its output goes to the supervisor log."""
        with SUPERVISOR_LOG.open("a") as log:
            log.write(f"--- {time.strftime('%H:%M:%S')} {' '.join(args)}\n")
            log.flush()
            done = subprocess.run([str(ROOT / "infra" / args[0]), *args[1:]], cwd=ROOT,
                                  env={**self.env, **(extra or {})}, stdout=log, stderr=log,
                                  check=False)
        if check and done.returncode != 0:
            raise RuntimeError(f"infra/{' '.join(args)} failed ({done.returncode}); "
                               f"see {SUPERVISOR_LOG.relative_to(ROOT)}")
        return done.returncode

    async def arun(self, *args: str, extra: dict[str, str] | None = None) -> Script:
        """The same, without blocking the event loop."""
        t0 = time.monotonic()
        with SUPERVISOR_LOG.open("a") as log:
            log.write(f"--- {time.strftime('%H:%M:%S')} {' '.join(args)}\n")
            log.flush()
            proc = await asyncio.create_subprocess_exec(
                str(ROOT / "infra" / args[0]), *args[1:], cwd=ROOT,
                env={**self.env, **(extra or {})}, stdout=log, stderr=log)
            rc = await proc.wait()
        return Script(rc, time.monotonic() - t0)

    async def stream(self, *args: str) -> AsyncIterator[str]:
        """Run an infra script, yielding its output lines (also written to the supervisor
        log); raises ``RuntimeError`` when it fails."""
        with SUPERVISOR_LOG.open("a") as log:
            log.write(f"--- {time.strftime('%H:%M:%S')} {' '.join(args)}\n")
            log.flush()
            proc = await asyncio.create_subprocess_exec(
                str(ROOT / "infra" / args[0]), *args[1:], cwd=ROOT, env=self.env,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            assert proc.stdout is not None
            async for raw in proc.stdout:
                line = raw.decode(errors="replace")
                log.write(line)
                log.flush()
                yield line
            rc = await proc.wait()
        if rc != 0:
            raise RuntimeError(f"infra/{' '.join(args)} exited {rc}")

    async def redis_flushall(self) -> Script:
        t0 = time.monotonic()
        port = redis_port(self.env.get("TRIGGER_REDIS_URL", "redis://127.0.0.1:6379/0"))
        proc = await asyncio.create_subprocess_exec(
            "redis-cli", "-h", "127.0.0.1", "-p", str(port), "FLUSHALL",
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return Script(await proc.wait(), time.monotonic() - t0)

    # --- the service's processes -------------------------------------------------------------

    def pid_of(self, name: str) -> int | None:
        """The live pid of one of our app processes: PID file, command line ``-m <module>``
        and the process's cwd is this checkout (never anything we did not start)."""
        try:
            pid = int((RUN_DIR / f"{name}.pid").read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except (OSError, ValueError):
            return None
        if f"-m {APPS[name]}" not in cmdline or Path(cwd).resolve() != ROOT:
            return None
        if _is_zombie(pid):
            return None
        return pid

    def strays(self) -> list[str]:
        """Service processes of this checkout (cwd, ``python -m <module>``) that no PID file
        names: started twice, or by hand. They would skew a run (never killed) and outlive
        ``infra/app.sh down``."""
        known = {self.pid_of(name) for name in APPS}
        found = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) in known:
                continue
            try:
                if Path(os.readlink(proc / "cwd")).resolve() != ROOT:
                    continue
                args = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"-m" in args and any(m.encode() in args for m in set(APPS.values())):
                found.append(f"{proc.name}: {b' '.join(args).decode(errors='replace').strip()}")
        return found

    def dead_apps(self) -> list[str]:
        return [name for name in APPS if self.pid_of(name) is None]

    def started(self, name: str) -> bool:
        """The process's current log (app.sh rotates it at each start) says it is running."""
        try:
            text = (ROOT / "var" / "log" / f"{name}.log").read_text(errors="replace")
        except OSError:
            return False
        return f'"{APPS[name]}_started"' in text

    def keep_logs(self, names: list[str]) -> Path:
        """Copy the logs of processes that died to var/chaos/logs-<stamp>/ (numbered)."""
        folder = VAR / f"logs-{self.cfg.stamp}"
        folder.mkdir(parents=True, exist_ok=True)
        for name in names:
            log = ROOT / "var" / "log" / f"{name}.log"
            if log.exists():
                n = len(list(folder.glob(f"{name}.*.log"))) + 1
                shutil.copyfile(log, folder / f"{name}.{n}.log")
        return folder

    def sigkill(self, name: str) -> int | None:
        pid = self.pid_of(name)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
        return pid

    async def api_ready(self) -> bool:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", self.cfg.api_port), 1.0)
        except (OSError, TimeoutError):
            return False
        try:
            writer.write(b"GET /readyz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            line = await asyncio.wait_for(reader.readline(), 2.0)
            return b" 200 " in line
        except (OSError, TimeoutError):
            return False
        finally:
            writer.close()

    # --- a clean slate -------------------------------------------------------------------------

    def write_callers(self, token: str) -> None:
        self.cfg.callers_file.parent.mkdir(parents=True, exist_ok=True)
        self.cfg.callers_file.write_text(
            "# Written by `python -m bench.chaos` for its own run; rewritten every run.\n"
            "[callers.chaos]\n"
            f'token_sha256 = "{hash_token(token)}"\n'
            f'callback_prefixes = ["{self.cfg.receiver_prefix}"]\n'
            "max_concurrency = 500\n"
            # GET /v1/stats shows a caller only its own counters: the report reads them all.
            "[ops.chaos_viewer]\n"
            f'token_sha256 = "{hash_token(token + "-viewer")}"\n'
            'role = "viewer"\n')

    def cassandra_hosts(self) -> list[str]:
        raw = self.env.get("TRIGGER_CASSANDRA_HOSTS", "127.0.0.1")
        return [h.strip() for h in raw.split(",") if h.strip()]

    def cassandra_port(self) -> int:
        return int(self.env.get("TRIGGER_CASSANDRA_PORT", "9042"))

    def cassandra_settings(self, timeout_s: float) -> CassandraSettings:
        """The run's Cassandra (credentials and TLS included), for the service's own
        ``driver.connect``."""
        return CassandraSettings(
            hosts=tuple(self.cassandra_hosts()), port=self.cassandra_port(),
            local_dc=self.env.get("TRIGGER_CASSANDRA_LOCAL_DC", "datacenter1"),
            request_timeout_s=timeout_s,
            username=self.env.get("TRIGGER_CASSANDRA_USERNAME", ""),
            password=self.env.get("TRIGGER_CASSANDRA_PASSWORD", ""),
            tls_ca_file=self.env.get("TRIGGER_CASSANDRA_TLS_CA_FILE", ""))

    def ring_nodes(self) -> int:
        """How many Cassandra nodes are up in the ring (1 when peers cannot be read)."""
        from trigger_service.adapters.cassandra import driver

        logging.getLogger("cassandra").setLevel(logging.ERROR)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                cluster, session = driver.connect(self.cassandra_settings(5.0))
            except Exception:
                return 1
            try:
                peers = list(session.execute("SELECT peer FROM system.peers", timeout=10))
                return 1 + len(peers)
            except Exception:
                return 1
            finally:
                cluster.shutdown()

    def drop_keyspace(self) -> None:
        from trigger_service.adapters.cassandra import driver

        keyspace = self.env["TRIGGER_CASSANDRA_KEYSPACE"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cluster, session = driver.connect(self.cassandra_settings(10.0))
            try:
                session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=120)
            finally:
                cluster.shutdown()

    def delete_queues(self) -> None:
        import botocore.session

        client = botocore.session.get_session().create_client(
            "sqs", endpoint_url=self.env.get("TRIGGER_SQS_ENDPOINT_URL", "http://127.0.0.1:4566"),
            region_name=self.env.get("TRIGGER_SQS_REGION", "us-east-1"),
            aws_access_key_id=self.env.get("TRIGGER_SQS_ACCESS_KEY_ID", "test"),
            aws_secret_access_key=self.env.get("TRIGGER_SQS_SECRET_ACCESS_KEY", "test"))
        main = schema.sqs_main_queues(
            self.env["TRIGGER_SQS_QUEUE"],
            int(self.env.get("TRIGGER_SQS_LANES", SqsSettings().lanes)),
            int(self.env.get("TRIGGER_SQS_HIGH_LANES", SqsSettings().high_lanes)))
        for name in (*main, self.env["TRIGGER_SQS_DLQ"]):
            try:
                url = client.get_queue_url(QueueName=name)["QueueUrl"]
            except client.exceptions.QueueDoesNotExist:
                continue
            client.delete_queue(QueueUrl=url)


def redis_port(url: str) -> int:
    rest = url.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
    return int(rest.rsplit(":", 1)[1]) if ":" in rest else 6379


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"
