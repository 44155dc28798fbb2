// The console's terminal: a shell inside a running rental, as `suanli exec -it RENTAL -- bash`, in this tab.
// The key is the console's (a tab the console opens has a copy of its sessionStorage); a browser's WebSocket
// cannot carry an Authorization header, so it goes as the subprotocol `bearer.KEY` beside `suanli.v1`.
// The shell ends when this tab closes (the agent hangs it up), or after 8 h, the most an attached command runs.
import { Terminal } from "./vendor/xterm.mjs";
import { FitAddon } from "./vendor/addon-fit.mjs";

const KEY_ITEM = "suanli.key";
const SHELL = "if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi";
const TIMEOUT_S = 8 * 3600;
const LIVE_STATES = ["queued", "running"];
const $ = (id) => document.getElementById(id);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function status(text, bad = false) {
  $("term-status").textContent = text;
  $("term-status").classList.toggle("error", bad);
}

async function api(key, method, path, body) {
  const headers = { Authorization: `Bearer ${key}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(data?.error?.message ?? `the server answered ${response.status}`);
  return data;
}

// how the shell ended: its exit code comes with its agent's report, a moment after the socket closes
async function ending(key, execPath) {
  let found;
  for (let tries = 0; tries < 20; tries++) {
    found = await api(key, "GET", execPath);
    if (!LIVE_STATES.includes(found.state)) break;
    await sleep(500);
  }
  if (found.state === "exited") return `ended: exit ${found.exit_code}`;
  return `ended: ${found.state}${found.message ? `: ${found.message}` : ""}`;
}

async function main() {
  const rentalId = new URLSearchParams(location.search).get("rental") ?? "";
  const key = sessionStorage.getItem(KEY_ITEM);
  $("term-rental").textContent = rentalId;
  document.title = `${rentalId} · suanli terminal`;
  if (!key) {
    status("sign in on the console first, then open the terminal from a running rental's page", true);
    return;
  }
  if (!rentalId) {
    status("no rental given: open the terminal from a running rental's page", true);
    return;
  }
  // at a line height of 1 the row clips what goes below the baseline: underscores did not show
  const terminal = new Terminal({ cursorBlink: true, fontSize: 14, lineHeight: 1.2, scrollback: 5000 });
  const fit = new FitAddon();
  terminal.loadAddon(fit);
  terminal.open($("term"));
  fit.fit();
  const execs = `/v1/rentals/${encodeURIComponent(rentalId)}/execs`;
  let shell;
  try {
    const body = { command: ["sh", "-c", SHELL], stdin: true, tty: true, timeout_s: TIMEOUT_S };
    shell = await api(key, "POST", execs, body);
  } catch (error) {
    status(error.message, true);
    return;
  }
  const execPath = `${execs}/${encodeURIComponent(shell.id)}`;
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const socket = new WebSocket(`${scheme}//${location.host}${execPath}/attach`, ["suanli.v1", `bearer.${key}`]);
  socket.binaryType = "arraybuffer";
  const encoder = new TextEncoder();
  const send = (data) => {
    if (socket.readyState === WebSocket.OPEN) socket.send(data);
  };
  const sendSize = () => send(JSON.stringify({ rows: terminal.rows, cols: terminal.cols }));
  status(`starting a shell on ${shell.node} (at its agent's next heartbeat)…`);
  socket.addEventListener("open", () => {
    sendSize();
    terminal.focus();
  });
  let shown = false;
  socket.addEventListener("message", (event) => {
    if (typeof event.data === "string") return;
    if (!shown) status(`${shell.node} · ${shell.id}`);
    shown = true;
    terminal.write(new Uint8Array(event.data));
  });
  terminal.onData((data) => send(encoder.encode(data)));
  terminal.onBinary((data) => send(Uint8Array.from(data, (c) => c.charCodeAt(0))));
  terminal.onResize(sendSize);
  window.addEventListener("resize", () => fit.fit());
  socket.addEventListener("close", async (event) => {
    terminal.options.disableStdin = true;
    if (event.code >= 4000) {
      status(event.reason || `refused (${event.code})`, true);
      return;
    }
    try {
      status(await ending(key, execPath));
    } catch (error) {
      status(`ended (${error.message})`, true);
    }
  });
}

main();
