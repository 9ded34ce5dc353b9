"""``python -m dispatcher``: one dispatcher process."""

from __future__ import annotations

from dispatcher.caller_events import EventSender
from dispatcher.channels.caller_policy import CallerPolicyNotifiers, policies_of
from dispatcher.channels.inbox import InboxNotifier
from dispatcher.channels.notifiers import NotifierRouter
from dispatcher.channels.webhook import WebhookChannel
from dispatcher.dispatcher import Dispatcher
from dispatcher.flow_control import FlowGate
from dispatcher.ops_report import dispatcher_id
from dispatcher.secrets import SecretBook
from dispatcher.succession import Succession
from trigger_service.platform.caller_events import (
    AnnouncedOpsEvents,
    CallerEvents,
    SubscriptionBook,
)
from trigger_service.platform.process import Component, main_for
from trigger_service.platform.wiring import Runtime


async def build(runtime: Runtime) -> Component:
    d = runtime.settings.dispatch
    book = SecretBook(runtime.store, runtime.callers, runtime.clock,
                      d.secret_rotation_overlap_s, max_live=d.secret_max_live,
                      max_callers=d.signer_cache_size)
    channel = WebhookChannel(d.callback_timeout_s, clock=runtime.clock,
                             secrets_for=book.for_caller,
                             trusts=runtime.callers.names_callback_host,
                             max_signer_callers=d.signer_cache_size)
    await channel.open()
    s = runtime.settings
    inbox = InboxNotifier(runtime.store, runtime.inbox_bus, runtime.clock, runtime.metrics,
                          s.inbox.retention_days * 86_400)
    notifiers = NotifierRouter.from_settings(s, clock=runtime.clock, inbox=inbox)
    await notifiers.open()
    policed = CallerPolicyNotifiers(notifiers, policies_of(runtime.callers), runtime.budget,
                                    runtime.clock, runtime.metrics)
    # A flow-control place outlives its send by a margin before a dead process's is freed.
    flow = FlowGate(runtime.flow, runtime.callers, runtime.clock, runtime.metrics,
                    lease_ms=int(d.callback_timeout_s * 1000) + 5_000,
                    board=runtime.flow_board, source=dispatcher_id())
    # Claims name this process; its slot file proves its predecessor dead.
    succession = Succession(runtime.deaths, runtime.clock, runtime.metrics)
    succession.take_slot(d.slot_file)
    # Events to the callers: emitted by this dispatcher's outcomes, sent by its own loop.
    ev = s.events
    subs = SubscriptionBook(runtime.subscriptions, runtime.clock, ev.cache_s)
    events = CallerEvents(subs, runtime.event_queue, runtime.metrics, max_pending=ev.max_pending)
    sender = EventSender(ev, runtime.event_queue, subs, runtime.subscriptions, runtime.callers,
                         channel.post_event, runtime.clock, runtime.metrics,
                         failed_ttl_s=s.retention_s)
    dispatcher = Dispatcher(s, runtime.store, runtime.queue, channel, runtime.callers,
                            runtime.clock, runtime.metrics, board=runtime.board,
                            succession=succession,
                            notifiers=policed, recipients=runtime.recipients,
                            pauses=runtime.store,
                            endpoints=(runtime.endpoint_health,
                                       AnnouncedOpsEvents(runtime.ops_events, events)),
                            flow=flow, tracing=runtime.tracing, events=events)

    async def close() -> None:
        await channel.close()
        await notifiers.close()
        # The slot stays locked until the process exits: then it can send nothing more.

    return Component({"dispatch": dispatcher.run, "events": sender.run},
                     status=lambda: {"inflight": dispatcher.inflight},
                     close=close, grace_s=d.callback_timeout_s + 5,
                     metrics_port=d.metrics_port)


def main() -> None:
    main_for("dispatcher", build)


if __name__ == "__main__":
    main()
