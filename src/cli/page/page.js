// fleet's live page (SPEC §4.13): keeps the server-rendered page live. The server streams the
// whole <main> fragment at every read (server-sent events); this swaps it in. Actions send the
// operator's token as a bearer header and the page's CSRF token, and say what the server said.
"use strict";
(function () {
  const live = document.getElementById("live");
  const main = document.getElementById("frame");
  const say = (text) => { live.textContent = text; };
  const now = () => new Date().toLocaleTimeString();
  let stream;
  function connect() {
    stream = new EventSource("events");
    stream.addEventListener("frame", (e) => {
      main.innerHTML = e.data;
      say("Live: updated at " + now() + ".");
    });
    stream.addEventListener("stale", (e) => {
      main.innerHTML = e.data;
      say("The server cannot read the store (" + now() + "); retrying.");
    });
    stream.onerror = () => say("Connection lost at " + now() + "; reconnecting.");
  }
  connect();

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
