"""Every name the service stores things under in Cassandra (keyspace from
``TRIGGER_CASSANDRA_KEYSPACE``; versioned CQL in ``infra/cql/``):

- ``triggers_by_second``  one row per trigger: partition (``home_second``, ``row_shard``) =
                          ``core.model.row_partition`` of its home (``home_at_ms``: the fire
                          time it was created with: the row never moves) and shard; clustering
                          (``home_at_ms``, ``trigger_id``). A wave due in one second shares 8
                          partitions: the conditional writes of one partition in flight
                          together (claims, outcomes, cancels, edits) go as one BATCH, one
                          Paxos round (``adapters.cassandra.rows``). Created with a plain
                          UPDATE (no row marker: the terminal ``USING TTL`` rewrite makes the
                          whole row expire). Every later change is an LWT (Paxos timestamps);
                          creation cells are ``USING TIMESTAMP`` creation - ``CREATE_BACKDATE_MS``,
                          so no API host whose clock runs ahead can shadow a later transition
                          (a cancel answered 200 that fires anyway), and a repeated create
                          rewrites identical cells that lose to every transition.
                          A keyed registration's row (its id derived from caller and
                          Idempotency-Key) is also the key's record: ``request_hash`` and
                          ``registered_fire_at_ms`` (the fire time its key answers). Its
                          key's requests may write rows at several homes; one is live
                          (``triggers.creations``, ``adapters.homes``), the others are sealed
                          (a Paxos ``DELETE ... IF status = null`` before any row lands:
                          the creation's older cells stay invisible) or dropped.
                          A claim (IN_FLIGHT) carries its lease, ``claim_lease_ms``: a
                          duration on its claimer's monotonic clock, which a taker waits out
                          on its own (``dispatcher.claim_keeping``; null before 026).
                          ``priority``: ``high`` or ``low`` by name, no cell for normal
                          (null before 033 reads as normal).
                          Size: at 1,000 triggers a second, 125 rows per partition.
                          Lifetime: forever while live; ``TRIGGER_RETENTION_DAYS`` once
                          finished (a keyed row: at least its key's promise).
- ``triggers``            by ``trigger_id``: where the trigger's row is (``home_at_ms``,
                          ``shard``), written before the row (a pointer to no row reads as no
                          trigger: a crash between the two leaves nothing that fires), given
                          the row's TTL once the trigger is finished. A keyed creation also
                          adds (home, creation time, request hash) to ``creations`` (a set:
                          concurrent adds all stay) and reads them back; when a key's requests
                          wrote several homes, Paxos elects ``live_home`` (``UPDATE ... IF
                          live_home = null``). Triggers of
                          releases before ``triggers_by_second`` are whole rows here
                          (``status`` set, no home), moved through the state machine here
                          until they end (a series moves out at its next step).
                          Size: 1 row per partition (``creations``: one element, a few when
                          a key's requests raced or Redis forgot a key).
- ``trigger_buckets``     due index: partition (``bucket_minute``, ``shard``), clustering
                          (``fire_at``, ``trigger_id``); ``path`` says who enqueues it
                          (DIRECT: the API at registration; SWEEP: the sweeper). Immutable.
                          Size: 60,000 a minute over 64 shards, ~940 (bound: a minute's / 64).
                          Lifetime: fire time + retention + max retry span.
- ``triggers_by_created`` a caller's triggers newest first: partition (``caller``,
                          ``created_hour``, ``part`` = shard mod ``OPEN_PARTS``), clustering
                          (``created_at_ms``, ``trigger_id``) descending, with the row's home;
                          one entry per trigger, rewritten at a series' steps (its TTL: the
                          index TTL of the current occurrence). Never deleted: no tombstones.
                          Size: a caller's hour / 8 (450,000 at 1,000 a second).
- ``created_hours``       (``caller``) → the ``created_hour`` values with entries, newest first.
- ``triggers_by_caller``, ``caller_months``: the fire-month listing of earlier releases, read
                          by the backfill only.
- ``open_triggers``       open (PENDING, IN_FLIGHT) triggers of a caller by fire time: partition
                          (``caller``, ``fire_hour``, ``part`` = shard mod ``OPEN_PARTS``),
                          clustering (``fire_at_ms``, ``trigger_id``), with the row's home.
                          Written with the other entries at each fire time a trigger takes,
                          deleted once it leaves it or finishes; readers check each against
                          the row. Size: one caller at 1,000/s all due in one hour: 450,000
                          per partition (spread over a day: 19,000). gc_grace 3 h (see 014).
                          A read starts at its partition's mark (``open_marks``), not at the
                          hour's start: it never scans the tombstones of the finished ones
                          before it (Cassandra fails a read past 100,000).
- ``open_hours``          (``caller``) → ``fire_hour`` values that may hold entries; a reader
                          that finds one empty forgets it (a backdated delete).
- ``open_marks``          per ``open_triggers`` partition: the static ``mark`` (fire time, id)
                          where readers start it, and the entries still there below the mark,
                          *held* (clustering (``fire_at_ms``, ``trigger_id``), with the row's
                          home). Moved up by a finisher's probe (one in 64) or a reader,
                          never past now - ``OPEN_MARK_LAG_MS``; a mark and the holds it needs
                          go in one single-partition batch (a lower mark that wins the race
                          is right too). An entry whose fire time is more than
                          ``OPEN_EARLY_MS`` before its write is held by its writer (it may
                          lie below a mark: ``adapters.cassandra.open_marks``). Holds whose
                          triggers finished or moved go a run at a time (a range delete
                          at now - ``OPEN_MARK_LAG_MS``), once a reader finds them so.
                          Size: ≤ ``HOLD_MAX`` (64) held per partition, plus the entries
                          written into the past. Lifetime: the mark ``OPEN_MARK_TTL_S`` from
                          its last move, a held entry its entry's TTL. gc_grace 3 h (see 025).
- ``triggers_by_term``    a caller's triggers by term (``core.tags``: ``t:<tag>``,
                          ``l:<key>=<value>``, ``r:<recipient>``), newest created first:
                          partition (``caller``, ``term``, ``part`` = shard mod ``TERM_PARTS``),
                          clustering (``created_at_ms``, ``trigger_id``) descending, with the
                          row's home. Written with the other entries (TTL: the creation
                          index's); never deleted: readers check each against the row.
                          Size: a term's live triggers / 16 (a tag on 1.6 M live triggers: 100,000).
- ``trigger_jobs``, ``trigger_job_items``, ``trigger_jobs_open``: jobs over the triggers a
                          filter matches (``app.trigger_jobs``), shaped as the replay jobs: the
                          job (caller, action, filter JSON), its items (trigger id → state,
                          fixed at creation, ≤ ``MAX_JOB_ITEMS`` 10,000 per partition), the
                          unfinished ones under ``replay_open_key`` / ``replay_caller_key``.
                          A backfill job (action ``backfill``, ``app.backfills``) keeps its
                          series, range and pace in ``filter`` (``{"backfill": {...}}``) and
                          its occurrences as item ids (``<index, 6 digits>:<scheduled ms>``,
                          ≤ ``MAX_BACKFILL_OCCURRENCES`` 1,000), no column of its own.
- ``signing_secrets``     (``caller``) → rotated secrets, sealed, by ``created_at_ms`` (IF NOT
                          EXISTS: a taken ms moves to the next), newest first (a handful).
- ``paused_callers``      (``k`` = ``PAUSED_CALLERS_KEY``) → the callers operators paused, by
                          ``caller``, with ``paused_at_ms``; read whole every 2 s by each
                          dispatcher. Size: a handful of rows in one partition. Forever.
- ``debounce_heads``      (``caller``, ``debounce_key``) → its head's ``started_at_ms`` (the
                          trigger id derives from it), ``max_wait_s``, ``expires_at_ms`` (its
                          TTL's end, so a trailing request renews it only when its trigger
                          may outlive it; unset on rows before 034); LWTs only; lives as its
                          trigger's row may. 1 row per partition.
- ``endpoint_health_by_caller`` (``caller``) → per ``origin`` a failing or disabled endpoint;
                          read in pages every few s by each dispatcher; deleted by a success
                          or an enable, else expires ``TRIGGER_ENDPOINT_HEALTH_RECORD_TTL_S``
                          after its last write. Size: origins failing, at most
                          ``TRIGGER_ENDPOINT_HEALTH_MAX_PER_CALLER`` a caller.
- ``endpoint_holds``      ((``caller``, ``origin``)) → triggers held for the disabled endpoint
                          by (``due_at_ms``, ``trigger_id``): written before the hold's LWT,
                          read (and pruned) by an enable's replay from ``replaySince``.
                          ``TRIGGER_RETENTION_DAYS`` from the hold. Size: the origin's holds
                          in that time (one per one-time trigger; a series: per occurrence).
- ``event_subscriptions`` (``caller``) → by ``name``, ≤ ``TRIGGER_EVENTS_MAX_SUBSCRIPTIONS``
  rows, until deleted, and the static ``creations`` (034): the partition is the caller's one
  place of agreement on the cap. A creation is a conditional batch of its row and
  ``creations`` moved from the value read with the rows it counted, so two creations counted
  against the same rows cannot both apply; a replacement (``IF EXISTS``) and a delete (``IF
  EXISTS``) leave it, since neither adds a row. Unset on partitions before 034 (null is the
  first value read); ``event_failures`` ((``caller``, ``subscription``)) → its failed events
  newest first, ``TRIGGER_RETENTION_DAYS``. Events go on the SQS queue ``EVENTS_QUEUE_SUFFIX``.
- ``endpoint_health``     (``k`` = ``ENDPOINT_HEALTH_KEY``) → the same records as written by
                          releases before 027; emptied into ``endpoint_health_by_caller`` by
                          the dispatchers' first reads, then only read at process start.
- ``zoned_triggers``      (``tzdata_version``, ``shard``) → ids of wall-clock triggers whose
                          next occurrence was resolved with that zone-rules release; with
                          ``zoned_versions`` (the releases in use) it drives the rezone pass.
                          Size: live wall-clock triggers / 64 (15,600 per million live);
                          ``zoned_versions``: a few releases (written once a day a process).
- ``idempotency``         (``caller``, ``idem_key``) → the key records of releases before keyed
                          rows (request hash, trigger id, the request). Only read now; empty
                          (and droppable) ``TRIGGER_API_MAX_FIRE_AHEAD_DAYS`` + the idempotency
                          retention after the last such release stopped. 1 row per partition.
- ``sweep_cursors``       per (sweeper group, shard): every SWEEP trigger due at or before
                          ``promoted_until_ms`` has been handed to SQS (or found finished).
                          Written by the shard's sweeper; a regression only re-promotes
                          (deduped by the claim LWT). Forever; a partition per group, 64 rows.
- ``service_counters``    name → ``value counter`` over every process and restart (``GET
                          /v1/stats``): each process adds its deltas every few seconds. 1 row.
- ``attempts``            (``trigger_id``) → every delivery attempt by (``occurrence_id``,
                          ``started_at_ms``, ``attempt``). Lifetime: retention from the attempt.
                          Size: ≤ 6 (``TRIGGER_DISPATCH_MAX_ATTEMPTS``) for a one-time trigger; a
                          series' occurrences in retention times 6 (a minutely one: 260,000).
- ``attempts_recent``     (``trigger_id``, ``slot``) → recent attempts, a ring of
                          ``TRIGGER_ATTEMPTS_KEPT`` (100) slots (``core.recent_attempts``),
                          written with the ``attempts`` line, read whole; retention.
- ``dead_letters``        (``id`` = occurrence id) → the dead letter, open/replayed/purged.
- ``dead_letters_by_day`` (``scope``, ``day``) → open dead letters newest first, under the
                          caller and under one operators' bucket ``*:<n>`` (n: a hash of the
                          id; ``scope_all_bucket``). The operators' listing merges a day's
                          ``SCOPES_ALL``: the buckets and the ``*`` that releases before them
                          wrote (no longer written nor deleted: a resolved letter there is
                          hidden by its record; its read can go a retention after them).
                          Size: 1% dying is 864,000 a day: 54,000 per bucket, a caller's up
                          to all (its deaths of a day). Both: retention from the death.
- ``replay_jobs``, ``replay_job_items``: bulk replay jobs and their items (fixed at creation).
                          Size: ≤ ``MAX_BULK`` (10,000) items per job.
- ``replay_jobs_open``    (``k``) → unfinished job ids, under ``replay_open_key`` (``open:<n>``,
                          polled one bucket a round; releases before the buckets used
                          ``open``, polled too, its jobs moved) and ``replay_caller_key``
                          (``caller:<name>``: counted against ``MAX_OPEN_JOBS``, 10).
                          Size: ≤ 10 live per caller, plus 10 days' finished as tombstones.
- ``inbox_messages``      (``caller``, ``recipient``) → messages by ``message_id`` (a ULID from
                          the fire time), newest first; ``INSERT IF NOT EXISTS``, so a
                          redelivery changes nothing; ``read_at_ms`` set once (an LWT);
                          deletion sets ``deleted_at_ms`` (the marker keeps a redelivery out).
                          Lifetime: ``TRIGGER_INBOX_RETENTION_DAYS`` from the store.
                          Size: a recipient's messages in that retention (not the rate's).
- ``recipients``          (``caller``, ``part`` = crc32(id) mod ``RECIPIENT_PARTS``) → each
                          recipient profile by ``recipient_id`` (its JSON sealed like a payload
                          when ``TRIGGER_ENCRYPTION_PAYLOADS``). Size: a caller's people / 16.
- ``recipient_triggers``  (``caller``, ``recipient_id``) → that person's triggers by id, with
                          their home and shard; the index TTL of the trigger. Size: one
                          person's reminders (a series once) in that TTL, finished ones
                          included: tens to a few thousand, unbounded (read a page at a time).
- ``recipient_zone_changes`` (``k``) → (``caller``, ``recipient_id``, ``changed_at_ms``):
                          zone changes whose triggers are not all re-resolved yet. Size: a few
                          seconds' changes (deleted once done).
- ``audit_log``           (``scope``, ``hour``, ``part``) → audit entries newest first by
                          (``at_ms``, ``id``): scope a caller (its own) or ``*`` (all, for
                          operators); part crc32(id) mod its ``AUDIT_PARTS``. TTL
                          ``TRIGGER_AUDIT_RETENTION_DAYS``. Size: 1,000 a second is 3.6 M an
                          hour: 56,000 per ``*`` part (64); a caller's: its hour / 8.
- ``audit_hours``         (``scope``) → its ``hour``s with entries: 24 a day (2,160 at 90).
- ``schema_migrations``, ``schema_lock``: applied CQL versions; (name) → owner with a TTL,
                          held by the one migrator running.

"""

