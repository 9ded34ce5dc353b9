"""Every name the service stores things under in SQS (queue names from settings; the main
queue's redrive policy moves a poison message to the redrive queue, which the reconciler
mirrors into the trigger and the DLQ; every queue keeps messages
``SQS_RETENTION_S``, SQS's maximum of 14 days):

- message body: JSON ``{"triggerId": str, "fireAtMs": int, "homeAtMs": int, "shard": int}``
  (the last two: where the trigger's row is, so the dispatcher reads it in one request; absent
  in an earlier release's body, or for a row of one). The dispatcher may receive it early
  (SQS delays are whole seconds) and holds it until ``fireAtMs``.
- DLQ body: the same JSON plus ``"reason"``. A redriven message is a main-queue body.
- The main queue is ``TRIGGER_SQS_LANES`` queues (``sqs_lane_queue``, ``core.lanes``), and
  ``TRIGGER_SQS_HIGH_LANES`` more for high-priority messages (``sqs_high_lane_queue``).
"""

from __future__ import annotations

from typing import Final

# --- SQS ---------------------------------------------------------------------------------
MSG_TRIGGER_ID: Final = "triggerId"
MSG_FIRE_AT_MS: Final = "fireAtMs"
MSG_HOME_AT_MS: Final = "homeAtMs"
MSG_SHARD: Final = "shard"
MSG_CALLER: Final = "caller"  # a hint for the dispatcher's fair shares; absent in old bodies
MSG_REASON: Final = "reason"
# "high" or "low"; absent for normal (and in an earlier release's body). A pack's members
# share one priority: the key is the pack's.
MSG_PRIORITY: Final = "priority"
# A pack (adapters.sqs_packs): its members, each [trigger id, fire time, home, shard, caller].
MSG_PACK: Final = "pack"
EVENTS_QUEUE_SUFFIX: Final = "-events"  # the main queue's name and this; one message per event
MSG_EVENT_FIELDS: Final = ("caller", "subscription", "type", "subject", "atMs", "data")  # JSON
SQS_ATTR_RECEIVE_COUNT: Final = "ApproximateReceiveCount"
SQS_ATTR_VISIBLE: Final = "ApproximateNumberOfMessages"
# SQS's caps on a delay and on a batch are core.time.timing's (the dispatcher and the
# sweeper plan with them, and they may not import adapters); these two only the adapter needs.
SQS_MAX_VISIBILITY_S: Final = 43_200
SQS_RETENTION_S: Final = 1_209_600


def sqs_lane_queue(queue: str, lane: int) -> str:  # lane 0 is the main queue itself
    return queue if lane == 0 else f"{queue}-lane-{lane}"


def sqs_high_lane_queue(queue: str, high_lane: int) -> str:
    """The queue of high lane ``high_lane`` (0 .. high lanes - 1; ``core.lanes``)."""
    return f"{queue}-high-{high_lane}"


def sqs_main_queues(queue: str, lanes: int, high_lanes: int) -> list[str]:
    """Every queue of the main queue, in lane order: the callers' lanes, then the high."""
    return ([sqs_lane_queue(queue, lane) for lane in range(max(1, lanes))]
            + [sqs_high_lane_queue(queue, i) for i in range(high_lanes)])
