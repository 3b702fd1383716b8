// Leasehold dashboard: polls the node that served it about once a second, and drives a
// job's lifecycle (cancel, retry, redrive) when its token allows.
//
// Calls (all relative to this node; any node works, a follower forwards the job list and
// the actions to the leader itself). Every one is a row of ROUTES below:
//   GET /v1/cluster                 this node's cluster time, for countdowns
//   GET /v1/cluster/members         every member's role, term and indexes, as seen here
//   GET /v1/jobs?queue=&state=      the job table, and a queue's dead letters (api.md)
//   GET /v1/cluster/rejections      the refused-commands feed, incrementally (`after`)
//   GET /v1/events?after=&wait_ms=  the event feed, followed by long polls from
//                                   /v1/cluster's event_seq (a token needs a header,
//                                   which EventSource cannot send); it feeds the event
//                                   list and the throughput chart
//   GET /v1/jobs/{id}/history       the chosen job's events, drawn as its ownership
//                                   timeline (one lane per generation)
//   POST /v1/jobs/{id}/cancel, POST /v1/jobs/{id}/retry, POST /v1/queues/{queue}/redrive
//                                   the buttons: an admin or operator token, each with
//                                   an Idempotency-Key, tried again on 503/504
// Each call fails on its own: what did answer is still shown, the banner names the rest.
// Job data (ids, errors, progress) is attacker-controlled: it only ever becomes
// textContent or an attribute value, never markup.
"use strict";

