// The chat page served at / by `loom serve`: plain HTML, CSS and JavaScript, no external
// resources. It keeps the conversation in the page and streams replies from
// /v1/chat/completions (server-sent events read through fetch).
#include "loom/serve/server.h"

namespace loom::serve {

const char* chat_page_html() {
  return R"LOOMPAGE(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Loom chat</title>
<style>
  :root { --bg: #f6f7f9; --fg: #1c1e21; --muted: #6b7280; --user: #dbeafe; --bot: #ffffff; --accent: #2563eb; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 15px/1.5 system-ui, sans-serif; background: var(--bg); color: var(--fg);
         display: flex; flex-direction: column; height: 100vh; }
  header { padding: 10px 16px; border-bottom: 1px solid #e5e7eb; background: #fff; display: flex; gap: 12px;
           align-items: center; flex-wrap: wrap; }
  header h1 { font-size: 16px; margin: 0; }
  header .model { color: var(--muted); font-size: 13px; }
  header label { font-size: 13px; color: var(--muted); }
  header input { font: inherit; font-size: 13px; padding: 2px 6px; width: 8em; }
  #log { flex: 1; overflow-y: auto; padding: 16px; display: flex; flex-direction: column; gap: 10px; }
  .msg { max-width: 80%; padding: 8px 12px; border-radius: 10px; white-space: pre-wrap; word-wrap: break-word;
         box-shadow: 0 1px 2px rgba(0,0,0,.06); }
  .user { align-self: flex-end; background: var(--user); }
  .assistant { align-self: flex-start; background: var(--bot); }
  .error { align-self: center; color: #b91c1c; font-size: 13px; }
  .stats { color: var(--muted); font-size: 12px; align-self: flex-start; }
  form { display: flex; gap: 8px; padding: 12px 16px; border-top: 1px solid #e5e7eb; background: #fff; }
  textarea { flex: 1; font: inherit; padding: 8px; resize: none; height: 3.2em; border-radius: 8px; border: 1px solid #d1d5db; }
  button { font: inherit; padding: 0 18px; border: 0; border-radius: 8px; background: var(--accent); color: #fff; cursor: pointer; }
  button:disabled { opacity: .5; cursor: default; }
</style>
</head>
<body>
<header>
  <h1>Loom chat</h1><span class="model" id="model"></span>
  <label>temperature <input id="temp" type="number" min="0" max="2" step="0.1" value="0.7"></label>
  <label>max tokens <input id="maxtok" type="number" min="1" value="256"></label>
  <label>API key <input id="key" type="password" autocomplete="off"></label>
  <button id="reset" type="button">New chat</button>
</header>
<div id="log"></div>
<form id="form">
  <textarea id="input" placeholder="Message (Enter to send, Shift+Enter for a new line)"></textarea>
  <button id="send" type="submit">Send</button>
</form>
<script>
"use strict";
const log = document.getElementById("log"), input = document.getElementById("input");
const send = document.getElementById("send"), form = document.getElementById("form");
let messages = [];
let busy = false;

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = document.getElementById("key").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

function add(cls, text) {
  const div = document.createElement("div");
  div.className = "msg " + cls;
  div.textContent = text;
  log.appendChild(div);
  log.scrollTop = log.scrollHeight;
  return div;
}

fetch("/v1/models", { headers: headers() }).then(r => r.json()).then(j => {
  if (j.data && j.data.length) document.getElementById("model").textContent = j.data[0].id;
}).catch(() => {});

document.getElementById("reset").onclick = () => { messages = []; log.innerHTML = ""; };
input.addEventListener("keydown", e => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); form.requestSubmit(); }
});

form.addEventListener("submit", async e => {
  e.preventDefault();
  const text = input.value.trim();
  if (!text || busy) return;
  busy = true; send.disabled = true; input.value = "";
  messages.push({ role: "user", content: text });
  add("user", text);
  const out = add("assistant", "");
  out.dataset.state = "streaming";
  let reply = "", chunks = 0;
  const t0 = performance.now();
  let ttft = 0;
  try {
    const res = await fetch("/v1/chat/completions", {
      method: "POST", headers: headers(),
      body: JSON.stringify({
        messages, stream: true,
        temperature: parseFloat(document.getElementById("temp").value) || 0,
        max_tokens: parseInt(document.getElementById("maxtok").value) || 256,
      }),
    });
    if (!res.ok) {
      let msg = res.status + " " + res.statusText;
      try { msg = (await res.json()).error.message; } catch (_) {}
      throw new Error(msg);
    }
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const event = buf.slice(0, cut); buf = buf.slice(cut + 2);
        for (const line of event.split("\n")) {
          if (!line.startsWith("data: ")) continue;  // SSE comments keep the stream alive
          const data = line.slice(6);
          if (data === "[DONE]") continue;
          const j = JSON.parse(data);
          if (j.error) throw new Error(j.error.message);
          const delta = j.choices && j.choices[0] && j.choices[0].delta;
          if (delta && delta.content) {
            if (!ttft) ttft = performance.now() - t0;
            reply += delta.content; chunks++;
            out.textContent = reply;
            out.dataset.chunks = String(chunks);
            log.scrollTop = log.scrollHeight;
          }
        }
      }
    }
    messages.push({ role: "assistant", content: reply });
    const secs = (performance.now() - t0) / 1000;
    const s = document.createElement("div");
    s.className = "stats";
    s.textContent = chunks + " chunks in " + secs.toFixed(1) + " s, first after " + (ttft / 1000).toFixed(2) + " s";
    log.appendChild(s);
  } catch (err) {
    messages.pop();
    add("error", "Error: " + err.message);
  } finally {
    out.dataset.state = "done";
    busy = false; send.disabled = false; input.focus();
  }
});
</script>
</body>
</html>
)LOOMPAGE";
}

}  // namespace loom::serve
