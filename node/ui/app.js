// Leasehold dashboard: polls the node that served it about once a second.
//
// Calls (all relative to this node; any node works, a follower forwards the job list to
// the leader itself):
//   GET /v1/cluster                 this node's cluster time, for lease countdowns
//   GET /v1/cluster/members         every member's role, term and indexes, as seen here
//   GET /v1/jobs?queue=&state=      the job table (api.md)
//   GET /v1/cluster/rejections      the refused-commands feed, incrementally (`after`)
// Each call fails on its own: what did answer is still shown, the banner names the rest.
"use strict";

(function () {
  const POLL_MS = 1000;
  const TICK_MS = 200;
  const CALL_TIMEOUT_MS = 5000;
  const JOBS_LIMIT = 200;
  const FEED_MAX = 200;
  const TOKEN_KEY = "leasehold.token";

  const $ = (sel) => document.querySelector(sel);

  const state = {
    token: sessionStorage.getItem(TOKEN_KEY) || "",
    inFlight: false,
    // Cluster time at `localBase` (performance.now()), from the last /v1/cluster.
    clusterBase: null,
    localBase: 0,
    nodeId: null,
    feed: [], // newest first
    lastSeq: 0,
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

  function clusterNow() {
    if (state.clusterBase === null) return null;
    return state.clusterBase + (performance.now() - state.localBase);
  }

  function seconds(ms) {
    const s = ms / 1000;
    return s < 60 ? s.toFixed(1) + " s" : Math.floor(s / 60) + " m " + Math.floor(s % 60) + " s";
  }

  // ---- calls ----

  async function call(path) {
    const headers = { Accept: "application/json" };
    if (state.token) headers.Authorization = "Bearer " + state.token;
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), CALL_TIMEOUT_MS);
    try {
      const resp = await fetch(path, { headers, signal: ctl.signal, cache: "no-store" });
      const text = await resp.text();
      let body = null;
      try {
        body = text ? JSON.parse(text) : null;
      } catch (_) {
        body = null;
      }
      if (!resp.ok) {
        const err = body && body.error ? body.error : { code: "http_" + resp.status, message: text };
        const e = new Error(resp.status + " " + err.code + ": " + err.message);
        e.status = resp.status;
        throw e;
      }
      return body;
    } catch (e) {
      if (e.name === "AbortError") throw new Error("no answer within " + CALL_TIMEOUT_MS / 1000 + " s");
      throw e;
    } finally {
      clearTimeout(timer);
    }
  }

  function jobsPath() {
    const q = new URLSearchParams({ limit: String(JOBS_LIMIT) });
    const queue = $("#filter-queue").value.trim();
    const st = $("#filter-state").value;
    if (queue) q.set("queue", queue);
    if (st) q.set("state", st);
    return "/v1/jobs?" + q.toString();
  }

  async function poll() {
    if (state.inFlight) return;
    state.inFlight = true;
    // [what, pending answer, renderer, the card showing it]
    const calls = [
      ["GET /v1/cluster", call("/v1/cluster"), renderCluster, null],
      ["GET /v1/cluster/members", call("/v1/cluster/members"), renderMembers, "#members-card"],
      ["GET /v1/jobs", call(jobsPath()), renderJobs, "#jobs-card"],
      [
        "GET /v1/cluster/rejections",
        call("/v1/cluster/rejections?after=" + state.lastSeq + "&limit=" + FEED_MAX),
        renderRejections,
        "#rejections-card",
      ],
    ];
    const failures = [];
    let answered = 0;
    for (const [what, pending, render, card] of calls) {
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
    showFailures(failures);
    if (answered > 0) {
      const now = new Date();
      const lu = $("#last-updated");
      lu.textContent = "updated " + now.toLocaleTimeString();
      lu.setAttribute("data-updated-ms", String(now.getTime()));
    }
    $("#live-dot").className = "dot " + (failures.length === 0 ? "ok" : answered > 0 ? "warn" : "bad");
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

  // ---- rendering ----

  function renderCluster(c) {
    state.clusterBase = c.cluster_time_ms;
    state.localBase = performance.now();
    state.nodeId = c.node_id;
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

  function renderJobs(v) {
    const rows = v.jobs.map((j) => {
      // Counts down between polls (tick); "—" when no live lease exists.
      const leaseCell = cell("lease", "\u2014", "num mono lease");
      if (j.state === "leased" && j.lease_until_ms !== null) {
        leaseCell.setAttribute("data-lease-until-ms", String(j.lease_until_ms));
      }
      return el("tr", { "data-job-id": j.id, "data-state": j.state }, [
        el("td", { "data-field": "id", class: "mono ellipsis", title: j.id, text: j.id }),
        cell("queue", j.queue),
        el("td", { "data-field": "state" }, [el("span", { class: "pill state-" + j.state, text: j.state })]),
        cell("owner", dash(j.owner), "mono"),
        cell("generation", String(j.generation), "num mono"),
        cell("attempts", j.max_attempts ? j.attempts + " / " + j.max_attempts : String(j.attempts), "num mono"),
        leaseCell,
      ]);
    });
    if (rows.length === 0) {
      rows.push(el("tr", { class: "empty" }, [el("td", { colspan: "7", text: "No jobs match." })]));
    }
    $("#jobs tbody").replaceChildren(...rows);
    $("#jobs-note").textContent =
      v.jobs.length + " job" + (v.jobs.length === 1 ? "" : "s") + " shown" +
      (v.next_page_token ? " (the first " + JOBS_LIMIT + "; narrow the filters to see others)" : "");
  }

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

  // Between polls: lease countdowns and "ago" stamps run on the estimated cluster time.
  function tick() {
    const now = clusterNow();
    if (now === null) return;
    for (const td of document.querySelectorAll("#jobs td[data-lease-until-ms]")) {
      const left = Number(td.getAttribute("data-lease-until-ms")) - now;
      td.textContent = left > 0 ? seconds(left) : "expired";
      td.classList.toggle("expiring", left > 0 && left < 3000);
      td.classList.toggle("expired", left <= 0);
    }
    for (const s of document.querySelectorAll("#rejections .ago")) {
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

  poll();
  setInterval(poll, POLL_MS);
  setInterval(tick, TICK_MS);
})();