from __future__ import annotations

import zlib
from typing import Final

# --- Cassandra ---------------------------------------------------------------------------
TABLE_TRIGGERS: Final = "triggers"
TABLE_BUCKETS: Final = "trigger_buckets"
TABLE_BY_SECOND: Final = "triggers_by_second"
TABLE_BY_CALLER: Final = "triggers_by_caller"
TABLE_CALLER_MONTHS: Final = "caller_months"
TABLE_BY_CREATED: Final = "triggers_by_created"
TABLE_CREATED_HOURS: Final = "created_hours"
COL_CREATED_HOUR: Final = "created_hour"
TABLE_OPEN: Final = "open_triggers"
TABLE_OPEN_HOURS: Final = "open_hours"
COL_FIRE_HOUR: Final = "fire_hour"
COL_PART: Final = "part"
OPEN_PARTS: Final = 8  # per (caller, hour) of both indexes: a page reads them all at once
# Writers rewrite an open_hours row at least this often while writing entries into its hour;
# a reader's delete of an empty hour is backdated by more (and a clock margin), so it never
# shadows a row written for an entry the reader did not see yet.
OPEN_HOUR_REWRITE_MS: Final = 60_000
OPEN_HOUR_FORGET_BACKDATE_MS: Final = 2 * OPEN_HOUR_REWRITE_MS + 30_000
# open_marks (``adapters.cassandra.open_marks``). An entry write, and the row write or LWT
# it comes before, are done before any host's clock reads the entry's timestamp +
# OPEN_WRITE_DELAY_MS (a request's time and clock skew, with a wide margin). A write whose
# fire time lies more than OPEN_EARLY_MS before its timestamp holds its entry itself; no mark
# is set past now - OPEN_MARK_LAG_MS. So an entry written below a mark either holds itself
# or was there, and seen, when the mark was set.
TABLE_OPEN_MARKS: Final = "open_marks"
COL_MARK: Final = "mark"
COL_WRITTEN_US: Final = "written_us"  # the alias of WRITETIME(shard) in reads of held entries
OPEN_WRITE_DELAY_MS: Final = 120_000
OPEN_EARLY_MS: Final = 60_000
OPEN_MARK_LAG_MS: Final = OPEN_WRITE_DELAY_MS + OPEN_EARLY_MS
# Long past when compaction drops the tombstones a mark skips (gc_grace 3 h, then a
# single-SSTable tombstone compaction within a day): a mark that expired is no loss.
OPEN_MARK_TTL_S: Final = 7 * 86_400
TABLE_SECRETS: Final = "signing_secrets"
TABLE_PAUSED_CALLERS: Final = "paused_callers"
PAUSED_CALLERS_KEY: Final = "all"
COL_PAUSED_AT_MS: Final = "paused_at_ms"
TABLE_DEBOUNCE_HEADS: Final = "debounce_heads"
COL_DEBOUNCE_KEY: Final = "debounce_key"
COL_MAX_WAIT_S: Final = "max_wait_s"
COL_HEAD_EXPIRES_AT_MS: Final = "expires_at_ms"  # debounce_heads: its TTL's end
TABLE_ENDPOINT_HEALTH: Final = "endpoint_health_by_caller"
TABLE_ENDPOINT_HEALTH_LEGACY: Final = "endpoint_health"
ENDPOINT_HEALTH_KEY: Final = "all"  # the legacy table's one partition
ENDPOINT_HEALTH_COLUMNS: Final = ("first_failure_at_ms", "last_failure_at_ms", "failures",
                                  "last_error", "disabled_at_ms", "notified_at_ms")
