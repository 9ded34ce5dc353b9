"""One caller's costliest time fields, shared by the real-stack test that one caller cannot
stall another (tests/integration/test_hostile_caller.py) and ``make bench``'s ``hostile``
mode (bench/hostile_bench.py): the ``when`` phrases, RRULEs that never match and impossible
crons that once held an API worker for seconds to minutes each. Data only: the bench
imports it without pytest or the integration fixtures."""

from __future__ import annotations

WORST_WHENS = ["in " + "1 hour " * 28 + "1", "1 hour " * 28 + "from",
               "in " + "1 hour, and " * 16 + "x", "in " + "2 mins " * 27 + "1 hour x"]
NEVER_RRULES = ["FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30",
                "FREQ=MINUTELY;INTERVAL=7;BYMONTH=4;BYMONTHDAY=31",
                "FREQ=SECONDLY;BYMONTH=2;BYMONTHDAY=31"]
IMPOSSIBLE_CRONS = ["0 0 30 2 *", "0 0 31 4,6,9,11 *"]
