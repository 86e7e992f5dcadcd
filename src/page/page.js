// fleet's live page (SPEC §4.13): keeps the server-rendered page live. The server streams the
// page's view (server-sent events): the <main> fragment whole first, then only what changed (a
// `delta`: each changed section whole, or a table's changed rows and the order of its keys),
// and the read's time; this puts each change in place, counts each live claim's time against its deadline, and sends the
// actions: the operator's token as a bearer header, the page's CSRF token, and says what the
// server said. The live region speaks only when the page changed, never at each tick.
"use strict";
(function () {
  const live = document.getElementById("live");
  const asof = document.querySelector("#asof time");
  const main = document.getElementById("frame");
  // The store's clock minus this browser's, from the last tick: claims are timed on the store's.
  let skew = 0;
  const clock = (ms) => new Date(ms).toISOString().slice(11, 19) + " UTC";
  const span = (ms) => {
    const s = Math.max(0, Math.floor(ms / 1000));
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
    return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
  };
  function ages() {
    const now = Date.now() + skew;
    for (const cell of main.querySelectorAll("td[data-since]")) {
      const since = Date.parse(cell.dataset.since);
      let text = span(now - since) + " since it was made";
      if (cell.dataset.deadline) {
        const deadline = Date.parse(cell.dataset.deadline);
        text += deadline > now
          ? ", " + span(deadline - now) + " to its deadline (" + clock(deadline) + ")"
          : ", past its deadline (" + clock(deadline) + ")";
      }
      cell.textContent = text;
    }
  }
  function tick(at) {
    const ms = Date.parse(at);
    if (!Number.isNaN(ms)) {
      skew = ms - Date.now();
      asof.textContent = clock(ms);
    }
  }
  // A delta's templates: `data-part` replaces a section's content; `data-rows` lists a table's
  // keys in their new order and holds the rows that are new or changed, the others are kept.
  function apply(data) {
    const box = document.createElement("template");
    box.innerHTML = data;
    for (const t of box.content.children) {
      if (t.tagName !== "TEMPLATE") continue;
      if (t.dataset.part) {
        const section = document.getElementById(t.dataset.part);
        if (section) section.replaceChildren(t.content);
        continue;
      }
      const body = document.querySelector("#" + t.dataset.rows + " tbody");
      if (!body) continue;
      const attr = "data-" + t.dataset.by;
      const rows = new Map();
      for (const row of body.children) rows.set(row.getAttribute(attr), row);
      for (const row of t.content.children) rows.set(row.getAttribute(attr), row);
      const keys = t.dataset.keys ? t.dataset.keys.split(" ") : [];
      body.replaceChildren(...keys.map((k) => rows.get(k)).filter((r) => r));
    }
  }
  const updated = () => {
    ages();
    live.textContent = document.getElementById("s-banner")
      ? "The server cannot read the store; retrying."
      : "Live: updated at " + clock(Date.now() + skew) + ".";
  };
  const stream = new EventSource("events" + location.search);
  stream.addEventListener("frame", (e) => {
    main.innerHTML = e.data;
    updated();
  });
  stream.addEventListener("delta", (e) => {
    apply(e.data);
    updated();
  });
  stream.addEventListener("tick", (e) => tick(e.data));
  stream.addEventListener("stale", (e) => {
    main.innerHTML = e.data;
    live.textContent = "The server cannot read the store; retrying.";
  });
  stream.onerror = () => { live.textContent = "Connection lost; reconnecting."; };
  setInterval(ages, 1000);

  const csrf = document.querySelector('meta[name="fleet-csrf"]');
  const token = document.getElementById("token");
  const reason = document.getElementById("reason");
  const result = document.getElementById("action-result");
  if (!csrf || !token) return;
  token.value = sessionStorage.getItem("fleet-token") || "";
  token.addEventListener("change", () => sessionStorage.setItem("fleet-token", token.value));
  // One listener for every button: the fragment's buttons are replaced at every frame.
  document.addEventListener("click", async (e) => {
    const button = e.target.closest("button[data-action]");
    if (!button) return;
    const action = button.dataset.action;
    const target = button.dataset.target;
    result.textContent = action + " " + target + "…";
    try {
      const answer = await fetch("actions/" + action, {
        method: "POST",
        headers: {
          "Authorization": "Bearer " + token.value,
          "X-Fleet-CSRF": csrf.content,
          "Content-Type": "application/json",
        },
        body: JSON.stringify({ target: target, reason: reason ? reason.value : null }),
      });
      const text = (await answer.text()).trim();
      result.textContent = (answer.ok ? "" : "Refused (" + answer.status + "): ") + text;
    } catch (err) {
      result.textContent = "The action could not be sent: " + err;
    }
  });
})();