COL_ORIGIN: Final = "origin"
TABLE_ENDPOINT_HOLDS: Final = "endpoint_holds"
COL_DUE_AT_MS: Final = "due_at_ms"
COL_SECRET: Final = "secret"
SEALED_COLUMNS: Final = ("payload", "plan")  # of triggers, sealed with TRIGGER_ENCRYPTION_PAYLOADS
TABLE_EVENT_SUBSCRIPTIONS: Final = "event_subscriptions"  # (caller), name, SUBSCRIPTION_COLUMNS
SUBSCRIPTION_COLUMNS: Final = ("url", "events", "created_at_ms", "updated_at_ms")
COL_SUBSCRIPTION_CREATIONS: Final = "creations"  # event_subscriptions: static, 034
TABLE_EVENT_FAILURES: Final = "event_failures"  # (caller, subscription), EVENT_FAILURE_COLUMNS
EVENT_FAILURE_COLUMNS: Final = ("subscription", "failed_at_ms", "event_id", "event_type",
                                "event_at_ms", "attempts", "last_error", "data")
TABLE_ZONED: Final = "zoned_triggers"
TABLE_ZONED_VERSIONS: Final = "zoned_versions"
COL_TZDATA_VERSION: Final = "tzdata_version"
COL_K: Final = "k"
ZONED_VERSIONS_KEY: Final = "all"
TABLE_IDEMPOTENCY: Final = "idempotency"
TABLE_ATTEMPTS: Final = "attempts"
TABLE_ATTEMPTS_RECENT: Final = "attempts_recent"
TABLE_DEAD_LETTERS: Final = "dead_letters"
TABLE_DEAD_LETTERS_BY_DAY: Final = "dead_letters_by_day"
TABLE_REPLAY_JOBS: Final = "replay_jobs"
TABLE_REPLAY_ITEMS: Final = "replay_job_items"
TABLE_REPLAY_OPEN: Final = "replay_jobs_open"
TABLE_BY_TERM: Final = "triggers_by_term"
COL_TERM: Final = "term"
TERM_PARTS: Final = 16  # per (caller, term): a page reads them all at once
TABLE_TRIGGER_JOBS: Final = "trigger_jobs"
TABLE_TRIGGER_JOB_ITEMS: Final = "trigger_job_items"
TABLE_TRIGGER_JOBS_OPEN: Final = "trigger_jobs_open"
COL_ACTION: Final = "action"
COL_FILTER: Final = "filter"
COL_POLICY: Final = "policy"
# attempts
COL_OCCURRENCE_ID: Final = "occurrence_id"
COL_STARTED_AT_MS: Final = "started_at_ms"
COL_ATTEMPT: Final = "attempt"
COL_DURATION_MS: Final = "duration_ms"
COL_STATUS_CODE: Final = "status_code"
COL_ERROR: Final = "error"
COL_RESPONSE_EXCERPT: Final = "response_excerpt"
COL_DISPATCHER: Final = "dispatcher"
# attempts_recent (and the attempts columns above)
COL_SLOT: Final = "slot"
COL_CHANNEL: Final = "channel"
COL_OUTCOME: Final = "outcome"
# dead_letters, dead_letters_by_day: the columns after the key, in binding order
COL_ID: Final = "id"
COL_SCOPE: Final = "scope"
COL_DAY: Final = "day"
COL_STATE: Final = "state"
COL_RESOLVED_AT_MS: Final = "resolved_at_ms"
DEAD_LETTER_COLUMNS: Final = ("trigger_id", "caller", "reason", "last_error", "attempt_count",
                               "dead_at_ms", "fire_at_ms", "callback_url")
