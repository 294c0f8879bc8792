// once's web console: a small program over the gate's public JSON API
// (docs/api.md). The tenant token (and the operator token of the cluster
// view) live in this tab's sessionStorage and travel only in the
// Authorization header; views are addressed by the URL's fragment, which no
// request carries.
"use strict";
(function () {
  var store = window.sessionStorage;
  var TOKEN = "once.token", OPTOKEN = "once.operatorToken", POLL = "once.poll";
  var STATES = ["queued", "running", "succeeded", "failed", "dead", "cancelled"];
  var timer = null, generation = 0;
  // acting holds, per job (its path), the action in flight (busy) and the
  // keys kept of actions whose outcome the console does not know: a view
  // drawn again finds them (see viewJob's act). A job's entry goes once it
  // holds neither (an action answered, a key dropped), and at most
  // ACTING_MAX jobs are held: past that, the least recently used with no
  // action in flight is forgotten, so a tab left open does not grow.
  var acting = new Map(), ACTING_MAX = 50;
  // jobShown is the job view drawn last ({path, redraw}): an action's
  // answer reads the job again for it.
  var jobShown = null;
  // gateDatacenter is the gate's own datacenter (GET /readyz), whose copy
  // of a job its cancel and retry act on; "" until read.
  var gateDatacenter = "";
  // Polls wait what a Retry-After asks, at most RETRY_AFTER_MAX ms.
  var RETRY_AFTER_MAX = 60000;

  function $(id) { return document.getElementById(id); }

  // el builds an element: attrs are set as attributes (never as HTML), and
  // children are nodes or strings (as text).
  function el(tag, attrs) {
    var e = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) {
        if (attrs[k] === null || attrs[k] === undefined || attrs[k] === false) return;
        if (k === "text") e.textContent = attrs[k];
        else if (k === "onclick" || k === "onsubmit" || k === "onchange") e.addEventListener(k.slice(2), attrs[k]);
        else e.setAttribute(k, attrs[k] === true ? "" : attrs[k]);
      });
    }
    for (var i = 2; i < arguments.length; i++) {
      var c = arguments[i];
      if (c === null || c === undefined) continue;
      e.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
    }
    return e;
  }

  function message(text, kind) {
    var m = $("message");
    m.textContent = text || "";
    m.className = text ? (kind || "error") : "";
  }

  // ApiError is a failed call: its status, RFC 9457 problem and
  // Retry-After ("" when none).
  function ApiError(status, problem, retryAfter) {
    this.status = status;
    this.problem = problem || {};
    this.retryAfter = retryAfter || "";
    this.message = (problem && (problem.detail || problem.title)) || ("HTTP " + status);
  }

  // call asks the gate: path is under /v1, token the bearer token to send.
  function call(method, path, token, headers) {
    var h = { "Accept": "application/json" };
    if (token) h["Authorization"] = "Bearer " + token;
    Object.keys(headers || {}).forEach(function (k) { h[k] = headers[k]; });
    return fetch(path, { method: method, headers: h, credentials: "omit", cache: "no-store", referrerPolicy: "no-referrer" })
      .then(function (resp) {
        return resp.text().then(function (body) {
          var data = null;
          try { data = body ? JSON.parse(body) : null; } catch (e) { data = null; }
          if (!resp.ok) throw new ApiError(resp.status, data, resp.headers.get("Retry-After"));
          return { data: data, headers: resp.headers };
        });
      });
  }

  // outcomeUnknown: whether a failed call may have been applied, or may be
  // sent again as it is (the same key is then a replay, never a second
  // action).
  function outcomeUnknown(err) {
    if (!(err instanceof ApiError)) return true; // no answer
    return err.status >= 500 || err.status === 429 || err.problem.code === "request_in_progress";
  }

  // onceConsole.held() says how many jobs and keys acting holds (counts
  // only: the browser tests watch it stay bounded).
  window.onceConsole = Object.freeze({ held: function () {
    var keys = 0;
    acting.forEach(function (s) { keys += Object.keys(s.keys).length; });
    return { jobs: acting.size, keys: keys };
  } });

  // held is the job's entry in acting, or a new one not held yet.
  function held(path) { return acting.get(path) || { busy: false, keys: {} }; }
  // hold keeps the job's entry as the most recently used, and forgets the
  // least recently used past ACTING_MAX (never one with an action in
  // flight: its answer is still to come).
  function hold(path, st) {
    acting.delete(path);
    acting.set(path, st);
    acting.forEach(function (s, p) { if (acting.size > ACTING_MAX && !s.busy && p !== path) acting.delete(p); });
  }
  // release forgets the job's entry once it holds no action in flight and
  // no key.
  function release(path, st) {
    if (!st.busy && !Object.keys(st.keys).length && acting.get(path) === st) acting.delete(path);
  }

  // retryAfterMs is how long a Retry-After asks to wait (delta-seconds or
  // an HTTP date), in ms, at most RETRY_AFTER_MAX; 0 when none.
  function retryAfterMs(err) {
    if (!(err instanceof ApiError) || !err.retryAfter) return 0;
    var v = err.retryAfter.trim(), ms = /^\d+$/.test(v) ? Number(v) * 1000 : Date.parse(v) - Date.now();
    return isNaN(ms) ? 0 : Math.min(Math.max(ms, 0), RETRY_AFTER_MAX);
  }

  // ownDatacenter reads the gate's own datacenter once (GET /readyz, which
  // names it): the copy of a job its cancel and retry act on. It resolves
  // "" while the gate cannot say (not ready: no leader, a federation
  // forming), and is read again then.
  function ownDatacenter() {
    if (gateDatacenter) return Promise.resolve(gateDatacenter);
    return call("GET", "/readyz", "").then(function (res) {
      gateDatacenter = (res.data && res.data.datacenter) || "";
      return gateDatacenter;
    }, function () { return ""; });
  }

  function token() { return store.getItem(TOKEN) || ""; }
  function operatorToken() { return store.getItem(OPTOKEN) || ""; }

  // route parses the fragment: #/view/arg?query.
  function route() {
    var h = location.hash.replace(/^#\/?/, "");
    var q = "", i = h.indexOf("?");
    if (i >= 0) { q = h.slice(i + 1); h = h.slice(0, i); }
    // A part that is not valid percent-encoding (a link mangled by hand) is
    // taken as it is: decodeURIComponent would throw, and no view be drawn.
    var parts = h.split("/").map(function (p) { try { return decodeURIComponent(p); } catch (e) { return p; } });
    return { view: parts[0] || "jobs", arg: parts[1] || "", query: new URLSearchParams(q) };
  }

  function go(view, arg, query) {
    var h = "#/" + view + (arg ? "/" + encodeURIComponent(arg) : "");
    var q = query ? query.toString() : "";
    var target = q ? h + "?" + q : h;
    if (location.hash === target) render(); // the same view: read it again
    else location.hash = target;
  }

  function fmtTime(s) { return s ? s.replace("T", " ").replace("Z", " UTC") : ""; }

  function age(s) {
    if (!s) return "";
    var secs = Math.max(0, Math.round((Date.now() - Date.parse(s)) / 1000));
    if (secs < 120) return secs + " s";
    if (secs < 7200) return Math.round(secs / 60) + " min";
    if (secs < 172800) return Math.round(secs / 3600) + " h";
    return Math.round(secs / 86400) + " d";
  }

  function stateBadge(job) {
    var st = job.state || job.status || "";
    return el("span", { "class": "state state-" + st, "data-state": st, text: st });
  }

  function json(v) { return el("pre", { "class": "mono" }, JSON.stringify(v, null, 2)); }

  // ---------- sign-in ----------
  function viewSignin(main) {
    var t = el("input", { id: "signin-token", type: "password", autocomplete: "off", spellcheck: "false" });
    var o = el("input", { id: "signin-operator", type: "password", autocomplete: "off", spellcheck: "false" });
    t.value = token(); o.value = operatorToken();
    main.appendChild(el("form", { "class": "signin", id: "signin", onsubmit: function (ev) {
      ev.preventDefault();
      store.setItem(TOKEN, t.value.trim());
      store.setItem(OPTOKEN, o.value.trim());
      message("");
      go("jobs");
    } },
      el("h2", { text: "Sign in" }),
      el("label", null, "Tenant token (the gate's bearer token; leave empty on a gate without a token file)", t),
      el("label", null, "Operator token (the cluster view; optional)", o),
      el("button", { type: "submit", "class": "primary", id: "signin-submit", text: "Sign in" }),
      el("p", { "class": "note", text: "The tokens stay in this tab (sessionStorage) and are sent only in the Authorization header of the console's calls to this gate." })));
  }

  // ---------- jobs ----------
  function viewJobs(main, r, gen) {
    var q = r.query;
    var state = el("select", { id: "f-state", name: "state" }, el("option", { value: "", text: "any" }));
    STATES.forEach(function (s) { state.appendChild(el("option", { value: s, text: s })); });
    state.value = q.get("state") || "";
    var type = el("input", { id: "f-type", name: "type", placeholder: "any", size: 14 });
    type.value = q.get("type") || "";
    var dc = el("input", { id: "f-datacenter", name: "datacenter", placeholder: "this gate's", size: 10 });
    dc.value = q.get("datacenter") || "";
    var key = el("input", { id: "f-key", name: "key", placeholder: "Idempotency-Key", size: 30 });
    var limit = el("select", { id: "f-limit" });
    ["20", "50", "100", "500"].forEach(function (n) { limit.appendChild(el("option", { value: n, text: n })); });
    limit.value = q.get("limit") || "50";
    // Newest first unless the page asks for order=asc; a cursor (after=)
    // pages in its own page's order.
    var order = el("select", { id: "f-order" },
      el("option", { value: "desc", text: "newest first" }), el("option", { value: "asc", text: "oldest first" }));
    order.value = q.get("order") === "asc" ? "asc" : "desc";
    main.appendChild(el("form", { "class": "filters", id: "filters", onsubmit: function (ev) {
      ev.preventDefault();
      if (key.value.trim()) { findKey(key.value.trim(), dc.value.trim()); return; }
      var nq = new URLSearchParams();
      if (state.value) nq.set("state", state.value);
      if (type.value.trim()) nq.set("type", type.value.trim());
      if (dc.value.trim()) nq.set("datacenter", dc.value.trim());
      nq.set("limit", limit.value);
      if (order.value === "asc") nq.set("order", "asc");
      go("jobs", "", nq);
    } },
      el("label", null, "state", state), el("label", null, "type", type), el("label", null, "datacenter", dc),
      el("label", null, "idempotency key", key), el("label", null, "per page", limit), el("label", null, "order", order),
      el("button", { type: "submit", id: "f-apply", text: "Show" })));
    var tbody = el("tbody");
    main.appendChild(el("table", { id: "jobs" },
      el("thead", null, el("tr", null, el("th", { text: "job" }), el("th", { text: "type" }), el("th", { text: "state" }),
        el("th", { text: "attempts" }), el("th", { text: "created" }), el("th", { text: "idempotency key" }))), tbody));
    var pageNo = Number(q.get("page") || "1");
    // Previous goes back in the tab's history, to the page Next came from:
    // Next marks the history entry of the page it opens; a page opened at
    // its address (a bookmark, a link) came from none, and offers none.
    var cameFrom = !!(history.state && history.state.from);
    var prev = el("button", { type: "button", id: "page-prev", text: "◀ Previous", disabled: pageNo <= 1 || !cameFrom,
      onclick: function () { history.back(); } });
    var next = el("button", { type: "button", id: "page-next", text: "Next ▶", disabled: true });
    var info = el("span", { id: "page-info" });
    main.appendChild(el("div", { "class": "pager" }, prev, info, next));
    main.appendChild(el("p", { "class": "note", text: (order.value === "asc" ? "Oldest" : "Newest") +
      " first, in admission order; Next follows the cursor the gate returns." }));

    var heavy = !!(q.get("state") && q.get("type"));
    if (heavy) {
      main.appendChild(el("p", { "class": "note", id: "manual-refresh", text: "State and type together walk the state's jobs of every type: this view does not refresh by itself; press Show to read it again." }));
    }
    var api = new URLSearchParams();
    ["state", "type", "datacenter", "after"].forEach(function (k) { if (q.get(k)) api.set(k, q.get(k)); });
    api.set("limit", limit.value);
    api.set("order", order.value);
    var refresh = function () {
      return call("GET", "/v1/jobs?" + api.toString(), token()).then(function (res) {
        if (gen !== generation) return;
        var jobs = res.data.jobs || [];
        tbody.textContent = "";
        if (!jobs.length) tbody.appendChild(el("tr", { "class": "empty" }, el("td", { colspan: 6, text: "no jobs" })));
        jobs.forEach(function (j) {
          var dq = q.get("datacenter") ? "?datacenter=" + encodeURIComponent(q.get("datacenter")) : "";
          tbody.appendChild(el("tr", { "data-job-id": j.job_id },
            el("td", { "class": "mono" }, el("a", { href: "#/job/" + encodeURIComponent(j.job_id) + dq, text: j.job_id })),
            el("td", { text: j.type }), el("td", { "class": "state-cell" }, stateBadge(j)),
            el("td", { text: j.attempts === undefined ? "" : j.attempts }), el("td", { text: fmtTime(j.created_at) }),
            el("td", { "class": "mono", text: j.idempotency_key })));
        });
        info.textContent = "page " + pageNo + " · " + jobs.length + " jobs";
        next.disabled = !res.data.next;
        next.onclick = function () {
          var nq = new URLSearchParams(q.toString());
          nq.set("after", res.data.next); nq.set("page", String(pageNo + 1));
          var from = location.hash;
          go("jobs", "", nq);
          history.replaceState({ from: from }, "");
        };
      });
    };
    refresh.once = heavy;
    return refresh;
  }

  function findKey(k, dc) {
    var p = "/v1/idempotency-keys/" + encodeURIComponent(k) + (dc ? "?datacenter=" + encodeURIComponent(dc) : "");
    call("GET", p, token()).then(function (res) {
      if (res.data.job_id) go("job", res.data.job_id, dc ? new URLSearchParams({ datacenter: dc }) : null);
      else message("key " + k + " is " + res.data.state + " (no job)", "error");
    }, showError);
  }

  // ---------- one job ----------
  function viewJob(main, r, gen) {
    var id = r.arg, dc = r.query.get("datacenter") || "";
    var box = el("div", { id: "job" });
    main.appendChild(el("h2", null, "Job ", el("span", { "class": "mono", id: "job-id", text: id })));
    var actions = el("div", { "class": "actions" });
    var cancel = el("button", { type: "button", id: "btn-cancel", "class": "danger", text: "Cancel", disabled: true });
    var retry = el("button", { type: "button", id: "btn-retry", "class": "primary", text: "Retry", disabled: true });
    var elsewhere = el("span", { "class": "note", id: "actions-note" });
    actions.appendChild(cancel); actions.appendChild(retry); actions.appendChild(elsewhere);
    main.appendChild(actions);
    main.appendChild(box);
    var path = "/v1/jobs/" + encodeURIComponent(id);
    // One Idempotency-Key per action: while an action is in flight its
    // buttons stay disabled (busy), whatever a poll reads meanwhile; an
    // action whose outcome the console does not know (no answer, 5xx, 429,
    // request_in_progress) keeps its key while the job reads as it did when
    // the action was sent (its state and attempts: shown), so the next click
    // is a replay, never a second action. An answer the API decided, or a
    // read showing the job changed since, drops the key. Both live in
    // acting (held while they exist, at most ACTING_MAX jobs), so that a
    // view of the job drawn again keeps them, and the answer redraws the
    // job's latest view (jobShown).
    var st = held(path), shown = "";
    function act(name) {
      var k = st.keys[name] || (st.keys[name] = { seen: shown, key: "console-" + (crypto.randomUUID ? crypto.randomUUID() :
        String(Date.now()) + Math.random().toString(16).slice(2)) });
      st.busy = true;
      hold(path, st);
      cancel.disabled = retry.disabled = true;
      call("POST", path + "/" + name, token(), { "Idempotency-Key": k.key }).then(function () {
        delete st.keys[name];
        message(name === "cancel" ? "Cancelled." : "Queued for another attempt.", "ok");
      }, function (err) {
        if (!outcomeUnknown(err)) delete st.keys[name];
        showError(err);
      }).then(function () {
        st.busy = false;
        release(path, st);
        return jobShown && jobShown.path === path ? jobShown.redraw() : null;
      }).then(null, showError);
    }
    // redraw reads the job again for its latest view, if still shown.
    jobShown = { path: path, redraw: function () { return gen === generation ? refresh() : null; } };
    cancel.addEventListener("click", function () { act("cancel"); });
    retry.addEventListener("click", function () { act("retry"); });
    // copyPath reads one datacenter's copy of the job.
    function copyPath(d) { return path + "?datacenter=" + encodeURIComponent(d); }
    // copies reads the copy of every datacenter the submission named
    // (named_datacenters; absent for a job of one datacenter), each with
    // ?datacenter=NAME, reusing the copy j already read; a copy that cannot
    // be read carries its error.
    function copies(j) {
      var named = j.named_datacenters || [];
      var own = Object.keys(j.datacenters || {});
      return Promise.all(named.map(function (d) {
        if (own.length === 1 && own[0] === d) return { dc: d, job: j };
        return call("GET", copyPath(d), token()).then(function (res) { return { dc: d, job: res.data }; },
          function (err) { return { dc: d, err: err }; });
      }));
    }
    // copyTabs is one tab per named datacenter, each a link to that copy's
    // page with the copy's state; the tab of the copy shown is current.
    function copyTabs(j, cs) {
      var shown = Object.keys(j.datacenters || {});
      var nav = el("nav", { "class": "tabs", id: "job-copies", "aria-label": "the job's copy in each datacenter" });
      cs.forEach(function (c) {
        var current = shown.length === 1 && shown[0] === c.dc;
        var failed = !c.err ? "" : c.err instanceof ApiError ? (c.err.problem.code || "HTTP " + c.err.status) : "unreachable";
        var st = c.err ? el("span", { "class": "state state-unknown", "data-state": "", text: failed }) : stateBadge(c.job);
        nav.appendChild(el("a", { href: "#/job/" + encodeURIComponent(id) + "?datacenter=" + encodeURIComponent(c.dc),
          "class": current ? "tab current" : "tab", "aria-current": current ? "page" : null, "data-datacenter": c.dc,
          title: c.err ? String(c.err.message || c.err) : null }, c.dc + " ", st));
      });
      return nav;
    }
    // An action reaches the copy of the gate's own datacenter, whatever
    // copy is shown (the API's cancel and retry take no datacenter): the
    // page offers them only on that copy, and says why not on another (a
    // tab of another datacenter, or a job held only elsewhere, such as an
    // omitted datacenters list whose home is another datacenter).
    function dcsOf(j) { return Object.keys((j && j.datacenters) || {}).sort().join(","); }
    function whyNot(j, own) {
      var copy = dcsOf(j), named = j.named_datacenters || [];
      if (!own) return "Cancel and retry act on the copy of this gate's datacenter, which the gate does not name now (GET /readyz): they are offered once it does.";
      if (copy === own) return "";
      if (named.indexOf(own) >= 0) return "Cancel and retry act on the copy of this gate's datacenter (" + own + "), not on the copy shown (" +
        copy + "): act on this copy through a gate of " + copy + ".";
      return "This job is held in " + copy + " only: cancel and retry through this gate act on its own datacenter (" + own +
        "), which holds no copy of it. Act on it through a gate of " + copy + ".";
    }
    function refresh() {
      return call("GET", path + (dc ? "?datacenter=" + encodeURIComponent(dc) : ""), token()).then(function (res) {
        return Promise.all([copies(res.data), ownDatacenter()]).then(function (r) { return { j: res.data, cs: r[0], own: r[1] }; });
      }).then(function (got) {
        if (gen !== generation) return;
        var j = got.j, why = whyNot(j, got.own), here = !why;
        shown = j.state + "/" + j.attempts;
        // Keys were sent from the copy the actions reach: only a read of
        // that copy says whether the job changed since.
        if (here) Object.keys(st.keys).forEach(function (a) { if (!st.busy && st.keys[a].seen !== shown) delete st.keys[a]; });
        release(path, st);
        cancel.disabled = st.busy || !here || j.state !== "queued";
        retry.disabled = st.busy || !here || !(j.state === "failed" || j.state === "dead");
        elsewhere.textContent = why;
        box.textContent = "";
        if (got.cs.length) box.appendChild(copyTabs(j, got.cs));
        var dl = el("dl", { "class": "kv" });
        function row(k, v, id) { dl.appendChild(el("dt", { text: k })); dl.appendChild(el("dd", id ? { id: id } : null, v)); }
        row("state", stateBadge(j), "job-state");
        row("type", j.type, "job-type");
        row("idempotency key", el("span", { "class": "mono", text: j.idempotency_key }), "job-key");
        row("admission", j.status);
        row("created", fmtTime(j.created_at) + " (" + age(j.created_at) + " ago)");
        row("attempts", j.attempts === undefined ? "—" : String(j.attempts), "job-attempts");
        var dcs = Object.keys(j.datacenters || {}).sort().map(function (d) { return d + ": " + j.datacenters[d].status; });
        row("datacenters", dcs.join(", "), "job-datacenters");
        Object.keys(j).forEach(function (k) {
          if (["job_id", "type", "status", "idempotency_key", "created_at", "datacenters", "payload", "state", "attempts", "result", "error",
            "named_datacenters"].indexOf(k) < 0) {
            row(k.replace(/_/g, " "), typeof j[k] === "object" ? json(j[k]) : String(j[k]));
          }
        });
        row("payload", json(j.payload), "job-payload");
        if ("result" in j) row("result", json(j.result), "job-result");
        if ("error" in j) row("error", el("pre", { "class": "mono", text: j.error }), "job-error");
        box.appendChild(dl);
      });
    }
    return refresh;
  }

  // ---------- queues ----------
  // Per type: the queued and running jobs and the age of the oldest queued
  // one, counted in the first page (1000 jobs) of each state: two list
  // calls whatever the tenant holds (a filter of state and type together
  // would walk the state's jobs of every other type). Beyond a page the
  // counts are those of the oldest 1000 jobs of the state, marked "+".
  function viewQueues(main, r, gen) {
    var types = el("input", { id: "q-types", placeholder: "type,type", size: 40 });
    types.value = r.query.get("types") || "";
    main.appendChild(el("form", { "class": "filters", onsubmit: function (ev) {
      ev.preventDefault();
      go("queues", "", new URLSearchParams({ types: types.value.replace(/\s+/g, "") }));
    } }, el("label", null, "job types (comma-separated; empty: every type with a queued or running job)", types),
      el("button", { type: "submit", text: "Show" })));
    var tbody = el("tbody");
    main.appendChild(el("table", { id: "queues" }, el("thead", null, el("tr", null,
      el("th", { text: "type" }), el("th", { text: "queued" }), el("th", { text: "running" }), el("th", { text: "oldest queued" }))), tbody));
    var note = el("p", { "class": "note", text: "Counted in the oldest 1000 queued and the oldest 1000 running jobs; the cluster view has the datacenter's totals." });
    main.appendChild(note);
    function page(state) {
      return call("GET", "/v1/jobs?" + new URLSearchParams({ state: state, limit: "1000" }).toString(), token())
        .then(function (res) { return { jobs: res.data.jobs || [], more: !!res.data.next }; });
    }
    return function refresh() {
      return Promise.all([page("queued"), page("running")]).then(function (pages) {
        if (gen !== generation) return;
        var rows = {}, wanted = types.value.split(",").filter(Boolean);
        function row(t) { return rows[t] || (rows[t] = { queued: 0, running: 0, oldest: null }); }
        wanted.forEach(row);
        pages[0].jobs.forEach(function (j) { var x = row(j.type); x.queued++; if (!x.oldest) x.oldest = j.created_at; });
        pages[1].jobs.forEach(function (j) { row(j.type).running++; });
        var names = (wanted.length ? wanted : Object.keys(rows)).slice().sort();
        tbody.textContent = "";
        if (!names.length) tbody.appendChild(el("tr", { "class": "empty" }, el("td", { colspan: 4, text: "no queued or running jobs" })));
        names.forEach(function (t) {
          var x = rows[t];
          tbody.appendChild(el("tr", { "data-type": t }, el("td", { text: t }),
            el("td", { "class": "queued", text: x.queued + (pages[0].more ? "+" : "") }),
            el("td", { "class": "running", text: x.running + (pages[1].more ? "+" : "") }),
            el("td", { "class": "oldest", text: x.oldest ? age(x.oldest) : "—" })));
        });
      });
    };
  }

  // ---------- cluster ----------
  function viewCluster(main, r, gen) {
    var box = el("div", { id: "cluster" });
    main.appendChild(box);
    if (!operatorToken()) {
      main.appendChild(el("p", { "class": "note", text: "The cluster view needs an operator token: sign in with one (a gate without token files asks for none)." }));
    }
    function meter(used, max, unit) {
      var f = unit === "bytes" ? bytes : String;
      if (!max) return el("span", { text: f(used) + " (no bound)" });
      return el("span", null, el("meter", { min: 0, max: max, value: used, high: max * 0.8 }), " " + f(used) + " / " + f(max));
    }
    function bytes(n) {
      var units = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
      while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
      return (i ? n.toFixed(1) : String(n)) + " " + units[i];
    }
    return function refresh() {
      return call("GET", "/v1/cluster", operatorToken()).then(function (res) {
        if (gen !== generation) return;
        var c = res.data;
        box.textContent = "";
        var l = c.leader || {};
        box.appendChild(el("h2", { text: "Datacenter " + c.datacenter }));
        box.appendChild(el("dl", { "class": "kv" },
          el("dt", { text: "leader" }), el("dd", { id: "cluster-leader", text: l.node_id ? l.node_id + " (term " + l.term + ")" : "none" }),
          el("dt", { text: "commit index" }), el("dd", { text: String(l.commit_index || 0) }),
          el("dt", { text: "ledger time" }), el("dd", { text: fmtTime(l.ledger_time) }),
          el("dt", { text: "jobs" }), el("dd", { id: "cluster-queues", text: l.queues ? STATES.map(function (s) { return s + " " + l.queues[s]; }).join(" · ") : "" })));
        var b = l.budgets;
        if (b) {
          box.appendChild(el("h2", { text: "Budgets (leader)" }));
          box.appendChild(el("dl", { "class": "kv", id: "cluster-budgets" },
            el("dt", { text: "entries" }), el("dd", null, meter(b.entries, b.max_entries)),
            el("dt", { text: "bytes" }), el("dd", null, meter(b.bytes, b.max_bytes, "bytes")),
            el("dt", { text: "queued jobs" }), el("dd", null, meter(b.queued, b.max_queued)),
            el("dt", { text: "outbox" }), el("dd", null, meter(b.outbox, b.outbox_max))));
        }
        box.appendChild(el("h2", { text: "Managers" }));
        var mt = el("tbody");
        (c.managers || []).forEach(function (m) {
          var s = m.status || {};
          var offsets = s.clock_offsets_seconds ? Object.keys(s.clock_offsets_seconds).sort().map(function (k) {
            return k + " " + s.clock_offsets_seconds[k].toFixed(3) + " s"; }).join(", ") : "";
          mt.appendChild(el("tr", { "data-manager": s.node_id || m.addr },
            el("td", { "class": "mono", text: m.addr }), el("td", { text: s.node_id || "" }),
            el("td", { text: m.error ? "unreachable: " + m.error : (s.raft_state || "") + (s.is_leader ? " ★" : "") }),
            el("td", { text: s.term === undefined ? "" : String(s.term) }), el("td", { text: s.commit_index === undefined ? "" : String(s.commit_index) }),
            el("td", { text: s.clock_group_offset_seconds === undefined ? "" : s.clock_group_offset_seconds.toFixed(3) + " s" }),
            el("td", { "class": "mono", text: offsets }),
            el("td", { text: s.budgets ? String(s.budgets.outbox) : "" })));
        });
        box.appendChild(el("table", { id: "managers" }, el("thead", null, el("tr", null,
          el("th", { text: "address" }), el("th", { text: "node" }), el("th", { text: "raft" }), el("th", { text: "term" }),
          el("th", { text: "commit" }), el("th", { text: "clock vs group" }), el("th", { text: "clock offsets of peers" }),
          el("th", { text: "outbox" }))), mt));
        box.appendChild(el("h2", { text: "Gates" }));
        box.appendChild(el("ul", { id: "gates" }, (c.gates || []).map(function (g) {
          return el("li", null, g.name + (g.datacenter ? " (" + g.datacenter + ")" : "") + (g.state ? " — " + g.state : ""));
        }).reduce(function (f, li) { f.appendChild(li); return f; }, document.createDocumentFragment())));
        box.appendChild(el("h2", { text: "Datacenters" }));
        var dt = el("tbody");
        (c.datacenters || []).forEach(function (d) {
          var s = d.leader || {};
          dt.appendChild(el("tr", { "data-datacenter": d.name }, el("td", { text: d.name }),
            el("td", { "class": "mono", text: (d.managers || []).join(", ") }),
            el("td", { text: d.error ? "unreachable: " + d.error : (s.node_id || "") + (s.term !== undefined ? " (term " + s.term + ")" : "") }),
            el("td", { text: s.budgets ? s.budgets.outbox + " / " + s.budgets.outbox_max : "" })));
        });
        box.appendChild(el("table", { id: "datacenters" }, el("thead", null, el("tr", null,
          el("th", { text: "datacenter" }), el("th", { text: "managers" }), el("th", { text: "leader" }), el("th", { text: "outbox backlog" }))), dt));
      });
    };
  }

  // showError shows a failed call in the message line; more (optional) is
  // said after it.
  function showError(err, more) {
    more = more || "";
    if (err instanceof ApiError) {
      if (err.status === 401) {
        message("Not signed in, or the token is not accepted here (401): sign in.", "error");
        return;
      }
      var after = err.retryAfter ? "; retry after " + (/^\d+$/.test(err.retryAfter) ? err.retryAfter + " s" : err.retryAfter) : "";
      message(err.message + (err.problem.code ? " (" + err.problem.code + ")" : "") + after + more, "error");
      return;
    }
    message(String(err && err.message || err) + more, "error");
  }

  function render() {
    generation++;
    var gen = generation;
    if (timer) { clearTimeout(timer); timer = null; }
    jobShown = null;
    var r = route(), main = $("view");
    main.textContent = "";
    main.removeAttribute("data-stale");
    message("");
    ["jobs", "queues", "cluster"].forEach(function (v) { $("nav-" + v).className = r.view === v || (v === "jobs" && r.view === "job") ? "active" : ""; });
    $("who").textContent = token() ? "signed in" : "";
    $("poll").value = store.getItem(POLL) || "2000";
    var views = { signin: viewSignin, jobs: viewJobs, job: viewJob, queues: viewQueues, cluster: viewCluster };
    var refresh = (views[r.view] || viewJobs)(main, r, gen);
    if (!refresh) return;
    var failed = false; // the message shows this view's last failed read
    var readAt = ""; // when this view was last read, "" before its first read
    // A read that fails leaves the view as last read, marked stale
    // (data-stale), and says so; the next poll waits at least what the
    // answer's Retry-After asks (a 503 while the gate has no leader, say),
    // at most RETRY_AFTER_MAX, rather than asking again at once.
    function tick() {
      var wait = 0;
      refresh().then(function () {
        if (gen !== generation) return;
        readAt = new Date().toLocaleTimeString();
        main.removeAttribute("data-stale");
        $("updated").textContent = "updated " + readAt;
        if (failed) message("");
        failed = false;
      }, function (err) {
        if (gen !== generation) return;
        failed = true;
        wait = retryAfterMs(err);
        var every = Number(store.getItem(POLL) || "2000"), next = every > 0 && !refresh.once ? Math.max(every, wait) : 0;
        var again = next ? "read again in " + Math.ceil(next / 1000) + " s" : "not read again by itself";
        main.setAttribute("data-stale", "");
        $("updated").textContent = readAt ? "stale: last updated " + readAt + "; " + again : "not read yet; " + again;
        showError(err, readAt ? " — showing the view as read at " + readAt + ", " + again + "." : " — nothing read yet, " + again + ".");
      }).then(function () {
        if (gen !== generation) return;
        var every = Number(store.getItem(POLL) || "2000");
        if (every > 0 && !refresh.once) timer = setTimeout(tick, Math.max(every, wait));
      });
    }
    tick();
  }

  document.addEventListener("DOMContentLoaded", function () {
    var poll = $("poll");
    poll.value = store.getItem(POLL) || "2000";
    poll.addEventListener("change", function () { store.setItem(POLL, poll.value); render(); });
    $("signout").addEventListener("click", function () { store.removeItem(TOKEN); store.removeItem(OPTOKEN); acting.clear(); go("signin"); });
    window.addEventListener("hashchange", render);
    if (!location.hash) location.replace("#/" + (store.getItem(TOKEN) === null ? "signin" : "jobs"));
    render();
  });
})();
