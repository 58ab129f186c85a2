// fencegate's browser console: plain JavaScript, no framework, nothing from another site.
// Every value from the gateway goes into the page as text (textContent), never as HTML.

const API = "/_fence/console/api";
const FEED_MAX = 200;

const state = {
  me: null,
  clockOffsetMs: 0,
  leases: [],
  decisions: [],
  events: null,
  leaseTimer: null,
  auditCursor: null,
  auditParams: null,
};

const $ = (id) => document.getElementById(id);

/** An element with attributes and children (strings become text nodes). */
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === undefined || child === null) continue;
    node.append(typeof child === "string" || typeof child === "number" ? String(child) : child);
  }
  return node;
}

class ApiError extends Error {
  constructor(status, body) {
    super(body?.error?.message || `HTTP ${status}`);
    this.status = status;
    this.code = body?.error?.code;
  }
}

async function api(method, path, body) {
  const headers = { "x-fencegate-console": "1" };
  if (body !== undefined) headers["content-type"] = "application/json";
  const res = await fetch(API + path, {
    method,
    headers,
    credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  const data = text ? JSON.parse(text) : null;
  if (res.status === 401 && path !== "/session") signedOut();
  if (!res.ok) throw new ApiError(res.status, data);
  return data;
}

function serverNow() {
  return Date.now() + state.clockOffsetMs;
}

function noteServerTime(iso) {
  if (iso) state.clockOffsetMs = Date.parse(iso) - Date.now();
}

function resourceOf(x) {
  if (x.key !== undefined && x.key !== null) return `${x.bucket}/${x.key}`;
  if (x.prefix !== undefined && x.prefix !== null) return `${x.bucket}/${x.prefix}*`;
  return x.bucket || "";
}

function timeOf(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return d.toISOString().slice(11, 23);
}

// ---- signing in and out ----

function showSignIn(message) {
  $("console-view").hidden = true;
  $("who").hidden = true;
  $("sign-in-view").hidden = false;
  $("sign-in-error").textContent = message || "";
  $("access-key-id").focus();
}

function signedOut(message) {
  stopLive();
  state.me = null;
  showSignIn(message || "Your console session ended; sign in again.");
}

function showConsole(me) {
  state.me = me;
  noteServerTime(me.serverTime);
  $("sign-in-view").hidden = true;
  $("console-view").hidden = false;
  $("who").hidden = false;
  $("principal").textContent = me.principal;
  $("gateway").textContent = me.gateway;
  $("admin-badge").hidden = !me.admin;
  startLive();
}

$("sign-in").addEventListener("submit", async (e) => {
  e.preventDefault();
  $("sign-in-error").textContent = "";
  const secret = $("secret-access-key");
  try {
    const me = await api("POST", "/session", {
      accessKeyId: $("access-key-id").value.trim(),
      secretAccessKey: secret.value,
    });
    secret.value = "";
    showConsole(me);
  } catch (err) {
    secret.value = "";
    $("sign-in-error").textContent =
      err.code === "InvalidCredentials" ? "Wrong access key id or secret." : err.message;
  }
});

$("sign-out").addEventListener("click", async () => {
  try {
    await api("DELETE", "/session");
  } finally {
    signedOut("Signed out.");
  }
});

// ---- live data ----

function startLive() {
  stopLive();
  state.decisions = [];
  renderDecisions();
  refreshLeases();
  state.leaseTimer = setInterval(refreshLeases, 2000);
  state.countdown = setInterval(renderCountdowns, 200);
  const events = new EventSource(`${API}/events`);
  state.events = events;
  events.addEventListener("open", () => setLive(true));
  events.addEventListener("error", () => {
    setLive(false);
    // Closed for good (a 401): find out whether the session ended.
    if (events.readyState === EventSource.CLOSED) api("GET", "/session").catch(() => undefined);
  });
  events.addEventListener("hello", (e) => noteServerTime(JSON.parse(e.data).serverTime));
  events.addEventListener("ping", (e) => noteServerTime(JSON.parse(e.data).serverTime));
  events.addEventListener("signed-out", () => signedOut());
  events.addEventListener("audit", (e) => {
    const { records, backlog } = JSON.parse(e.data);
    addDecisions(records, !backlog);
    if (!backlog && records.some((r) => r.op.startsWith("Lease") || r.decision !== "accepted")) {
      refreshLeases();
    }
  });
}

function stopLive() {
  if (state.events) state.events.close();
  state.events = null;
  clearInterval(state.leaseTimer);
  clearInterval(state.countdown);
  setLive(false);
}

function setLive(on) {
  const dot = $("live");
  dot.className = on ? "live on" : "live off";
  dot.title = on ? "live: new decisions appear as they happen" : "not connected";
}

// ---- leases and waiters ----

let leaseRefresh = null;
async function refreshLeases() {
  if (leaseRefresh) return leaseRefresh;
  leaseRefresh = (async () => {
    try {
      const q = new URLSearchParams();
      if ($("lease-bucket").value.trim()) q.set("bucket", $("lease-bucket").value.trim());
      if ($("lease-prefix").value.trim()) q.set("prefix", $("lease-prefix").value.trim());
      const answer = await api("GET", `/leases${q.size ? `?${q}` : ""}`);
      noteServerTime(answer.serverTime);
      state.leases = answer.leases;
      $("leases-error").textContent = "";
      renderLeases();
    } catch (err) {
      if (err.status !== 401) $("leases-error").textContent = `Leases could not be read: ${err.message}`;
    } finally {
      leaseRefresh = null;
    }
  })();
  return leaseRefresh;
}

$("lease-filter").addEventListener("submit", (e) => {
  e.preventDefault();
  refreshLeases();
});

// Breaks waiting for their confirmation, by lease id: kept apart from the buttons, which every
// refresh of the list draws anew.
const armedBreaks = new Map();

function showArmed(button, armed) {
  button.textContent = armed ? "Confirm break" : "Break";
  button.classList.toggle("danger", armed);
}

function breakButton(lease) {
  const id = lease.leaseId;
  const button = el("button", { type: "button", class: "break", "data-lease-id": id }, "Break");
  showArmed(button, armedBreaks.has(id));
  button.addEventListener("click", async () => {
    if (!armedBreaks.has(id)) {
      showArmed(button, true);
      armedBreaks.set(
        id,
        setTimeout(() => {
          armedBreaks.delete(id);
          for (const drawn of document.querySelectorAll("#leases button.break")) {
            if (drawn.dataset.leaseId === id) showArmed(drawn, false);
          }
        }, 5000),
      );
      return;
    }
    clearTimeout(armedBreaks.get(id));
    armedBreaks.delete(id);
    button.disabled = true;
    try {
      const broken = await api("POST", `/leases/${encodeURIComponent(lease.leaseId)}/break`);
      $("leases-error").textContent = "";
      flashNote(
        `Lease on ${resourceOf(lease)} broken; writes below token ${broken.floorToken} are now refused.`,
      );
    } catch (err) {
      $("leases-error").textContent = `Break refused: ${err.message}`;
    }
    refreshLeases();
  });
  return button;
}

function flashNote(text) {
  const note = $("leases-error");
  note.textContent = text;
  note.className = "muted";
  setTimeout(() => {
    note.textContent = "";
    note.className = "error";
  }, 6000);
}

function renderLeases() {
  const body = $("leases").querySelector("tbody");
  body.replaceChildren(
    ...state.leases.map((lease) =>
      el(
        "tr",
        { "data-lease-id": lease.leaseId },
        el("td", { class: "resource" }, el("code", { text: resourceOf(lease) })),
        el("td", { class: "owner", text: lease.owner }),
        el("td", { class: "token", text: String(lease.token) }),
        el(
          "td",
          { class: "fencing-token" },
          lease.fencingToken
            ? el("code", { title: lease.fencingToken, text: `${lease.fencingToken.slice(0, 18)}…` })
            : el("span", { class: "muted", text: "another key's" }),
        ),
        el(
          "td",
          { class: "ttl", "data-expires": lease.expiresAt, "data-ttl": lease.ttlMs },
          el("span", { class: "ttl-text" }),
          el("div", { class: "ttl-bar" }, el("span")),
        ),
        el("td", { class: "waiters", text: String(lease.waiters ?? 0) }),
        el("td", {}, state.me?.admin ? breakButton(lease) : null),
      ),
    ),
  );
  $("leases-empty").hidden = state.leases.length > 0;
  $("lease-count").textContent = state.leases.length ? `(${state.leases.length})` : "";
  renderCountdowns();
  const waiting = state.leases.filter((l) => (l.waiters ?? 0) > 0);
  $("waiters")
    .querySelector("tbody")
    .replaceChildren(
      ...waiting.map((l) =>
        el(
          "tr",
          {},
          el("td", {}, el("code", { text: resourceOf(l) })),
          el("td", { text: `${l.owner} (token ${l.token})` }),
          el("td", { class: "waiters", text: String(l.waiters) }),
        ),
      ),
    );
  $("waiters-empty").hidden = waiting.length > 0;
}

function renderCountdowns() {
  const now = serverNow();
  for (const cell of document.querySelectorAll("#leases td.ttl")) {
    const left = Date.parse(cell.dataset.expires) - now;
    const ttl = Number(cell.dataset.ttl) || 1;
    const text = cell.querySelector(".ttl-text");
    if (left <= 0) {
      text.textContent = "expired";
      cell.className = "ttl gone";
    } else {
      text.textContent =
        left >= 60_000
          ? `${Math.floor(left / 60_000)} min ${Math.floor((left % 60_000) / 1000)} s`
          : `${(left / 1000).toFixed(1)} s`;
      cell.className = left < ttl / 4 ? "ttl low" : "ttl";
    }
    const bar = cell.querySelector(".ttl-bar > span");
    bar.style.width = `${Math.max(0, Math.min(100, (left / ttl) * 100))}%`;
  }
}

// ---- live decisions ----

function recordItem(r, fresh) {
  return el(
    "li",
    {
      class: `decision-${r.decision}${fresh ? " fresh" : ""}`,
      "data-seq": r.seq,
      "data-decision": r.decision,
    },
    el("span", { class: "muted", text: timeOf(r.time) }),
    el("strong", { text: r.op }),
    el("code", { text: resourceOf(r) }),
    r.token !== null ? el("span", { text: `token ${r.token}` }) : null,
    el("span", { class: "decision", text: r.decision }),
    r.reason ? el("span", { class: "reason", text: r.reason }) : null,
    r.highestToken !== null ? el("span", { class: "muted", text: `HCT ${r.highestToken}` }) : null,
    r.owner ? el("span", { class: "muted", text: `owner ${r.owner}` }) : null,
    r.principal ? el("span", { class: "muted", text: `by ${r.principal}` }) : null,
  );
}

function addDecisions(records, fresh) {
  for (const r of records) state.decisions.push({ r, fresh });
  if (state.decisions.length > FEED_MAX) state.decisions.splice(0, state.decisions.length - FEED_MAX);
  renderDecisions();
  for (const d of state.decisions) d.fresh = false;
}

function renderDecisions() {
  const onlyRefusals = $("only-refusals").checked;
  const shown = state.decisions.filter(({ r }) => !onlyRefusals || r.decision !== "accepted");
  $("decisions").replaceChildren(...shown.reverse().map(({ r, fresh }) => recordItem(r, fresh)));
}

$("only-refusals").addEventListener("change", renderDecisions);

// ---- object timeline ----

$("timeline-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const q = new URLSearchParams({ bucket: $("timeline-bucket").value.trim(), key: $("timeline-key").value });
  $("timeline-error").textContent = "";
  try {
    const t = await api("GET", `/timeline?${q}`);
    $("timeline").hidden = false;
    $("timeline-hct").textContent = t.highestToken === null ? "none yet" : String(t.highestToken);
    $("timeline-leases").textContent = t.leases.length
      ? `— held by ${t.leases.map((l) => `${l.owner} (token ${l.token})`).join(", ")}`
      : "— no active lease";
    const items = t.records.map((r) => recordItem(r, false));
    if (t.truncated) items.unshift(el("li", { class: "muted", text: "(older records left out)" }));
    if (!items.length) items.push(el("li", { class: "muted", text: "Nothing recorded for this object." }));
    $("timeline-records").replaceChildren(...items);
  } catch (err) {
    $("timeline").hidden = true;
    $("timeline-error").textContent = err.message;
  }
});

// ---- audit search ----

function auditRow(r) {
  return el(
    "tr",
    { class: `decision-${r.decision}`, "data-seq": r.seq },
    el("td", { text: String(r.seq) }),
    el("td", { text: r.time }),
    el("td", { text: r.op }),
    el("td", {}, el("code", { text: resourceOf(r) })),
    el("td", { text: r.token ?? "" }),
    el("td", { text: r.decision }),
    el("td", { class: r.reason ? "reason" : "", text: r.reason ?? "" }),
    el("td", { text: r.highestToken ?? "" }),
    el("td", { text: r.owner ?? "" }),
    el("td", { text: r.principal ?? "" }),
    el("td", { class: "muted", text: r.gateway }),
  );
}

async function searchAudit(append) {
  $("audit-error").textContent = "";
  const q = new URLSearchParams(state.auditParams);
  if (append && state.auditCursor) q.set("cursor", state.auditCursor);
  try {
    const page = await api("GET", `/audit?${q}`);
    const body = $("audit-results").querySelector("tbody");
    const rows = page.records.map(auditRow);
    if (append) body.append(...rows);
    else body.replaceChildren(...rows);
    state.auditCursor = page.nextCursor;
    $("audit-more").hidden = !page.nextCursor;
  } catch (err) {
    $("audit-error").textContent = err.message;
  }
}

$("audit-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const params = new URLSearchParams();
  for (const [name, value] of new FormData(e.target))
    if (String(value).trim()) params.set(name, String(value).trim());
  state.auditParams = params.toString();
  state.auditCursor = null;
  searchAudit(false);
});
$("audit-more").addEventListener("click", () => searchAudit(true));

// ---- start ----

api("GET", "/session")
  .then(showConsole)
  .catch(() => showSignIn(""));