SCOPE_ALL: Final = "*"  # the operators' scope of releases before the buckets (read only)
# One partition a day that every caller writes would hold the whole service's failures on one
# replica set; 16 keeps a bucket near 54,000 rows a day at 1,000 registrations/s with 1%
# dying (under Cassandra's ~100,000). An operators' listing reads every bucket of a day.
DEAD_LETTER_ALL_BUCKETS: Final = 16
SCOPES_ALL: Final = (*(f"{SCOPE_ALL}:{n}" for n in range(DEAD_LETTER_ALL_BUCKETS)), SCOPE_ALL)
AUDIT_TABLES: Final = ("audit_log", "audit_hours")  # its key, then the columns:
AUDIT_COLUMNS: Final = ("scope", "hour", "part", "at_ms", "id", "actor", "action", "target",
                        "request_id", "outcome", "caller")
AUDIT_PARTS: Final = (64, 8)  # an hour's parts: the operators' scope (*), a caller's
# replay_jobs, replay_job_items, replay_jobs_open
COL_JOB_ID: Final = "job_id"
COL_QUERY: Final = "query"
COL_TOTAL: Final = "total"
COL_STATUS: Final = "status"
COL_LEASE_UNTIL_MS: Final = "lease_until_ms"
COL_DEAD_AT_MS: Final = "dead_at_ms"
REPLAY_OPEN_KEY: Final = "open"  # the one key of releases before the buckets (read only)
# A process polls one bucket a round (``POLL_S``): a job whose runner died is found within 9
# rounds (18 s) after its lease ends, each round reading an eighth of the open-job rows.
REPLAY_OPEN_BUCKETS: Final = 8
REPLAY_OPEN_KEYS: Final = (*(f"{REPLAY_OPEN_KEY}:{n}" for n in range(REPLAY_OPEN_BUCKETS)),
                           REPLAY_OPEN_KEY)
