// The suanli console: a tenant's view of the REST API (/v1) in the browser, with the API key it signs in
// with kept in this tab's sessionStorage. Every value from the server is written as text (never as HTML):
// commands, messages and logs are the tenants' own.

const KEY_ITEM = "suanli.key";
const REFRESH_MS = 2000;
const $ = (id) => document.getElementById(id);

class ApiError extends Error {
  constructor(status, message, field) {
    super(field ? `${field}: ${message}` : message);
    this.status = status;
  }
}

const session = { key: sessionStorage.getItem(KEY_ITEM), selected: null, logOffset: 0, timer: null };

async function api(method, path, body = undefined, headers = {}) {
  const init = { method, headers: { Authorization: `Bearer ${session.key}`, ...headers } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (error) {
    throw new ApiError(0, `the server cannot be reached (${error.message})`);
  }
  if (response.ok) return response.json();
  let detail = null;
  try {
    detail = (await response.json()).error;
  } catch (_) { /* not our JSON error */ }
  throw new ApiError(response.status, detail?.message ?? response.statusText, detail?.field);
}

const units = (micros) => (micros / 1e6).toFixed(4);

function cell(row, text, className) {
  const td = row.insertCell();
  td.textContent = text ?? "";
  if (className) td.className = className;
  return td;
}

function shape(request) {
  const model = request.gpu_model ?? "any GPU";
  let each;
  if (request.mig_profile) each = `${model} ${request.mig_profile}`;
  else if (request.share_milli) each = `${request.share_milli / 10}% of a ${model}`;
  else each = `${model}:${request.gpus}`;
  return request.nodes > 1 ? `${each} x ${request.nodes} nodes` : each;
}

function showError(id, error) {
  $(id).textContent = error ? error.message : "";
}

// --- signing in ---------------------------------------------------------------------------------------

async function signIn(key) {
  session.key = key;
  const me = await api("GET", "/v1/me");
  sessionStorage.setItem(KEY_ITEM, key);
  $("tenant-name").textContent = `${me.tenant.name} (${me.tenant.role})`;
  $("login").hidden = true;
  $("console").hidden = false;
  $("whoami").hidden = false;
  await Promise.all([refreshBalance(), searchOffers(), refreshRentals()]);
  session.timer = setInterval(tick, REFRESH_MS);
}

function signOut() {
  sessionStorage.removeItem(KEY_ITEM);
  clearInterval(session.timer);
  Object.assign(session, { key: null, selected: null, logOffset: 0, timer: null });
  $("console").hidden = true;
  $("whoami").hidden = true;
  $("detail").hidden = true;
  $("login").hidden = false;
  $("key").value = "";
}

async function refreshBalance() {
  try {
    const balance = await api("GET", "/v1/balance");
    $("balance").textContent = `available ${units(balance.available_micros)}`;
  } catch (error) {
    $("balance").textContent = "";
  }
}

// --- offers and renting -------------------------------------------------------------------------------

async function searchOffers() {
  showError("offers-error", null);
  const query = $("offers-query").value.trim();
  let offers;
  try {
    offers = await api("GET", `/v1/offers?q=${encodeURIComponent(query)}`);
  } catch (error) {
    showError("offers-error", error);
    return;
  }
  const body = $("offers").tBodies[0];
  body.replaceChildren();
  const models = new Set();
  for (const offer of offers) {
    models.add(offer.gpu_model);
    const row = body.insertRow();
    cell(row, offer.gpu_model);
    cell(row, `${offer.region} (${offer.jurisdiction})`);
    cell(row, offer.tier);
    cell(row, offer.free_gpus, "num");
    cell(row, offer.max_gpus_per_node, "num");
    cell(row, offer.nodes_with_free_gpus, "num");
    cell(row, units(offer.price_micros_per_gpu_hour), "num");
    const use = document.createElement("button");
    use.type = "button";
    use.textContent = "Use";
    use.addEventListener("click", () => {
      $("rent-model").value = offer.gpu_model;
      $("rent-gpus").value = Math.min(offer.max_gpus_per_node, 8);
      $("rent-tier").value = offer.tier;
      $("rent-command").focus();
    });
    row.insertCell().append(use);
  }
  const list = $("models");
  list.replaceChildren(...[...models].sort().map((m) => Object.assign(document.createElement("option"), { value: m })));
}

function decimal(text, field) {
  if (!text.trim()) return null;
  const value = Number(text);
  if (!Number.isFinite(value) || value <= 0) throw new ApiError(0, "give a positive number", field);
  return value;
}

function rentalRequest() {
  const form = $("rent-form");
  const request = {
    gpus: Number(form.gpus.value),
    nodes: Number(form.nodes.value),
    tier: form.tier.value,
  };
  if (form.gpu_model.value.trim()) request.gpu_model = form.gpu_model.value.trim();
  const bid = decimal(form.bid.value, "bid");
  if (bid !== null) request.bid_micros_per_gpu_hour = Math.round(bid * 1e6);
  const hours = decimal(form.hours.value, "max hours");
  if (hours !== null) request.max_duration_s = Math.round(hours * 3600);
  if (form.image.value.trim()) request.image = form.image.value.trim();
  if (form.command.value.trim()) request.command = ["sh", "-c", form.command.value.trim()];
  return request;
}

async function rent(event) {
  event.preventDefault();
  showError("rent-error", null);
  try {
    const rental = await api("POST", "/v1/rentals", rentalRequest(), { "Idempotency-Key": crypto.randomUUID() });
    await refreshRentals();
    select(rental.id);
  } catch (error) {
    showError("rent-error", error);
  }
}

// --- rentals ------------------------------------------------------------------------------------------

async function refreshRentals() {
  let rentals;
  try {
    rentals = await api("GET", "/v1/rentals");
  } catch (error) {
    if (error.status === 401) signOut();
    return;
  }
  const body = $("rentals").tBodies[0];
  body.replaceChildren();
  for (const rental of rentals) {
    const row = body.insertRow();
    row.dataset.id = rental.id;
    row.classList.toggle("selected", rental.id === session.selected);
    cell(row, rental.id, "mono");
    cell(row, rental.state, `state ${rental.state}`);
    cell(row, shape(rental.request));
    cell(row, rental.request.tier);
    cell(row, rental.allocation.map((a) => a.node).join(", "));
    cell(row, rental.price_micros_per_hour == null ? "" : units(rental.price_micros_per_hour), "num");
    cell(row, rental.pending_reason ?? "");
    row.addEventListener("click", () => select(rental.id));
  }
  $("rentals-empty").hidden = rentals.length > 0;
}

function select(id) {
  if (session.selected !== id) {
    session.selected = id;
    session.logOffset = 0;
    $("detail-log").textContent = "";
    showError("detail-error", null);
  }
  for (const row of $("rentals").tBodies[0].rows) row.classList.toggle("selected", row.dataset.id === id);
  $("detail").hidden = false;
  return refreshDetail();
}

async function refreshDetail() {
  const id = session.selected;
  if (!id) return;
  let rental;
  try {
    rental = await api("GET", `/v1/rentals/${encodeURIComponent(id)}`);
  } catch (error) {
    showError("detail-error", error);
    return;
  }
  if (id !== session.selected) return;
  $("detail-id").textContent = rental.id;
  const parts = [rental.state, shape(rental.request), rental.request.tier];
  if (rental.price_micros_per_hour != null) parts.push(`${units(rental.price_micros_per_hour)} / h`);
  if (rental.pending_reason) parts.push(`waiting: ${rental.pending_reason}`);
  if (rental.expected_start_at) parts.push(`starts by ${rental.expected_start_at}`);
  if (rental.notice_deadline) parts.push(`preempted, ends at ${rental.notice_deadline}`);
  $("detail-summary").textContent = parts.join(" · ");
  $("detail-stop").disabled = ["stopped", "failed", "lost", "preempted", "stopping"].includes(rental.state);
  const body = $("detail-events").tBodies[0];
  body.replaceChildren();
  for (const event of rental.events) {
    const row = body.insertRow();
    cell(row, event.at.replace("T", " ").slice(0, 19));
    cell(row, event.kind);
    cell(row, event.reason ?? "");
    cell(row, event.message);
  }
  await followLog(id);
}

async function followLog(id) {
  try {
    const page = await api("GET", `/v1/rentals/${encodeURIComponent(id)}/logs?offset=${session.logOffset}`);
    if (id !== session.selected || page.offset !== session.logOffset) return;
    $("detail-log").textContent += page.data;
    session.logOffset = page.next_offset;
  } catch (error) {
    /* no log yet */
  }
}

async function stopSelected() {
  showError("detail-error", null);
  try {
    await api("POST", `/v1/rentals/${encodeURIComponent(session.selected)}/stop`);
    await Promise.all([refreshRentals(), refreshDetail()]);
  } catch (error) {
    showError("detail-error", error);
  }
}

async function tick() {
  await Promise.all([refreshRentals(), refreshDetail(), refreshBalance()]);
}

// --- wiring -------------------------------------------------------------------------------------------

$("login-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  showError("login-error", null);
  try {
    await signIn($("key").value.trim());
  } catch (error) {
    session.key = null;
    showError("login-error", error.status === 401 ? new Error("that key is not valid here") : error);
  }
});
$("sign-out").addEventListener("click", signOut);
$("offers-form").addEventListener("submit", (event) => {
  event.preventDefault();
  searchOffers();
});
$("rent-form").addEventListener("submit", rent);
$("detail-stop").addEventListener("click", stopSelected);

if (session.key) {
  signIn(session.key).catch(() => signOut());
} else {
  $("login").hidden = false;
}
