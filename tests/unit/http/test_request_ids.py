"""Request ids: unique enough to find a request's log lines, in every worker process."""

from __future__ import annotations

import os
import re

from trigger_service.http.guards import new_request_id


def test_request_ids_are_sixteen_hex_digits_and_do_not_repeat() -> None:
    ids = [new_request_id() for _ in range(20_000)]
    assert all(re.fullmatch(r"[0-9a-f]{16}", i) for i in ids)
    assert len(set(ids)) == len(ids)


def test_a_forked_worker_does_not_repeat_its_parents_ids() -> None:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, to the parent
        os.write(write_end, new_request_id().encode())
        os._exit(0)
    os.close(write_end)
    ours = new_request_id()
    child = os.read(read_end, 64).decode()
    os.close(read_end)
    os.waitpid(pid, 0)
    assert len(child) == 16 and child != ours