(function () {
  const POLL_MS = 1000;
  const TICK_MS = 200;
  const CALL_TIMEOUT_MS = 5000;
  // An action answered 503 or 504, or not at all, is tried again with the same key, this
  // many times in all, waiting the answer's Retry-After (at most RETRY_WAIT_MS_MAX).
  const ACTION_TRIES = 5;
  const RETRY_WAIT_MS_MAX = 3000;
  const JOBS_LIMIT = 200;
  const DEAD_LIMIT = 20;
  const REDRIVE_LIMIT = 100;
  const FEED_MAX = 200;
  const SHORT_MAX = 120;
  const TOKEN_KEY = "leasehold.token";
  const CANCEL_REASON = "cancelled from the dashboard";
  // The event feed: a long poll waits this long for an event (api.md allows 30 s), asks
  // for at most EVENTS_PAGE, and is asked again this soon after a failure. The list keeps
  // the newest EVENTS_SHOWN_MAX; the chart counts the last RATE_WINDOW_S seconds.
  const EVENTS_WAIT_MS = 10000;
  const EVENTS_PAGE = 1000;
  const EVENTS_RETRY_MS = 1000;
  const EVENTS_SHOWN_MAX = 200;
  const RATE_WINDOW_S = 180;
  const TIMELINE_SPAN_MIN_MS = 100;
  // What fits the timeline's 150-unit gutter in 11 px monospace; the tooltip has it all.
  const LANE_LABEL_MAX = 22;

  // Every API call the page makes, as [method, path]. node/tests/api/ui_api.rs checks
  // each against the node's route table: a reader token may make the GETs, an operator
  // token the POSTs.
  const ROUTES = {
    cluster: ["GET", "/v1/cluster"],
    members: ["GET", "/v1/cluster/members"],
    jobs: ["GET", "/v1/jobs"],
    rejections: ["GET", "/v1/cluster/rejections"],
    events: ["GET", "/v1/events"],
    history: ["GET", "/v1/jobs/{id}/history"],
    cancel: ["POST", "/v1/jobs/{id}/cancel"],
    retry: ["POST", "/v1/jobs/{id}/retry"],
    redrive: ["POST", "/v1/queues/{queue}/redrive"],
  };

  const $ = (sel) => document.querySelector(sel);

  const state = {
    // Kept in this tab's sessionStorage only; sent as a header, never in a URL.
    token: sessionStorage.getItem(TOKEN_KEY) || "",
    inFlight: false,
    pollAgain: false,
    // Cluster time at `localBase` (performance.now()), from the last /v1/cluster.
    clusterBase: null,
    localBase: 0,
    nodeId: null,
    feed: [], // newest first
    // The event feed: `after` is the last seq handled (null until /v1/cluster answered);
    // `list` the newest events, newest first; failures and restarts, for the status line.
    events: { after: null, list: [], failure: null, errors: 0, gaps: 0 },
    // Cluster second -> { claimed, completed, expired } counted from the feed.
    rate: new Map(),
    // The job whose timeline is drawn, or null.
    timelineJob: null,
    lastSeq: 0,
    // What the tables last rendered: an unchanged answer keeps its rows (and a button
    // being clicked) instead of replacing them every second.
    jobsSig: null,
    deadSig: null,
    queuesSig: null,
    // The dead-letter view: its queue, the page token of the page shown, the next one.
    dead: { queue: "", token: null, next: null },
  };

  // ---- small DOM helpers (textContent only: ids and owners never become markup) ----

  function el(tag, attrs, children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined) continue;
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      else e.setAttribute(k, v);
    }
    for (const c of children || []) e.append(c);
    return e;
  }

  function cell(field, text, cls) {
    return el("td", { "data-field": field, class: cls, text: text });
  }

  function dash(v) {
    return v === null || v === undefined ? "\u2014" : String(v);
  }

  // At most SHORT_MAX characters; the caller puts the whole text in a `title`.
  function short(text) {
    return text.length > SHORT_MAX ? text.slice(0, SHORT_MAX - 1) + "\u2026" : text;
  }

  function clusterNow() {
    if (state.clusterBase === null) return null;
    return state.clusterBase + (performance.now() - state.localBase);
  }

  // A duration, coarser as it grows (a job may be due up to 366 days ahead).
  function seconds(ms) {
    const s = ms / 1000;
    if (s < 60) return s.toFixed(1) + " s";
    if (s < 3600) return Math.floor(s / 60) + " m " + Math.floor(s % 60) + " s";
    if (s < 172800) return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " m";
    return Math.floor(s / 86400) + " d " + Math.floor((s % 86400) / 3600) + " h";
  }

  // ---- calls ----

  // One path segment. A job id's "/" becomes %2F; "." and ".." are encoded too, since
  // the browser would resolve them away (the node refuses them, and the page says so).
  function segment(s) {
    const e = encodeURIComponent(s);
    return e === "." || e === ".." ? e.replace(/\./g, "%2E") : e;
  }

  // A fresh Idempotency-Key: an action tried again is applied once (api.md "Retries").
  function newKey() {
    const bytes = crypto.getRandomValues(new Uint8Array(16));
    return "ui-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  // The fetch of ROUTES[route]: `params` fill its {placeholders}, `query` its query
  // string, `body` is a POST's JSON, `key` its Idempotency-Key. Same origin only, as
  // the browser guard wants.
  function request(route, opts) {
    const [method, template] = ROUTES[route];
    let path = template.replace(/\{(\w+)\}/g, (_, k) => segment(opts.params[k]));
    if (opts.query) path += "?" + new URLSearchParams(opts.query).toString();
    const headers = { Accept: "application/json" };
    if (state.token) headers.Authorization = "Bearer " + state.token;
    if (opts.key) headers["Idempotency-Key"] = opts.key;
    const init = { method, headers, cache: "no-store", mode: "same-origin" };
    if (method === "POST") {
      // api.md "Browser requests": a POST's body must be declared JSON.
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(opts.body || {});
    }
    return [path, init];
  }

  // `opts.timeoutMs` lengthens the wait for a long poll (CALL_TIMEOUT_MS otherwise).
  async function call(route, opts) {
    const [path, init] = request(route, opts || {});
    const timeoutMs = (opts && opts.timeoutMs) || CALL_TIMEOUT_MS;
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), timeoutMs);
    try {
      const resp = await fetch(path, { ...init, signal: ctl.signal });
      return answerOf(resp, await resp.text());
    } catch (e) {
      if (e.name === "AbortError") throw new Error("no answer within " + timeoutMs / 1000 + " s");
      throw e;
    } finally {
      clearTimeout(timer);
    }
  }

  // The JSON body of a 2xx; otherwise an Error carrying the API's code and message.
  function answerOf(resp, text) {
    let body = null;
    try {
      body = text ? JSON.parse(text) : null;
    } catch (_) {
      body = null;
    }
    if (resp.ok) return body;
    const err = body && body.error ? body.error : { code: "http_" + resp.status, message: text };
    const e = new Error(resp.status + " " + err.code + ": " + err.message);
    e.status = resp.status;
    e.retryAfterMs = Math.min(RETRY_WAIT_MS_MAX, 1000 * (Number(resp.headers.get("Retry-After")) || 1));
    throw e;
  }

  function jobsQuery() {
    const q = { limit: String(JOBS_LIMIT) };
    const queue = $("#filter-queue").value.trim();
    const st = $("#filter-state").value;
    if (queue) q.queue = queue;
    if (st) q.state = st;
    return q;
  }

  // A queue's dead-letter list is its failed jobs (api.md "Job lifecycle").
  function deadQuery() {
    const q = { state: "failed", queue: state.dead.queue, limit: String(DEAD_LIMIT) };
    if (state.dead.token) q.page_token = state.dead.token;
    return q;
  }

  // ---- polling ----

  // [what, pending answer, renderer, the card showing it]
  function pollCalls() {
    const rejections = { after: String(state.lastSeq), limit: String(FEED_MAX) };
    const calls = [
      ["GET /v1/cluster", call("cluster"), renderCluster, null],
      ["GET /v1/cluster/members", call("members"), renderMembers, "#members-card"],
      ["GET /v1/jobs", call("jobs", { query: jobsQuery() }), renderJobs, "#jobs-card"],
      ["GET /v1/cluster/rejections", call("rejections", { query: rejections }), renderRejections, "#rejections-card"],
    ];
    const jobId = state.timelineJob;
    if (jobId) {
      const history = call("history", { params: { id: jobId } });
      calls.push(["GET /v1/jobs/" + jobId + "/history", history, (v) => renderTimeline(jobId, v), "#timeline-card"]);
    }
    const queue = state.dead.queue;
    if (queue) {
      const dead = call("jobs", { query: deadQuery() });
      calls.push(["GET /v1/jobs (dead letters of " + queue + ")", dead, (v) => renderDead(queue, v), "#dead-card"]);
    }
    return calls;
  }

  async function poll() {
    if (state.inFlight) {
      // An action just changed something: look again as soon as this poll is done.
      state.pollAgain = true;
      return;
    }
    state.inFlight = true;
    const failures = [];
    let answered = 0;
    for (const [what, pending, render, card] of pollCalls()) {
      let ok = false;
      try {
        render(await pending);
        answered += 1;
        ok = true;
      } catch (e) {
        failures.push({ what, message: e.message, status: e.status });
      }
      // A card whose call failed keeps what it last showed, dimmed as out of date.
      if (card) $(card).classList.toggle("outdated", !ok);
    }
    state.inFlight = false;
    showPolled(failures, answered);
    if (state.pollAgain) {
      state.pollAgain = false;
      poll();
    }
  }

  function showPolled(failures, answered) {
    showFailures(failures);
    if (answered > 0) {
      const now = new Date();
      const lu = $("#last-updated");
      lu.textContent = "updated " + now.toLocaleTimeString();
      lu.setAttribute("data-updated-ms", String(now.getTime()));
    }
    $("#live-dot").className = "dot " + (failures.length === 0 ? "ok" : answered > 0 ? "warn" : "bad");
    renderThroughput();
    tick();
  }

  function showFailures(failures) {
    const banner = $("#error-banner");
    banner.replaceChildren();
    if (failures.length === 0) {
      banner.hidden = true;
      return;
    }
    for (const f of failures) banner.append(el("div", { class: "failure", text: f.what + " \u2192 " + f.message }));
    if (failures.some((f) => f.status === 401 || f.status === 403)) {
      banner.append(el("div", { class: "hint", text: "This node wants a client token: enter a reader token above." }));
    }
    banner.hidden = false;
  }

  // ---- rendering: cluster and members ----

  function renderCluster(c) {
    state.clusterBase = c.cluster_time_ms;
    state.localBase = performance.now();
    state.nodeId = c.node_id;
    startFeed(c.event_seq);
    const served = "via node " + c.node_id + (c.cluster_id ? " \u00b7 cluster " + c.cluster_id.slice(0, 8) : "");
    $("#served-by").textContent = served;
    $("#cluster-summary").textContent =
      "leader " + dash(c.leader_id) + " \u00b7 term " + c.term + " \u00b7 " + c.voters.length + " voters" +
      (c.learners.length ? ", " + c.learners.length + " learners" : "");
  }

  function roleOf(m) {
    if (!m.reachable) return "unknown";
    return m.state || (m.voter ? "Voter" : "Learner");
  }

  function renderMembers(v) {
    const rows = v.members.map((m) => {
      const role = roleOf(m);
      const idCell = el("td", { "data-field": "id" }, [
        el("span", { class: "node-id", text: "n" + m.id }),
        m.id === v.node_id ? el("span", { class: "tag", text: "this node" }) : "",
      ]);
      const healthCell = el("td", { "data-field": "health" }, [
        el("span", { class: "pill health-" + m.health, text: m.health.replace("_", " "), title: m.error || "" }),
        m.error ? el("span", { class: "err small", text: m.error }) : "",
      ]);
      return el(
        "tr",
        {
          "data-node-id": String(m.id),
          "data-health": m.health,
          "data-role": role,
          class: role === "Leader" ? "is-leader" : null,
        },
        [
          idCell,
          cell("addr", m.addr, "mono"),
          el("td", { "data-field": "state" }, [
            el("span", { class: "pill role-" + role.toLowerCase(), text: role }),
            m.voter ? "" : el("span", { class: "tag", text: "learner" }),
          ]),
          cell("term", dash(m.term), "num"),
          cell("leader_id", m.leader_id === null || m.leader_id === undefined ? "\u2014" : "n" + m.leader_id),
          cell("commit_index", dash(m.commit_index), "num mono"),
          cell("applied_index", dash(m.applied_index), "num mono"),
          healthCell,
        ]
      );
    });
    $("#members tbody").replaceChildren(...rows);
  }

  // ---- rendering: the job table ----

  // What a job's rows show: when it is unchanged, so are they.
  function jobSignature(j) {
    return [j.id, j.queue, j.state, j.owner, j.generation, j.attempts, j.max_attempts, j.lease_until_ms,
      j.run_at_ms, j.priority, j.last_error, j.cancel_requested, j.cancel_reason, j.progress_ms];
  }

  function renderJobs(v) {
    renderQueues(v.jobs);
    $("#jobs-note").textContent =
      v.jobs.length + " job" + (v.jobs.length === 1 ? "" : "s") + " shown" +
      (v.next_page_token ? " (the first " + JOBS_LIMIT + "; narrow the filters to see others)" : "");
    const sig = JSON.stringify(v.jobs.map(jobSignature));
    if (sig === state.jobsSig) return;
    state.jobsSig = sig;
    const rows = v.jobs.flatMap((j) => {
      const detail = jobDetail(j);
      return detail ? [jobRow(j, true), detail] : [jobRow(j, false)];
    });
    if (rows.length === 0) {
      rows.push(el("tr", { class: "empty" }, [el("td", { colspan: "8", text: "No jobs match." })]));
    }
    $("#jobs tbody").replaceChildren(...rows);
  }

  function statePill(st) {
    return el("span", { class: "pill state-" + st, text: st });
  }

  function jobRow(j, hasDetail) {
    return el("tr", { "data-job-id": j.id, "data-state": j.state, class: hasDetail ? "has-detail" : null }, [
      el("td", { "data-field": "id", class: "mono ellipsis", title: j.id, text: j.id }),
      cell("queue", j.queue),
      el("td", { "data-field": "state" }, [statePill(j.state)]),
      cell("owner", dash(j.owner), "mono"),
      cell("generation", String(j.generation), "num mono"),
      cell("attempts", j.max_attempts ? j.attempts + " / " + j.max_attempts : String(j.attempts), "num mono"),
      timerCell(j),
      el("td", { "data-field": "actions", class: "actions" }, jobActions(j)),
    ]);
  }

  // A live lease counts down, a pending job not yet due counts to its due time (tick);
  // "—" otherwise.
  function timerCell(j) {
    const td = cell("lease", "\u2014", "num mono lease");
    if (j.state === "leased" && j.lease_until_ms !== null) {
      td.setAttribute("data-lease-until-ms", String(j.lease_until_ms));
    } else if (j.state === "pending" && j.run_at_ms !== null && j.run_at_ms !== undefined) {
      td.setAttribute("data-run-at-ms", String(j.run_at_ms));
    }
    return td;
  }

  function actionButton(action, label, jobId, title) {
    return el("button", { type: "button", class: "action", "data-action": action, "data-job-id": jobId, title, text: label });
  }

  // Cancel while the job may still run; retry once it is failed or cancelled.
  function jobActions(j) {
    if (j.state === "pending" || (j.state === "leased" && !j.cancel_requested)) {
      return [actionButton("cancel", "Cancel", j.id, "Cancel this job (admin or operator token)")];
    }
    if (j.state === "failed" || j.state === "cancelled") {
      return [actionButton("retry", "Retry", j.id, "Make this job pending again (admin or operator token)")];
    }
    return [];
  }

  // One detail, shortened; its whole text in the tooltip.
  function detailItem(field, text, cls) {
    return el("span", { "data-field": field, class: cls ? "detail " + cls : "detail", title: text, text: short(text) });
  }

  // The job's 1.1 details on a line of their own, or null when it has none to show.
  function jobDetail(j) {
    const items = [];
    if (j.priority) items.push(detailItem("priority", "priority " + j.priority));
    if (j.cancel_requested) {
      items.push(detailItem("cancel", "cancel requested" + (j.cancel_reason ? ": " + j.cancel_reason : ""), "warn"));
    } else if (j.cancel_reason) {
      items.push(detailItem("cancel", "cancel reason: " + j.cancel_reason));
    }
    if (j.last_error) items.push(detailItem("last_error", "error: " + j.last_error, "bad"));
    if (j.progress !== null && j.progress !== undefined) {
      items.push(detailItem("progress", "progress: " + JSON.stringify(j.progress)));
      if (j.progress_ms) items.push(el("span", { class: "ago muted", "data-at-ms": String(j.progress_ms) }));
    }
    if (items.length === 0) return null;
    return el("tr", { class: "job-detail", "data-detail-for": j.id }, [el("td", { colspan: "8" }, items)]);
  }

  // The queues the job table shows, offered when naming a dead-letter queue.
  function renderQueues(jobs) {
    const queues = [...new Set(jobs.map((j) => j.queue))].sort();
    const sig = queues.join("\n");
    if (sig === state.queuesSig) return;
    state.queuesSig = sig;
    $("#queues").replaceChildren(...queues.map((q) => el("option", { value: q })));
  }

  // ---- rendering: a queue's dead letters ----

  function renderDead(queue, v) {
    // The queue or the page changed while this was asked: the next poll shows it.
    if (queue !== state.dead.queue) return;
    state.dead.next = v.next_page_token;
    $("#dead-next").hidden = !v.next_page_token;
    $("#dead-first").hidden = !state.dead.token;
    $("#dead-note").textContent = deadNote(queue, v.jobs.length);
    const sig = JSON.stringify([queue, state.dead.token, v.jobs.map(jobSignature)]);
    if (sig === state.deadSig) return;
    state.deadSig = sig;
    const rows = v.jobs.map(deadRow);
    if (rows.length === 0) {
      rows.push(el("tr", { class: "empty" }, [el("td", { colspan: "5", text: "No failed jobs." })]));
    }
    $("#dead tbody").replaceChildren(...rows);
  }

  function deadNote(queue, n) {
    const page = state.dead.token ? " on this page" : "";
    return n + " failed job" + (n === 1 ? "" : "s") + " of queue " + queue + page;
  }

  function deadRow(j) {
    const error = dash(j.last_error);
    return el("tr", { "data-job-id": j.id, "data-state": j.state }, [
      el("td", { "data-field": "id", class: "mono ellipsis", title: j.id, text: j.id }),
      cell("attempts", j.max_attempts ? j.attempts + " / " + j.max_attempts : String(j.attempts), "num mono"),
      el("td", { "data-field": "failed", class: "small muted" }, [el("span", { class: "ago", "data-at-ms": String(j.updated_ms) })]),
      el("td", { "data-field": "last_error", class: "error-text", title: error, text: short(error) }),
      el("td", { class: "actions" }, [actionButton("retry", "Retry", j.id, "Make this job pending again")]),
    ]);
  }

  function setDeadQueue(queue) {
    if (queue === state.dead.queue) return;
    state.dead = { queue, token: null, next: null };
    state.deadSig = null;
    $("#redrive").disabled = !queue;
    $("#dead tbody").replaceChildren();
    $("#dead-next").hidden = true;
    $("#dead-first").hidden = true;
    $("#dead-note").textContent = queue ? "loading\u2026" : "Name a queue to see its failed jobs.";
    poll();
  }

  function deadPage(token) {
    state.dead.token = token;
    state.deadSig = null;
    poll();
  }

  // ---- rendering: the rejections feed ----

  function renderRejections(v) {
    if (v.last_seq < state.lastSeq) {
      // The node restarted and numbers its feed afresh: start over.
      state.feed = [];
      state.lastSeq = 0;
      return;
    }
    for (const r of v.rejections) state.feed.unshift(r);
    state.feed.length = Math.min(state.feed.length, FEED_MAX);
    state.lastSeq = v.last_seq;
    const items = state.feed.map((r) => {
      const presented =
        (r.owner ? "owner " + r.owner : "") + (r.generation !== null ? " presented generation " + r.generation : "");
      const current =
        r.current_generation !== null && r.current_generation !== undefined
          ? "current generation " + r.current_generation + (r.current_owner ? " (owner " + r.current_owner + ")" : "")
          : "";
      return el(
        "li",
        {
          "data-seq": String(r.seq),
          "data-code": r.code,
          "data-job-id": r.job_id,
          class: "feed-item" + (r.code === "stale_lease" ? " stale" : ""),
          title: r.message,
        },
        [
          el("div", { class: "feed-head" }, [
            el("span", { class: "pill code code-" + r.code, text: r.code }),
            el("span", { class: "mono", text: r.command + " " + (r.job_id || r.queue || "") }),
            el("span", { class: "muted small ago", "data-at-ms": String(r.at_ms), text: "" }),
          ]),
          el("div", { class: "feed-body small", text: [presented.trim(), current].filter(Boolean).join(" \u00b7 ") || r.message }),
          el("div", { class: "muted small", text: "log index " + r.log_index }),
        ]
      );
    });
    $("#rejections").replaceChildren(...items);
    $("#rejections-empty").hidden = items.length > 0;
  }

  // ---- the event feed: followed by long polls, resumed from the last seq ----
  //
  // One loop for the page's life. It starts at /v1/cluster's event_seq (what comes
  // next) and asks for `after` = the last seq it handled, so after an error it asks
  // again from there: no gap, and an event at or below `after` is never shown twice.
  // Long polls rather than EventSource: a token travels in a header, which EventSource
  // cannot send. Events of every queue are followed; the queue filter only narrows
  // what the list shows, so the chart counts them all.

  function startFeed(eventSeq) {
    if (state.events.after !== null) return;
    state.events.after = Number(eventSeq) || 0;
    followFeed();
  }

  async function followFeed() {
    const ev = state.events;
    for (;;) {
      const query = { after: String(ev.after), limit: String(EVENTS_PAGE), wait_ms: String(EVENTS_WAIT_MS) };
      try {
        const page = await call("events", { query, timeoutMs: EVENTS_WAIT_MS + CALL_TIMEOUT_MS });
        acceptEvents(page);
        ev.failure = null;
      } catch (e) {
        ev.failure = e.message;
        ev.errors += 1;
        // Past the kept window the events in between are gone: say so and go on from
        // the oldest kept one (api.md "410 events_compacted").
        if (e.status === 410) await restartFeed();
        await sleep(e.retryAfterMs || EVENTS_RETRY_MS);
      }
      showFeedStatus();
    }
  }

  function sleep(ms) {
    return new Promise((resolve) => setTimeout(resolve, ms));
  }

  async function restartFeed() {
    try {
      const c = await call("cluster");
      state.events.after = Number(c.event_seq) || 0;
      state.events.gaps += 1;
    } catch (_) {
      // Asked again after the next failure.
    }
  }

  function acceptEvents(page) {
    const ev = state.events;
    const fresh = page.events.filter((e) => e.seq > ev.after);
    for (const e of fresh) {
      ev.list.unshift(e);
      countEvent(e);
    }
    if (ev.list.length > EVENTS_SHOWN_MAX) ev.list.length = EVENTS_SHOWN_MAX;
    ev.after = Math.max(ev.after, Number(page.next_after) || 0, ...fresh.map((e) => e.seq));
    if (fresh.length > 0) {
      renderEvents();
      if (fresh.some((e) => e.job_id === state.timelineJob)) poll();
    }
  }

  function showFeedStatus() {
    const ev = state.events;
    const s = $("#events-status");
    s.setAttribute("data-after", String(ev.after));
    s.setAttribute("data-errors", String(ev.errors));
    s.textContent = ev.failure
      ? "reconnecting after seq " + ev.after + " \u2014 " + ev.failure
      : "following after seq " + ev.after + (ev.gaps ? " (skipped past compacted events)" : "");
    s.classList.toggle("err", !!ev.failure);
  }

  function renderEvents() {
    const queue = $("#events-queue").value.trim();
    const shown = state.events.list.filter((e) => !queue || e.queue === queue);
    $("#events").replaceChildren(...shown.map(eventItem));
    $("#events-empty").hidden = shown.length > 0;
  }

  function eventItem(e) {
    const who = e.owner ? " \u00b7 " + e.owner : "";
    const detail = eventDetail(e);
    return el(
      "li",
      { "data-seq": String(e.seq), "data-event": e.event, "data-job-id": e.job_id, "data-queue": e.queue, class: "event-item" },
      [
        el("span", { class: "pill ev ev-" + e.event, text: e.event }),
        el("button", { type: "button", class: "link mono ellipsis", "data-show-job": e.job_id, title: "Show " + e.job_id + "'s timeline", text: e.job_id }),
        el("span", { class: "muted small", text: e.queue + " \u00b7 gen " + e.generation + who }),
        detail ? el("span", { class: "small detail", title: detail, text: short(detail) }) : "",
        el("span", { class: "muted small ago", "data-at-ms": String(e.cluster_time_ms) }),
        el("span", { class: "muted small seq mono", text: "#" + e.seq }),
      ]
    );
  }

  function eventDetail(e) {
    const d = e.detail || {};
    return ["error", "reason"].filter((k) => d[k]).map((k) => k + ": " + d[k]).join(" \u00b7 ");
  }

  // ---- SVG helpers (createElementNS and text nodes only) ----

  const SVG_NS = "http://www.w3.org/2000/svg";

  function svg(tag, attrs, children) {
    const e = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined) continue;
      if (k === "text") e.textContent = v;
      else e.setAttribute(k, String(v));
    }
    for (const c of children || []) e.append(c);
    return e;
  }

  // A tooltip: SVG's <title> child, as text.
  function svgTitle(text) {
    return svg("title", { text });
  }

  // A round step for about `n` ticks over `span` ms.
  function tickStep(span, n) {
    const raw = Math.max(span / n, 1);
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
    return 10 * p;
  }

  function clock(ms) {
    return new Date(ms).toISOString().slice(11, 19);
  }

  // ---- the throughput chart: events per second, counted here from the feed ----

  const SERIES = ["claimed", "completed", "expired"];

  function countEvent(e) {
    if (!SERIES.includes(e.event)) return;
    const second = Math.floor(e.cluster_time_ms / 1000);
    const b = state.rate.get(second) || { claimed: 0, completed: 0, expired: 0 };
    b[e.event] += 1;
    state.rate.set(second, b);
  }

  function renderThroughput() {
    const now = clusterNow();
    if (now === null) return;
    const last = Math.floor(now / 1000);
    const first = last - RATE_WINDOW_S + 1;
    for (const s of state.rate.keys()) if (s < first) state.rate.delete(s);
    const secs = Array.from({ length: RATE_WINDOW_S }, (_, i) => first + i);
    const rows = secs.map((s) => state.rate.get(s) || { claimed: 0, completed: 0, expired: 0 });
    const peak = Math.max(1, ...rows.flatMap((r) => SERIES.map((k) => r[k])));
    const g = { w: 560, h: 170, left: 36, right: 8, top: 10, bottom: 22 };
    const x = (i) => g.left + (i / (RATE_WINDOW_S - 1)) * (g.w - g.left - g.right);
    const y = (v) => g.h - g.bottom - (v / peak) * (g.h - g.top - g.bottom);
    const parts = [...rateGrid(g, x, y, peak, secs)];
    for (const k of SERIES) {
      const sum = rows.reduce((a, r) => a + r[k], 0);
      const points = rows.map((r, i) => x(i).toFixed(1) + "," + y(r[k]).toFixed(1)).join(" ");
      parts.push(svg("polyline", { class: "rate rate-" + k, points, "data-series": k, "data-sum": sum, "data-max": Math.max(...rows.map((r) => r[k])) }));
      // A dot on each second that saw any, so a one-second burst is not a hairline.
      rows.forEach((r, i) => {
        if (r[k] > 0) parts.push(svg("circle", { class: "dot-rate rate-" + k, cx: x(i), cy: y(r[k]), r: 2.5 }, [svgTitle(k + " " + r[k] + " at " + clock(secs[i] * 1000))]));
      });
    }
    const chart = svg("svg", { id: "throughput-svg", viewBox: "0 0 " + g.w + " " + g.h, role: "img", "aria-label": "claims, completions and expiries per second" }, parts);
    $("#throughput").replaceChildren(chart);
    $("#throughput-legend").replaceChildren(...SERIES.map((k) => {
      const sum = rows.reduce((a, r) => a + r[k], 0);
      return el("span", { class: "legend-item", "data-series": k }, [el("span", { class: "swatch rate-" + k }), el("span", { text: k + " " + sum })]);
    }));
  }

  // The chart's axes: counts on the left, cluster time (UTC) below.
  function* rateGrid(g, x, y, peak, secs) {
    const step = Math.max(1, Math.ceil(peak / 4));
    for (let v = 0; v <= peak; v += step) {
      yield svg("line", { class: "grid", x1: g.left, x2: g.w - g.right, y1: y(v), y2: y(v) });
      yield svg("text", { class: "axis", x: g.left - 4, y: y(v) + 3, "text-anchor": "end", text: String(v) });
    }
    for (let i = 0; i < secs.length; i++) {
      // Every 30 s, where the label fits inside the chart.
      if (secs[i] % 30 !== 0 || x(i) > g.w - g.right - 24 || x(i) < g.left + 24) continue;
      yield svg("line", { class: "tick", x1: x(i), x2: x(i), y1: g.h - g.bottom, y2: g.h - g.bottom + 4 });
      yield svg("text", { class: "axis", x: x(i), y: g.h - 6, "text-anchor": "middle", text: clock(secs[i] * 1000) });
    }
  }

  // ---- a job's ownership timeline ----
  //
  // From its history (oldest first): a lane per claim, from `claimed` to the event
  // that ended that generation's lease; a lease still held runs to now. Submissions,
  // cancel requests, retries (and the rest) are markers on a row above the lanes.

  const ENDINGS = ["completed", "released", "expired", "failed", "cancelled"];

  function timelineModel(events) {
    const lanes = [];
    const marks = [];
    let open = null;
    for (const e of events) {
      if (e.event === "claimed") {
        open = { generation: e.generation, owner: e.owner, from: e.cluster_time_ms, to: null, ending: "held", until: (e.detail || {}).lease_until_ms };
        lanes.push(open);
      } else if (open && ENDINGS.includes(e.event)) {
        open.to = e.cluster_time_ms;
        open.ending = e.event;
        open = null;
      } else {
        marks.push(e);
      }
    }
    return { lanes, marks };
  }

  function setTimelineJob(id) {
    state.timelineJob = id || null;
    $("#timeline-job").value = id || "";
    $("#timeline-note").textContent = id ? "loading\u2026" : "Name a job, or click one in the jobs table or the feed.";
    if (!id) $("#timeline").replaceChildren();
    poll();
  }

  function renderTimeline(id, v) {
    if (id !== state.timelineJob) return;
    if (v.events.length === 0) {
      // A job from before the cluster recorded events (api.md: version 1.1).
      $("#timeline-note").textContent = "No events recorded for " + id + ".";
      $("#timeline").replaceChildren();
      return;
    }
    const { lanes, marks } = timelineModel(v.events);
    const now = clusterNow();
    const times = v.events.map((e) => e.cluster_time_ms);
    if (lanes.some((l) => l.to === null) && now !== null) times.push(now);
    // The axis spans the events (at least TIMELINE_SPAN_MIN_MS), with a margin on the
    // right for the last bar's ending.
    const t0 = Math.min(...times);
    const span = Math.max(TIMELINE_SPAN_MIN_MS, Math.max(...times) - t0);
    const t1 = t0 + span * 1.08;
    $("#timeline-note").textContent = v.events.length + " events, " + lanes.length + " generation" + (lanes.length === 1 ? "" : "s") + ", from " + clock(t0) + " UTC";
    $("#timeline").replaceChildren(timelineSvg(lanes, marks, t0, t1, now));
  }

  function timelineSvg(lanes, marks, t0, t1, now) {
    const g = { w: 760, left: 150, right: 16, top: 8, marks: 26, lane: 28 };
    const height = g.top + g.marks + lanes.length * g.lane + 26;
    const x = (t) => g.left + ((t - t0) / (t1 - t0)) * (g.w - g.left - g.right);
    const axisY = g.top + g.marks + lanes.length * g.lane + 4;
    const parts = [...timeAxis(g, x, t0, t1, axisY)];
    parts.push(svg("text", { class: "lane-label muted", x: 4, y: g.top + 16, text: "events" }));
    lanes.forEach((l, i) => parts.push(laneOf(l, g.top + g.marks + i * g.lane, g, x, now)));
    marks.forEach((e) => parts.push(markOf(e, g.top + 12, x)));
    return svg("svg", { id: "timeline-svg", viewBox: "0 0 " + g.w + " " + height, role: "img", "aria-label": "ownership timeline" }, parts);
  }

  function* timeAxis(g, x, t0, t1, axisY) {
    const step = tickStep(t1 - t0, 6);
    yield svg("line", { class: "axis-line", x1: g.left, x2: g.w - g.right, y1: axisY, y2: axisY });
    for (let t = 0; t <= t1 - t0; t += step) {
      yield svg("line", { class: "grid", x1: x(t0 + t), x2: x(t0 + t), y1: g.top, y2: axisY + 4 });
      yield svg("text", { class: "axis", x: x(t0 + t), y: axisY + 16, "text-anchor": "middle", text: "+" + (step < 1000 ? Math.round(t) + " ms" : seconds(t)) });
    }
  }

  function laneOf(l, top, g, x, now) {
    const to = l.to !== null ? l.to : Math.max(l.from, now || l.from);
    const x1 = x(l.from);
    const width = Math.max(4, x(to) - x1);
    const label = "gen " + l.generation + " \u00b7 " + (l.owner || "?");
    const tip = label + ": claimed " + clock(l.from) + ", " + (l.to !== null ? l.ending + " " + clock(l.to) + " (held " + seconds(l.to - l.from) + ")" : "still held");
    // The ending after the bar, or before it where the chart ends too soon.
    const after = x1 + width + 64 <= g.w;
    const endLabel = svg("text", { class: "bar-label", x: after ? x1 + width + 4 : x1 - 4, y: top + 17, "text-anchor": after ? "start" : "end", text: l.ending });
    return svg("g", { class: "lane", "data-generation": l.generation, "data-owner": l.owner, "data-ending": l.ending }, [
      svgTitle(tip),
      svg("text", { class: "lane-label", x: 4, y: top + 17, text: label.length > LANE_LABEL_MAX ? label.slice(0, LANE_LABEL_MAX - 1) + "\u2026" : label }),
      svg("rect", { class: "bar end-" + l.ending, x: x1, y: top + 4, width, height: g.lane - 8, rx: 3 }),
      endLabel,
    ]);
  }

  function markOf(e, cy, x) {
    const cx = x(e.cluster_time_ms);
    const tip = e.event + " #" + e.seq + " at " + clock(e.cluster_time_ms) + (eventDetail(e) ? " \u2014 " + eventDetail(e) : "");
    return svg("g", { class: "mark", "data-marker": e.event }, [
      svgTitle(tip),
      svg("path", { class: "marker ev-" + e.event, d: "M" + cx + " " + (cy - 6) + " l6 6 l-6 6 l-6 -6 z" }),
    ]);
  }

  // ---- actions: cancel, retry, redrive (admin or operator token, api.md) ----

  // api.md "Availability errors": a 503 changed nothing, a 504 or a missing answer may
  // yet apply; each is tried again with the same Idempotency-Key, so at most once.
  async function callRetrying(what, route, opts) {
    const keyed = { ...opts, key: newKey() };
    for (let tries = 1; ; tries++) {
      try {
        return await call(route, keyed);
      } catch (e) {
        const again = e.status === undefined || e.status === 503 || e.status === 504;
        if (!again || tries >= ACTION_TRIES) throw e;
        showAction(what + " \u2192 " + e.message + "; trying again", "retrying");
        await new Promise((resolve) => setTimeout(resolve, e.retryAfterMs || 1000));
      }
    }
  }

  // Runs one action from `button`; its outcome, or the API's refusal, shows in the page.
  async function act(button, what, route, opts, outcome) {
    button.disabled = true;
    try {
      showAction(what + " \u2192 " + outcome(await callRetrying(what, route, opts)), "ok");
    } catch (e) {
      showAction(what + " \u2192 " + e.message + refusalHint(e.status), "error");
    } finally {
      button.disabled = false;
      state.jobsSig = null;
      state.deadSig = null;
      poll();
    }
  }

  function refusalHint(status) {
    if (status === 401 || status === 403) return " (this needs an admin or operator token)";
    // A timeout is not a refusal: the action may still have been applied.
    if (status === undefined || status === 504) return " (its outcome is unknown: the tables show what happened)";
    return "";
  }

  function showAction(text, outcome) {
    const box = $("#action-status");
    box.textContent = text;
    box.setAttribute("data-outcome", outcome);
    box.className = "notice " + outcome;
    box.hidden = false;
  }

  function cancelJob(button, id) {
    const body = { reason: CANCEL_REASON };
    act(button, "cancel " + id, "cancel", { params: { id }, body }, (j) =>
      j.state === "leased" ? "cancel requested: its holder stops at its next renew" : "now " + j.state
    );
  }

  function retryJob(button, id) {
    act(button, "retry " + id, "retry", { params: { id } }, (j) => "now " + j.state);
  }

  function redrive(button) {
    const queue = state.dead.queue;
    const body = { limit: REDRIVE_LIMIT };
    act(button, "redrive " + queue, "redrive", { params: { queue }, body }, (r) =>
      "retried " + r.retried + " failed job" + (r.retried === 1 ? "" : "s")
    );
  }

  // One listener per table: its rows are replaced as the jobs change.
  function onJobButton(e) {
    const button = e.target.closest("button[data-action]");
    if (!button) return;
    const id = button.getAttribute("data-job-id");
    if (button.getAttribute("data-action") === "cancel") cancelJob(button, id);
    else retryJob(button, id);
  }

  // ---- between polls: countdowns and "ago" stamps run on the estimated cluster time ----

  function tick() {
    const now = clusterNow();
    if (now === null) return;
    for (const td of document.querySelectorAll("#jobs td[data-lease-until-ms]")) {
      const left = Number(td.getAttribute("data-lease-until-ms")) - now;
      td.textContent = left > 0 ? seconds(left) : "expired";
      td.classList.toggle("expiring", left > 0 && left < 3000);
      td.classList.toggle("expired", left <= 0);
    }
    for (const td of document.querySelectorAll("#jobs td[data-run-at-ms]")) {
      const left = Number(td.getAttribute("data-run-at-ms")) - now;
      td.textContent = left > 0 ? "due in " + seconds(left) : "due now";
    }
    for (const s of document.querySelectorAll(".ago[data-at-ms]")) {
      const ago = now - Number(s.getAttribute("data-at-ms"));
      s.textContent = ago >= 0 ? seconds(ago) + " ago" : "";
    }
  }

  // ---- wiring ----

  $("#token").value = state.token;
  $("#token-form").addEventListener("submit", (e) => {
    e.preventDefault();
    state.token = $("#token").value.trim();
    if (state.token) sessionStorage.setItem(TOKEN_KEY, state.token);
    else sessionStorage.removeItem(TOKEN_KEY);
    poll();
  });
  $("#filters").addEventListener("submit", (e) => e.preventDefault());
  $("#filter-state").addEventListener("change", poll);
  $("#filter-queue").addEventListener("change", poll);
  $("#dead-form").addEventListener("submit", (e) => {
    e.preventDefault();
    setDeadQueue($("#dead-queue").value.trim());
  });
  $("#dead-queue").addEventListener("change", () => setDeadQueue($("#dead-queue").value.trim()));
  $("#dead-next").addEventListener("click", () => deadPage(state.dead.next));
  $("#dead-first").addEventListener("click", () => deadPage(null));
  $("#redrive").addEventListener("click", (e) => redrive(e.currentTarget));
  $("#jobs tbody").addEventListener("click", onJobButton);
  $("#jobs tbody").addEventListener("click", (e) => {
    const td = e.target.closest("td[data-field=id]");
    if (td) setTimelineJob(td.getAttribute("title"));
  });
  $("#events").addEventListener("click", (e) => {
    const b = e.target.closest("button[data-show-job]");
    if (b) setTimelineJob(b.getAttribute("data-show-job"));
  });
  $("#timeline-form").addEventListener("submit", (e) => {
    e.preventDefault();
    setTimelineJob($("#timeline-job").value.trim());
  });
  $("#events-form").addEventListener("submit", (e) => e.preventDefault());
  $("#events-queue").addEventListener("input", renderEvents);
  $("#events-queue").addEventListener("change", renderEvents);
  $("#dead tbody").addEventListener("click", onJobButton);

  poll();
  setInterval(poll, POLL_MS);
  setInterval(tick, TICK_MS);
})();
