// The ops console (GET /ops). Everything shown comes from the /v1/ API with the token the
// operator pasted (sessionStorage: this tab only). Every value is put into the page as a DOM
// text node or attribute (el() below), never as HTML: payloads, errors and URLs come from
// callers and receivers and may contain markup. No inline script (the page's CSP forbids it).
"use strict";

(() => {
  const TOKEN_KEY = "trigger-ops.token";
  const READONLY_KEY = "trigger-ops.readonly";
  const PAGE_SIZE = 50;
  const OVERVIEW_EVERY_MS = 15000;
  const JOB_POLL_MS = 1000;
  const REASONS = ["max_attempts", "max_age", "gone", "callback_not_allowed", "budget_exhausted",
    "recipient_deleted", "expired", "endpoint_disabled"];

  const $ = (id) => document.getElementById(id);

  // --- DOM helpers: text only ------------------------------------------------------------

  // el("td", {class: "x", "data-label": "Reason"}, "text", otherNode): children that are not
  // nodes become text nodes, so markup in a value is shown, never parsed.
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") node.className = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, String(v));
    }
    for (const c of children) {
      if (c === undefined || c === null) continue;
      node.append(c instanceof Node ? c : String(c));
    }
    return node;
  }

  function show(node, visible) { node.hidden = !visible; }

  function setText(node, text) {
    node.textContent = text || "";
    show(node, Boolean(text));
  }

  const dash = "—";
  const num = (n) => (typeof n === "number" && Number.isFinite(n) ? n.toLocaleString("en") : dash);
  const ms = (n) => (typeof n === "number" && Number.isFinite(n) ? `${num(Math.round(n))} ms` : dash);
  // "2026-11-23T10:00:00.000Z" -> "2026-11-23 10:00:00Z" (still UTC, shorter).
  const when = (iso) => (typeof iso === "string" && iso ? iso.replace("T", " ").replace(/\.\d+Z$/, "Z") : dash);
  const text = (v) => (v === undefined || v === null || v === "" ? dash : String(v));

  // --- the API ---------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
    describe() { return `${this.message} (${this.status ? this.status + " " : ""}${this.code})`; }
  }

  const token = () => sessionStorage.getItem(TOKEN_KEY) || "";

  // api("GET", "/v1/...", body?) -> parsed JSON; throws ApiError ({"error", "message"} of the
  // answer, or a network error with status 0). A 401 signs out: the token is no good.
  async function api(method, path, body) {
    const headers = { Authorization: `Bearer ${token()}`, Accept: "application/json" };
    const init = { method, headers, cache: "no-store" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let resp;
    try {
      resp = await fetch(path, init);
    } catch (e) {
      throw new ApiError(0, "network_error", `the service did not answer: ${e.message}`);
    }
    const raw = await resp.text();
    let data = null;
    try { data = raw ? JSON.parse(raw) : null; } catch (_) { data = null; }
    if (!resp.ok) {
      const ok = data && typeof data === "object";
      const err = new ApiError(
        resp.status,
        ok && typeof data.error === "string" ? data.error : `http_${resp.status}`,
        ok && typeof data.message === "string" ? data.message : resp.statusText || "request failed");
      if (resp.status === 401) signOut(`The token was refused: ${err.describe()}`);
      throw err;
    }
    return data;
  }

  // --- notices and the confirmation dialog ----------------------------------------------

  let noticeTimer = null;
  function notice(message, kind) {
    const n = $("notice");
    n.className = `notice ${kind || "info"}`;
    setText(n, message);
    clearTimeout(noticeTimer);
    if (kind !== "error") noticeTimer = setTimeout(() => show(n, false), 8000);
  }

  // confirmDialog(text, okLabel, kind) -> Promise<boolean>: true only on the explicit button
  // (kind "danger" for what cannot be undone, "action" otherwise).
  function confirmDialog(message, okLabel, kind) {
    const d = $("confirm");
    $("confirm-text").textContent = message;
    $("confirm-ok").textContent = okLabel;
    $("confirm-ok").className = kind || "danger";
    return new Promise((resolve) => {
      const finish = (answer) => {
        $("confirm-ok").removeEventListener("click", yes);
        $("confirm-cancel").removeEventListener("click", no);
        d.removeEventListener("cancel", no);
        if (d.open) d.close();
        resolve(answer);
      };
      const yes = () => finish(true);
      const no = (e) => { if (e) e.preventDefault(); finish(false); };
      $("confirm-ok").addEventListener("click", yes);
      $("confirm-cancel").addEventListener("click", no);
      d.addEventListener("cancel", no);
      d.showModal();
      $("confirm-cancel").focus();
    });
  }

  // --- roles: a viewer learns it is read-only from the first 403 on an action -------------

  function readOnly() { return sessionStorage.getItem(READONLY_KEY) === "1"; }

  function applyRole() {
    const ro = readOnly();
    for (const id of ["bulk-replay", "replay-one", "purge-one", "pause-caller-button", "tr-run"]) {
      $(id).disabled = ro;
      $(id).title = ro ? "This token may only read" : "";
    }
    setText($("who"), token() ? (ro ? "signed in · read only" : "signed in") : "");
  }

  // An action's error: a 403 marks the token read-only; every error is said plainly.
  function actionFailed(err, where) {
    if (err instanceof ApiError && err.status === 403) {
      sessionStorage.setItem(READONLY_KEY, "1");
      applyRole();
    }
    const message = err instanceof ApiError ? err.describe() : String(err);
    if (where) setText(where, message);
    notice(message, "error");
  }

  // --- overview --------------------------------------------------------------------------

  function statList(node, pairs) {
    node.replaceChildren(...pairs.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
  }

  function renderOverview(o) {
    const queues = o.queues || {};
    statList($("queues"), [["Main queue", num(queues.main)], ["Dead-letter queue", num(queues.deadLetter)]]);
    const lag = o.lag || {};
    $("lag-window").textContent = typeof lag.windowS === "number" ? `(last ${Math.round(lag.windowS / 60)} min)` : "";
    statList($("lag"), [["p50", ms(lag.p50Ms)], ["p95", ms(lag.p95Ms)], ["p99", ms(lag.p99Ms)], ["fires", num(lag.count)]]);
    const byReason = (o.deadLetters && o.deadLetters.byReason) || {};
    const reasons = [...REASONS, ...Object.keys(byReason).filter((r) => !REASONS.includes(r))];
    statList($("reasons"), reasons.map((r) => [r, num(byReason[r])]));
    const counters = Object.entries(o.counters || {}).sort(([a], [b]) => a.localeCompare(b));
    statList($("counters"), counters.length ? counters.map(([k, v]) => [k, num(v)]) : [["counters", dash]]);
    const breakers = Array.isArray(o.breakers) ? o.breakers : [];
    $("breakers").replaceChildren(breakers.length
      ? el("table", { class: "breakers" },
        el("thead", {}, el("tr", {}, el("th", {}, "Caller"), el("th", {}, "Origin"), el("th", {}, "State"), el("th", {}, "Since"))),
        el("tbody", {}, ...breakers.map((b) => el("tr", {},
          el("td", {}, text(b.caller)),
          el("td", { class: "url" }, text(b.origin)),
          el("td", {}, el("span", { class: `badge state-${String(b.state).replace(/[^a-z_]/g, "")}` }, text(b.state))),
          el("td", {}, when(b.updatedAt))))))
      : el("p", { class: "muted" }, "No origin has a breaker yet (every origin closed)."));
  }

  // Flow control per key (GET /v1/ops/flow): bounds, open now, the delay it added lately.
  function secs(v) { return typeof v === "number" ? `${v.toFixed(v < 10 ? 2 : 1)} s` : dash; }

  function renderFlow(f) {
    const keys = Array.isArray(f.keys) ? f.keys : [];
    $("flow-window").textContent = typeof f.windowS === "number" ? `(delays: last ${f.windowS} s)` : "";
    $("flow").replaceChildren(keys.length
      ? el("table", { class: "flow" },
        el("thead", {}, el("tr", {}, ...["Caller", "Key", "Rate /s", "Parallelism", "Open now", "Delay p50", "Delay max", "Starts"]
          .map((h) => el("th", {}, h)))),
        el("tbody", {}, ...keys.map((k) => el("tr", {},
          el("td", {}, text(k.caller)),
          el("td", { class: "url" }, text(k.default ? `${k.key} (default)` : k.key)),
          el("td", {}, k.ratePerSecond == null ? dash : num(k.ratePerSecond)),
          el("td", {}, k.parallelism == null ? dash : num(k.parallelism)),
          el("td", {}, num(k.openNow)),
          el("td", {}, secs(k.delayP50Seconds)),
          el("td", {}, secs(k.delayMaxSeconds)),
          el("td", {}, num(k.recentStarts))))))
      : el("p", { class: "muted" }, "No flow-controlled delivery lately."));
  }

  async function loadFlow() {
    try {
      renderFlow((await api("GET", "/v1/ops/flow")) || {});
    } catch (err) {
      $("flow").replaceChildren(el("p", { class: "muted" },
        `Could not load flow control: ${err instanceof ApiError ? err.describe() : err}`));
    }
  }

  async function loadOverview() {
    loadFlow();
    try {
      renderOverview((await api("GET", "/v1/ops/overview")) || {});
      show($("overview-body"), true);
      setText($("overview-message"), "");
    } catch (err) {
      show($("overview-body"), false);
      let message = `Could not load the overview: ${err instanceof ApiError ? err.describe() : err}`;
      if (err instanceof ApiError && err.status === 404) {
        message = "The overview is not available on this server (GET /v1/ops/overview answered 404). "
          + "The dead letters below do not depend on it.";
      } else if (err instanceof ApiError && err.status === 403) {
        message = `This token may not read the overview: ${err.describe()}`;
      }
      setText($("overview-message"), message);
    }
  }

  // --- recipients (a caller's count, one profile by id) -----------------------------------

  async function loadRecipient() {
    const caller = $("rc-caller").value.trim();
    const id = $("rc-id").value.trim();
    if (!caller) return;
    const q = new URLSearchParams({ caller });
    if (id) q.set("id", id);
    try {
      const r = (await api("GET", `/v1/ops/recipients?${q}`)) || {};
      statList($("rc-count"), [[text(r.caller), num(r.count)]]);
      const p = r.recipient;
      statList($("rc-profile"), p ? [
        ["id", text(p.recipientId)], ["zone", text(p.timeZone)],
        ["channels", text((p.channels || []).join(", ") || "-")],
        ["phone", text(p.phone || "-")], ["email", text((p.email || []).join(", ") || "-")],
        ["quiet hours", text(p.quietHours ? `${p.quietHours.start}-${p.quietHours.end}` : "-")],
        ["locale", text(p.locale || "-")]]
        : [["profile", id ? `no recipient ${id}` : "give an id to look one up"]]);
      show($("rc-body"), true);
      setText($("rc-message"), "");
    } catch (err) {
      show($("rc-body"), false);
      setText($("rc-message"), `Could not look up: ${err instanceof ApiError ? err.describe() : err}`);
    }
  }

  // --- one trigger of any caller: its state, its attempts, run now ----------------------

  let shownTrigger = null;

  async function loadTrigger() {
    const id = $("tr-id").value.trim();
    if (!id) return;
    const path = `/v1/ops/triggers/${encodeURIComponent(id)}`;
    try {
      const [got, attempts] = await Promise.all([
        api("GET", path), api("GET", `${path}/attempts?limit=20`)]);
      const t = got.trigger || {};
      shownTrigger = t.triggerId;
      statList($("tr-fields"), [
        ["caller", text(got.caller)], ["status", el("span", { class: "badge" }, text(t.status))],
        ["fire time", when(t.nextFireAt || t.fireAt)], ["schedule", text(t.rrule || t.cron || "one time")],
        ["fired", num(t.occurrencesFired)], ["attempts", num(t.attempts)],
        ["callback", text(t.callbackUrl || "-")], ["last error", text(t.lastError || "-")]]);
      const items = (attempts && attempts.items) || [];
      $("tr-rows").replaceChildren(...items.map((a) => el("tr", {},
        el("td", { "data-label": "Started", class: "t" }, when(a.startedAt)),
        el("td", { "data-label": "Occurrence", class: "id" }, text(a.occurrenceId)),
        el("td", { "data-label": "Attempt", class: "n" }, num(a.attempt)),
        el("td", { "data-label": "Channel" }, text(a.channel)),
        el("td", { "data-label": "Outcome" }, el("span", { class: `badge outcome-${String(a.outcome).replace(/[^a-z_]/g, "")}` }, text(a.outcome))),
        el("td", { "data-label": "Status", class: "n" }, text(a.statusCode == null ? "-" : a.statusCode)),
        el("td", { "data-label": "Duration", class: "n" }, ms(a.durationMs)),
        el("td", { "data-label": "Error", class: "err" }, text(a.error || "")))));
      show($("tr-table"), items.length > 0);
      show($("tr-none"), items.length === 0);
      show($("tr-run"), !["FIRED", "FAILED", "CANCELLED"].includes(t.status));
      show($("tr-body"), true);
      setText($("tr-message"), "");
    } catch (err) {
      shownTrigger = null;
      show($("tr-body"), false);
      show($("tr-run"), false);
      setText($("tr-message"), `Could not look up: ${err instanceof ApiError ? err.describe() : err}`);
    }
  }

  async function runTrigger() {
    const id = shownTrigger;
    if (!id || !(await confirmDialog(`Run ${id} now? A one-time trigger fires now instead of `
      + "at its time; a series (or a paused trigger) gets one extra occurrence now and keeps "
      + "its schedule.", "Run now", "action"))) return;
    try {
      const r = await api("POST", `/v1/ops/triggers/${encodeURIComponent(id)}/run`, {});
      notice(`Running: occurrence ${text(r && r.occurrenceId)} fires at ${when(r && r.fireAt)}.`, "ok");
      loadTrigger();
    } catch (err) {
      actionFailed(err, $("tr-message"));
    }
  }

  // --- the dead-letter list --------------------------------------------------------------

  // seq: the latest load; an answer to an older one is dropped (an Apply while the previous
  // list is still loading replaces it, it is not ignored). busy: "More" waits for the page.
  const list = { filter: {}, cursor: null, seq: 0, busy: false };
  const audit = { filter: {}, cursor: null, seq: 0, busy: false };

  // A datetime-local value (the browser's zone) as the API's UTC ISO-8601, or "" if empty.
  function isoOf(value) {
    if (!value) return "";
    const d = new Date(value);
    return Number.isNaN(d.getTime()) ? "" : d.toISOString();
  }

  function readFilter() {
    const f = {
      reason: $("f-reason").value,
      since: isoOf($("f-since").value),
      until: isoOf($("f-until").value),
      callbackPrefix: $("f-prefix").value.trim(),
      caller: $("f-caller").value.trim(),
    };
    return Object.fromEntries(Object.entries(f).filter(([, v]) => v));
  }

  function describeFilter(f) {
    const parts = Object.entries(f).map(([k, v]) => `${k} = ${v}`);
    return parts.length ? parts.join(", ") : "no filter: every dead letter";
  }

  function row(item) {
    const open = el("button", { type: "button", class: "secondary open", onclick: () => openDetail(item.id) }, "Details");
    return el("tr", { "data-id": item.id, "data-trigger-id": item.triggerId },
      el("td", { "data-label": "Dead at", class: "t" }, when(item.deadAt)),
      el("td", { "data-label": "Trigger", class: "id" }, text(item.triggerId)),
      el("td", { "data-label": "Reason" }, el("span", { class: "badge reason" }, text(item.reason))),
      el("td", { "data-label": "Caller" }, text(item.caller)),
      el("td", { "data-label": "Callback", class: "url" }, text(item.callbackUrl)),
      el("td", { "data-label": "Attempts", class: "n" }, num(item.attemptCount)),
      el("td", { "data-label": "Last error", class: "err" }, text(item.lastError)),
      el("td", { class: "open-cell" }, open));
  }

  function updateListMessage() {
    const count = $("dl-rows").children.length;
    show($("dl-table"), count > 0);
    if (!count) setText($("dl-message"), "No dead letters match.");
    else setText($("dl-message"), "");
  }

  async function loadDeadLetters(reset) {
    if (!reset && list.busy) return;
    const seq = ++list.seq;
    list.busy = true;
    if (reset) {
      list.filter = readFilter();
      list.cursor = null;
    }
    const params = new URLSearchParams({ ...list.filter, limit: String(PAGE_SIZE) });
    if (!reset && list.cursor) params.set("cursor", list.cursor);
    try {
      const page = (await api("GET", `/v1/dead-letters?${params}`)) || {};
      if (seq !== list.seq) return;
      const items = Array.isArray(page.items) ? page.items : [];
      if (reset) $("dl-rows").replaceChildren();
      $("dl-rows").append(...items.map(row));
      list.cursor = typeof page.nextCursor === "string" && page.nextCursor ? page.nextCursor : null;
      show($("more"), Boolean(list.cursor));
      updateListMessage();
    } catch (err) {
      if (seq !== list.seq) return;
      if (reset) $("dl-rows").replaceChildren();
      show($("dl-table"), $("dl-rows").children.length > 0);
      setText($("dl-message"), `Could not load dead letters: ${err instanceof ApiError ? err.describe() : err}`);
    } finally {
      if (seq === list.seq) list.busy = false;
    }
  }

  function dropRow(id) {
    for (const tr of $("dl-rows").querySelectorAll("tr")) {
      if (tr.dataset.id === id) tr.remove();
    }
    updateListMessage();
  }

  // --- one dead letter -------------------------------------------------------------------

  let current = null;
  let detailSeq = 0; // the latest Details click wins, whatever order the answers come in

  // The trigger's tags and labels (key:value) in one line, as text; a dash without any.
  function tagsText(tags, labels) {
    const parts = (Array.isArray(tags) ? tags : []).map(String);
    if (labels && typeof labels === "object") {
      for (const [k, v] of Object.entries(labels)) parts.push(k + ":" + v);
    }
    return parts.length ? parts.join(", ") : null;
  }

  function renderDetail(d) {
    const fields = [
      ["Id", d.id], ["Trigger", d.triggerId], ["Occurrence", d.occurrenceId], ["Caller", d.caller],
      ["Reason", d.reason], ["State", d.state], ["Trigger status", d.triggerStatus],
      ["Tags", tagsText(d.triggerTags, d.triggerLabels)],
      ["Dead at", when(d.deadAt)], ["Fire at", when(d.fireAt)],
      ["Callback", d.callbackUrl], ["Attempts", num(d.attemptCount)], ["Last error", d.lastError],
    ];
    $("detail-fields").replaceChildren(...fields.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, text(v))]));
    const attempts = Array.isArray(d.attempts) ? d.attempts : [];
    $("attempt-rows").replaceChildren(...(attempts.length ? attempts.map((a) => el("tr", {},
      el("td", { "data-label": "#", class: "n" }, text(a.attempt)),
      el("td", { "data-label": "At" }, when(a.at)),
      el("td", { "data-label": "Duration", class: "n" }, ms(a.durationMs)),
      el("td", { "data-label": "Status", class: "n" }, text(a.statusCode)),
      el("td", { "data-label": "Error", class: "err" }, text(a.error)),
      el("td", { "data-label": "Response", class: "excerpt" }, text(a.responseExcerpt)),
      el("td", { "data-label": "Dispatcher" }, text(a.dispatcher))))
      : [el("tr", {}, el("td", { colspan: "7", class: "muted" }, "No attempt was recorded."))]));
    let payload;
    try { payload = JSON.stringify(d.payload, null, 2); } catch (_) { payload = String(d.payload); }
    $("payload").textContent = payload === undefined ? dash : payload;
  }

  async function openDetail(id) {
    const seq = ++detailSeq;
    try {
      const d = await api("GET", `/v1/dead-letters/${encodeURIComponent(id)}`);
      if (seq !== detailSeq) return;
      current = d;
      renderDetail(d);
      setText($("detail-message"), "");
      applyRole();
      if (!$("detail").open) $("detail").showModal();
    } catch (err) {
      if (err instanceof ApiError && err.status === 404) {
        dropRow(id);
        notice("That dead letter is gone (replayed or purged meanwhile).", "info");
      } else {
        actionFailed(err, null);
      }
    }
  }

  async function replayOne() {
    if (!current) return;
    const d = current;
    if (!(await confirmDialog(`Replay dead letter ${d.id}? Trigger ${d.triggerId} goes back to `
      + `PENDING with a fresh attempt budget and fires once more, now.`, "Replay", "action"))) return;
    try {
      const r = await api("POST", `/v1/dead-letters/${encodeURIComponent(d.id)}/replay`, {});
      $("detail").close();
      dropRow(d.id);
      notice(`Replayed: trigger ${text(r && r.triggerId)} is ${text(r && r.status)}, fires at ${when(r && r.fireAt)}.`, "ok");
    } catch (err) {
      if (err instanceof ApiError && err.status === 409) {
        $("detail").close();
        dropRow(d.id);
        notice(`Already replayed: ${err.describe()}`, "info");
      } else {
        actionFailed(err, $("detail-message"));
      }
    }
  }

  async function purgeOne() {
    if (!current) return;
    const d = current;
    if (!(await confirmDialog(`Purge dead letter ${d.id}? It leaves the list for good and will `
      + `not be delivered (the trigger's history stays).`, "Purge", "danger"))) return;
    try {
      await api("DELETE", `/v1/dead-letters/${encodeURIComponent(d.id)}`);
      $("detail").close();
      dropRow(d.id);
      notice(`Purged dead letter ${d.id}.`, "ok");
    } catch (err) {
      actionFailed(err, $("detail-message"));
    }
  }

  // --- bulk replay -----------------------------------------------------------------------

  function showJob(job) {
    const total = typeof job.total === "number" ? job.total : 0;
    const finished = (job.done || 0) + (job.failed || 0);
    const bar = $("bulk-progress");
    bar.max = Math.max(total, 1);
    bar.value = total ? finished : (job.status === "running" ? 0 : 1);
    $("bulk-text").textContent = `${num(job.done || 0)} of ${num(total)} replayed`
      + `${job.failed ? `, ${num(job.failed)} failed` : ""} · ${text(job.status)}`;
    show($("bulk"), true);
  }

  async function bulkReplay() {
    const filter = readFilter();
    if (!(await confirmDialog(`Replay every dead letter matching (${describeFilter(filter)})? `
      + "Each one fires once more, now.", "Replay all", "action"))) return;
    const button = $("bulk-replay");
    button.disabled = true;
    try {
      let job = await api("POST", "/v1/dead-letters/replay", filter);
      $("bulk").dataset.jobId = job.jobId;
      showJob(job);
      while (job.status === "running") {
        await new Promise((r) => setTimeout(r, JOB_POLL_MS));
        job = { jobId: job.jobId, ...(await api("GET", `/v1/dead-letters/replay/${encodeURIComponent(job.jobId)}`)) };
        showJob(job);
      }
      notice(`Bulk replay ${job.status}: ${num(job.done)} replayed, ${num(job.failed || 0)} failed.`, job.failed ? "error" : "ok");
      await loadDeadLetters(true);
    } catch (err) {
      actionFailed(err, null);
    } finally {
      applyRole();
      if (!readOnly()) button.disabled = false;
    }
  }

  // --- paused callers: operators hold a whole caller during an incident ---------------------

  async function loadPausedCallers() {
    let got;
    try {
      got = await api("GET", "/v1/ops/callers/paused");
    } catch (err) {
      setText($("pc-message"), err instanceof ApiError ? err.describe() : String(err));
      return;
    }
    const items = Array.isArray(got.items) ? got.items : [];
    setText($("pc-message"), items.length ? "" : "No caller is paused.");
    show($("pc-table"), items.length > 0);
    $("pc-rows").replaceChildren(...items.map((p) => el("tr", {},
      el("td", { "data-label": "Caller" }, text(p.caller)),
      el("td", { "data-label": "Paused since" }, when(p.pausedAt)),
      el("td", { "data-label": "Paused triggers" }, p.pausedTriggers >= 500 ? "500+" : num(p.pausedTriggers)),
      el("td", {}, el("button", {
        type: "button", class: "action", disabled: readOnly(),
        onclick: () => resumeCaller(p.caller),
      }, "Resume…")))));
  }

  async function pauseCaller(e) {
    e.preventDefault();
    const caller = $("pause-caller").value.trim();
    if (!caller || !(await confirmDialog(`Pause every delivery of ${caller}? Due triggers turn `
      + "PAUSED until the caller is resumed; registrations are still accepted.", "Pause", "danger"))) return;
    try {
      await api("POST", `/v1/ops/callers/${encodeURIComponent(caller)}/pause`);
      notice(`${caller} is paused.`, "ok");
      $("pause-caller").value = "";
      await loadPausedCallers();
    } catch (err) {
      actionFailed(err, null);
    }
  }

  function showResume(job) {
    show($("resume-job"), true);
    $("resume-progress").max = Math.max(job.total, 1);
    $("resume-progress").value = job.done + job.failed;
    $("resume-text").textContent = `${num(job.done)} of ${num(job.total)} resumed, ${num(job.failed)} failed (${job.status})`;
  }

  async function resumeCaller(caller) {
    const policy = $("resume-policy").value;
    if (!(await confirmDialog(`Resume ${caller} and its paused triggers`
      + (policy ? ` (policy ${policy})?` : " (each series' catch-up policy)?"), "Resume", "action"))) return;
    try {
      let job = await api("POST", `/v1/ops/callers/${encodeURIComponent(caller)}/resume`, policy ? { policy } : {});
      showResume(job);
      while (job.status === "running") {
        await new Promise((r) => setTimeout(r, JOB_POLL_MS));
        job = await api("GET", `/v1/ops/callers/resume-jobs/${encodeURIComponent(job.jobId)}`);
        showResume(job);
      }
      notice(`${caller} resumed: ${num(job.done)} triggers, ${num(job.failed)} failed.`, job.failed ? "error" : "ok");
      await loadPausedCallers();
    } catch (err) {
      actionFailed(err, null);
    }
  }

  // --- endpoints: failing and disabled callback origins; operators enable them --------------

  async function loadEndpoints() {
    let got;
    try {
      got = await api("GET", "/v1/ops/endpoints");
    } catch (err) {
      setText($("ep-message"), err instanceof ApiError ? err.describe() : String(err));
      return;
    }
    const items = Array.isArray(got.items) ? got.items : [];
    setText($("ep-message"), items.length ? "" : "Every endpoint is healthy.");
    show($("ep-table"), items.length > 0);
    $("ep-rows").replaceChildren(...items.map((e) => el("tr", {},
      el("td", { "data-label": "Caller" }, text(e.caller)),
      el("td", { "data-label": "Origin" }, el("code", {}, text(e.origin))),
      el("td", { "data-label": "State" }, el("span", { class: `badge ep-state-${e.state}` }, text(e.state))),
      el("td", { "data-label": "Failing since" }, when(e.failingSince)),
      el("td", { "data-label": "Failures" }, num(e.failures)),
      el("td", { "data-label": "Last error", class: "small" }, text(e.lastError || "")),
      el("td", {}, el("button", {
        type: "button", class: "action", disabled: readOnly(),
        onclick: () => enableEndpoint(e.caller, e.origin),
      }, "Enable…")))));
  }

  async function enableEndpoint(caller, origin) {
    const since = isoOf($("ep-since").value);
    if (!(await confirmDialog(`Enable ${origin} for ${caller}?`
      + (since ? ` What was held since ${since} is replayed.` : " Held triggers stay paused."),
    "Enable", "action"))) return;
    try {
      const got = await api("POST", `/v1/ops/endpoints/${encodeURIComponent(caller)}/enable`,
        since ? { origin, replaySince: since } : { origin });
      const jobs = [got.replay.triggerJobId, got.replay.deadLetterJobId].filter(Boolean);
      notice(`${origin} enabled for ${caller}` + (jobs.length ? `; replay job ${jobs.join(", ")}.` : "."), "ok");
      await loadEndpoints();
    } catch (err) {
      actionFailed(err, null);
    }
  }

  // --- signing in and out ----------------------------------------------------------------

  let overviewTimer = null;

  // --- Audit log: every caller's and operator's changes, newest first ------------------------

  function auditRow(e) {
    const outcome = text(e.outcome);
    return el("tr", { "data-request-id": e.requestId },
      el("td", { "data-label": "At", class: "t" }, when(e.at)),
      el("td", { "data-label": "Actor" }, text(e.actor)),
      el("td", { "data-label": "Action" }, el("span", { class: "badge" }, text(e.action))),
      el("td", { "data-label": "Target", class: "id" }, text(e.target)),
      el("td", { "data-label": "Outcome", class: e.outcome === "ok" ? "" : "err" }, outcome),
      el("td", { "data-label": "Request id", class: "id" }, text(e.requestId)));
  }

  async function loadAudit(reset) {
    if (!reset && audit.busy) return;
    const seq = ++audit.seq;
    audit.busy = true;
    if (reset) {
      const f = { action: $("au-action").value, actor: $("au-actor").value.trim() };
      audit.filter = Object.fromEntries(Object.entries(f).filter(([, v]) => v));
      audit.cursor = null;
    }
    const params = new URLSearchParams({ ...audit.filter, limit: String(PAGE_SIZE) });
    if (!reset && audit.cursor) params.set("cursor", audit.cursor);
    try {
      const page = (await api("GET", `/v1/ops/audit?${params}`)) || {};
      if (seq !== audit.seq) return;
      const items = Array.isArray(page.items) ? page.items : [];
      if (reset) $("au-rows").replaceChildren();
      $("au-rows").append(...items.map(auditRow));
      audit.cursor = typeof page.nextCursor === "string" && page.nextCursor ? page.nextCursor : null;
      show($("au-more"), Boolean(audit.cursor));
      const count = $("au-rows").children.length;
      show($("au-table"), count > 0);
      // A short page with a cursor is the bounded work of one call, not the end.
      setText($("au-message"), count ? "" : (audit.cursor ? "None found yet: press More to read further back."
        : "No audit entries match."));
    } catch (err) {
      if (seq !== audit.seq) return;
      if (reset) $("au-rows").replaceChildren();
      show($("au-table"), $("au-rows").children.length > 0);
      setText($("au-message"), `Could not load the audit log: ${err instanceof ApiError ? err.describe() : err}`);
    } finally {
      if (seq === audit.seq) audit.busy = false;
    }
  }

  function signOut(reason) {
    sessionStorage.removeItem(TOKEN_KEY);
    sessionStorage.removeItem(READONLY_KEY);
    clearInterval(overviewTimer);
    for (const id of ["detail", "confirm"]) if ($(id).open) $(id).close();
    show($("console"), false);
    show($("logout"), false);
    show($("login"), true);
    setText($("login-error"), reason || "");
    applyRole();
    $("token").focus();
  }

  function start() {
    show($("login"), false);
    show($("console"), true);
    show($("logout"), true);
    applyRole();
    loadOverview();
    loadPausedCallers();
    loadEndpoints();
    loadDeadLetters(true);
    loadAudit(true);
    clearInterval(overviewTimer);
    overviewTimer = setInterval(() => { if (!document.hidden && token()) loadOverview(); }, OVERVIEW_EVERY_MS);
  }

  function wire() {
    $("login-form").addEventListener("submit", (e) => {
      e.preventDefault();
      const t = $("token").value.trim();
      if (!t) return;
      sessionStorage.setItem(TOKEN_KEY, t);
      sessionStorage.removeItem(READONLY_KEY);
      $("token").value = "";
      setText($("login-error"), "");
      start();
    });
    $("logout").addEventListener("click", () => signOut(""));
    $("refresh").addEventListener("click", () => {
      loadOverview(); loadPausedCallers(); loadEndpoints(); loadDeadLetters(true); loadAudit(true);
    });
    $("pause-form").addEventListener("submit", pauseCaller);
    $("filters").addEventListener("submit", (e) => { e.preventDefault(); loadDeadLetters(true); });
    $("filters").addEventListener("reset", () => setTimeout(() => loadDeadLetters(true), 0));
    $("more").addEventListener("click", () => loadDeadLetters(false));
    $("au-filters").addEventListener("submit", (e) => { e.preventDefault(); loadAudit(true); });
    $("au-filters").addEventListener("reset", () => setTimeout(() => loadAudit(true), 0));
    $("au-more").addEventListener("click", () => loadAudit(false));
    $("rc-form").addEventListener("submit", (e) => { e.preventDefault(); loadRecipient(); });
    $("tr-form").addEventListener("submit", (e) => { e.preventDefault(); loadTrigger(); });
    $("tr-run").addEventListener("click", runTrigger);
    $("detail-close").addEventListener("click", () => $("detail").close());
    $("replay-one").addEventListener("click", replayOne);
    $("purge-one").addEventListener("click", purgeOne);
    $("bulk-replay").addEventListener("click", bulkReplay);
    if (token()) start(); else signOut("");
  }

  wire();
})();