# inbox_messages: the key, then the columns in the order the statements bind them
TABLE_INBOX: Final = "inbox_messages"
COL_RECIPIENT: Final = "recipient"
COL_MESSAGE_ID: Final = "message_id"
INBOX_COLUMNS: Final = ("trigger_id", "occurrence_id", "title", "body", "data", "created_at_ms")
INBOX_SEALED_COLUMNS: Final = ("title", "body", "data")  # with TRIGGER_ENCRYPTION_PAYLOADS
COL_READ_AT_MS: Final = "read_at_ms"
COL_DELETED_AT_MS: Final = "deleted_at_ms"
COL_TTL: Final = "ttl_s"  # the alias of TTL(title) in reads
TABLE_MIGRATIONS: Final = "schema_migrations"
# Taken with INSERT IF NOT EXISTS and a TTL (a migrator that died does not block for ever).
TABLE_SCHEMA_LOCK: Final = "schema_lock"
SCHEMA_LOCK_NAME: Final = "migrate"
TABLE_SWEEP_CURSORS: Final = "sweep_cursors"
TABLE_COUNTERS: Final = "service_counters"
# triggers: the key, then every column in the order the statements bind them.
COL_TRIGGER_ID: Final = "trigger_id"
COL_PRIORITY: Final = "priority"
TRIGGER_COLUMNS: Final = (
    "caller", "callback_url", "payload", "fire_at_ms", "created_at_ms", "shard", "path",
    "status", "attempts", "last_error", "fired_at_ms", "claim_id", "claimed_at_ms",
    "next_attempt_at_ms", "idem_key", "schedule", "occurrence_index", "occurrence_second",
    "occurrence_seq", "occurrences_fired", "tzdata_version", "revision", "snoozed_from",
    "plan", "channel_states", "acked_seq", "request_hash", "registered_fire_at_ms",
    "jitter_s",
    "tags", "labels",  # JSON: an array, an object; unset when empty
    "recipient", "recipient_zone",
    "expires_at_ms", "max_lateness_s",  # deadlines: unset without one
    "flow_control",  # JSON (core.flow); unset without
    "trace_parent",  # W3C traceparent (core.trace_context); unset without
    # A claim's lease in ms (dispatcher.claim_keeping): a duration on the claimer's
    # monotonic clock; unset on rows never claimed since the column came (026).
    "claim_lease_ms",
    # core.model.Priority by name ("high", "low"); unset for normal, so the rows of
    # releases before the column (033) read as normal. A name, not a rank: the order is
    # the code's to change without rewriting rows.
    COL_PRIORITY,
)
# recipients, recipient_triggers, recipient_zone_changes
TABLE_RECIPIENTS: Final = "recipients"
TABLE_RECIPIENT_TRIGGERS: Final = "recipient_triggers"
TABLE_RECIPIENT_ZONE_CHANGES: Final = "recipient_zone_changes"
COL_RECIPIENT_ID: Final = "recipient_id"
COL_PROFILE: Final = "profile"
COL_ZONE_CHANGED_AT_MS: Final = "zone_changed_at_ms"
COL_CHANGED_AT_MS: Final = "changed_at_ms"
RECIPIENT_PARTS: Final = 16
ZONE_CHANGE_PARTS: Final = 8
# The LWT's condition columns: a transition applies only to the state it was computed from.
TRIGGER_CAS_CONDITION: Final = ("status", "claim_id", "attempts", "revision")
# A conditional write that applies iff no row is there (a missing row's columns all read as
# null): an earlier release's row moved here, a sealed home.
TRIGGER_ABSENT_CONDITION: Final = "status"
# triggers_by_second: the partition key (``core.model.row_partition``), the clustering key's
# first column (the home), which is also where ``triggers`` says a trigger's row is. Its
# other columns are ``TRIGGER_COLUMNS``.
COL_HOME_SECOND: Final = "home_second"
COL_ROW_SHARD: Final = "row_shard"
COL_HOME_AT_MS: Final = "home_at_ms"
# triggers: every keyed creation as (home, creation time, request hash), and the home elected
# among several.
COL_CREATIONS: Final = "creations"
COL_LIVE_HOME: Final = "live_home"
# Rows per conditional batch (one Paxos round): Cassandra warns above 5 KiB and fails at 50
# KiB; a claim sets a few small cells, a terminal write all (a large payload's row goes alone).
ROWS_PER_CONDITIONAL_BATCH: Final = 50
# The recurrence JSON in ``schedule`` (``Recurrence.to_dict``) and the idempotency record's.
REQ_SCHEDULE: Final = "schedule"
REQ_OCCURRENCE_INDEX: Final = "occurrenceIndex"
REQ_OCCURRENCE_SECOND: Final = "occurrenceSecond"
REQ_TZDATA: Final = "tzdata"
REQ_SNOOZED_FROM: Final = "snoozedFrom"
REQ_PLAN: Final = "plan"
# trigger_buckets and triggers_by_caller
COL_BUCKET_MINUTE: Final = "bucket_minute"
COL_SHARD: Final = "shard"
COL_FIRE_AT_MS: Final = "fire_at_ms"
COL_PATH: Final = "path"
COL_CALLER: Final = "caller"
COL_FIRE_MONTH: Final = "fire_month"
# idempotency
COL_IDEM_KEY: Final = "idem_key"
COL_REQUEST_HASH: Final = "request_hash"
COL_REQUEST: Final = "request"
COL_RESPONSE: Final = "response"
COL_CREATED_AT_MS: Final = "created_at_ms"
# The JSON in idempotency.request: the creation fields of the trigger.
REQ_CALLBACK_URL: Final = "callback_url"
REQ_PAYLOAD: Final = "payload"
REQ_FIRE_AT_MS: Final = "fire_at_ms"
REQ_CREATED_AT_MS: Final = "created_at_ms"
REQ_SHARD: Final = "shard"
REQ_PATH: Final = "path"
# sweep_cursors
COL_SWEEP_GROUP: Final = "sweep_group"
COL_PROMOTED_UNTIL_MS: Final = "promoted_until_ms"
COL_OWNER: Final = "owner"
COL_FENCE: Final = "fence"
# service_counters
COL_COUNTER_NAME: Final = "name"
COL_COUNTER_VALUE: Final = "value"
# schema_migrations
COL_VERSION: Final = "version"
COL_NAME: Final = "name"
COL_APPLIED_AT_MS: Final = "applied_at_ms"
COL_LOCK_OWNER: Final = "owner"
LWT_APPLIED: Final = "[applied]"
CREATE_BACKDATE_MS: Final = 86_400_000  # more than any clock skew between hosts



def scope_all_bucket(dead_letter_id: str) -> str:
    """The operators' bucket of a letter's entry (crc32: the same in every process)."""
    return SCOPES_ALL[zlib.crc32(dead_letter_id.encode()) % DEAD_LETTER_ALL_BUCKETS]


def replay_open_key(job_id: str) -> str:
    return REPLAY_OPEN_KEYS[zlib.crc32(job_id.encode()) % REPLAY_OPEN_BUCKETS]


def replay_caller_key(caller: str | None) -> str:
    return f"caller:{caller or SCOPE_ALL}"  # unambiguous: a caller's name has no ':' nor '*'
