// The suanli console: a tenant's view of the REST API (/v1) in the browser, with the API key it signs in
// with kept in this tab's sessionStorage. Every value from the server is written as text (never as HTML):
// commands, messages and logs are the tenants' own.

const KEY_ITEM = "suanli.key";
const SIGNED_OUT_ITEM = "suanli.signedOutBecause"; // why the page signed itself out, for the fresh page to say
const REFRESH_MS = 2000;
const ENDED_STATES = ["stopped", "failed", "lost", "preempted"]; // a rental in one holds nothing again
const LIVE_STATES = ["pending", "placed", "starting", "running", "stopping", "preempting"];
const RENTALS_PAGE = 50; // the newest rentals the table reads first; "Show older" reads a page more
const USAGE_PAGE = 50; // the month's rental lines the usage table reads; "Show more lines" reads a page more
const RENTALS_MOST = 1000; // the most GET /v1/rentals answers with in one page; past it, its Link's cursor
const $ = (id) => document.getElementById(id);

// the server names a request's field; the page names the box it came from
const FIELD_LABELS = {
  share_milli: "share", share_memory_mib: "share memory GiB", bid_micros_per_gpu_hour: "bid",
  max_duration_s: "max hours", gpu_model: "model", mig_profile: "MIG profile", daily_micros: "daily budget",
  monthly_micros: "monthly budget", fee_micros: "fee", price_micros_per_gpu_hour: "price / GPU-h",
  price_micros: "price", discount_bp: "discount %", revenue_share_bp: "revenue share %",
};

class ApiError extends Error {
  constructor(status, message, field) {
    const label = FIELD_LABELS[field] ?? field;
    const own = field && message.startsWith(`${field}: `) ? message.slice(field.length + 2) : message;
    super(label && !own.startsWith(`${label}:`) ? `${label}: ${own}` : own);
    this.status = status;
  }
}

const SLOW_EVERY = 5; // ticks between reads of what changes slowly (the month's invoice, the nodes)
const session = {
  key: sessionStorage.getItem(KEY_ITEM), role: null, selected: null, logOffset: 0, timer: null, ticks: 0,
  states: "", quoted: null, logNode: "", usageLines: USAGE_PAGE,
};

async function api(method, path, body = undefined, headers = {}) {
  return (await send(method, path, body, headers)).json();
}

// a page of a paged list (GET), the cursor (`after`) its Link rel="next" header names (null on the last) and
// when the server answered (its Date; null without one)
async function apiPage(path) {
  const response = await send("GET", path);
  const next = /<([^>]*)>;\s*rel="next"/.exec(response.headers.get("Link") ?? "");
  const after = next ? new URL(next[1], location.href).searchParams.get("after") : null;
  const date = response.headers.get("Date") ? new Date(response.headers.get("Date")) : null;
  return { items: await response.json(), after, date: Number.isNaN(date?.getTime()) ? null : date };
}

// the request with this tab's key; the answer when it is a success, else an ApiError saying why
async function send(method, path, body = undefined, headers = {}) {
  const init = { method, headers: { Authorization: `Bearer ${session.key}`, ...headers } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (error) {
    $("offline").hidden = false;
    throw new ApiError(0, `the server cannot be reached (${error.message})`);
  }
  $("offline").hidden = true;
  if (response.ok) return response;
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

// select `id` filled anew with `options`, keeping the one chosen if it is still there
function fillSelect(id, options) {
  const select = $(id);
  const chosen = select.value;
  select.replaceChildren(...options);
  if (chosen) select.value = chosen;
}

const option = (value, text = value) => Object.assign(document.createElement("option"), { value, textContent: text });
// a datalist's suggestions, sorted
const suggestions = (values) =>
  [...values].sort().map((value) => Object.assign(document.createElement("option"), { value }));

// an amount in currency units as micros; ApiError naming `field` unless it is 0 or more (blank: `blank`,
// or refused when none is given)
function toMicros(text, field, blank = undefined) {
  // exact, as the CLI reads money: units with at most 6 decimals (a micro), never a float's rounding
  const trimmed = text.trim();
  if (!trimmed && blank !== undefined) return blank;
  const match = /^([0-9]{1,12})(?:\.([0-9]{1,6}))?$/.exec(trimmed);
  if (!match) throw new ApiError(0, "give an amount of 0 or more, e.g. 12.5 (at most 6 decimals)", field);
  return Number(match[1]) * 1e6 + Number((match[2] ?? "").padEnd(6, "0"));
}

function showError(id, error) {
  $(id).textContent = error ? error.message : "";
}

// a background refresh's failure under its section; one that never reached the server is left to the
// connection notice (`api` shows it while requests fail and hides it at the next answer), so no section
// keeps saying "cannot be reached" once the server is back
function showRefreshError(id, error) {
  if (error.status !== 0) showError(id, error);
}

// --- signing in ---------------------------------------------------------------------------------------

async function signIn(key) {
  session.key = key;
  const me = await api("GET", "/v1/me");
  sessionStorage.setItem(KEY_ITEM, key);
  session.role = me.tenant.role;
  Object.assign(session, { tenantId: me.tenant.id, keyId: me.key_id });
  $("tenant-name").textContent = `${me.tenant.name} (${me.tenant.role})`;
  $("login").hidden = true;
  $("console").hidden = false;
  $("whoami").hidden = false;
  $("nodes-section").hidden = !["admin", "provider"].includes(session.role);
  $("payouts-section").hidden = $("nodes-section").hidden;
  $("tenants-section").hidden = session.role !== "admin";
  $("price-form").hidden = session.role !== "admin";
  $("transfer-form").hidden = session.role !== "admin";
  $("offer-form").hidden = session.role !== "admin";
  $("maintenance-form").querySelector("button").disabled = session.role !== "admin";
  await Promise.all([refreshBalance(), searchOffers(), refreshRentals(), refreshSlow(), refreshBudget()]);
  session.timer = setInterval(tick, REFRESH_MS);
}

// Sign-out starts the page afresh rather than emptying it box by box: every form, result, secret and list of
// the tenant goes with the old page, and no reply to a request made under its key can land in the next one's.
// An `error` that made the page sign itself out is said on the fresh page's sign-in form.
function signOut(error = null) {
  sessionStorage.removeItem(KEY_ITEM);
  if (error) sessionStorage.setItem(SIGNED_OUT_ITEM, signedOutText(error));
  clearInterval(session.timer);
  session.key = null;
  for (const form of document.forms) form.reset(); // so the browser has nothing typed to restore
  location.replace(location.pathname);
}

function signedOutText(error) {
  if (error.status !== 401) return `Signed out: ${error.message}`;
  return `Signed out: this key no longer works (${error.message}); it was revoked or has expired. Sign in again.`;
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

let offersAsked = 0; // searches sent: only the newest one's answer is shown

// A shares row's unit: the largest share one GPU has free, and the memory free on that GPU.
function shareUnit(offer) {
  const memory = offer.share_memory_mib == null ? "" : ` · ${Math.floor(offer.share_memory_mib / 1024)} GiB`;
  return `share ≤ ${(offer.largest_share_milli / 1000).toFixed(2)}${memory}`;
}

// Which tiers' prices the tenant's plan discount was taken off, if any.
function discountNote(offers) {
  const discounted = new Map();
  for (const offer of offers) if (offer.plan_discount_bp) discounted.set(offer.tier, offer.plan_discount_bp);
  const parts = [...discounted].map(([tier, bp]) => `${(bp / 100).toFixed(2)}% off ${tier}`);
  return parts.length ? `Prices include your plan's discount: ${parts.join(", ")}.` : "";
}

async function searchOffers() {
  const asked = ++offersAsked;
  showError("offers-error", null);
  const query = $("offers-query").value.trim();
  let offers;
  try {
    offers = await api("GET", `/v1/offers?q=${encodeURIComponent(query)}`);
  } catch (error) {
    if (asked === offersAsked) {
      showError("offers-error", error);
      $("offers").tBodies[0].replaceChildren(); // rows of an earlier query would read as this one's
    }
    return;
  }
  if (asked !== offersAsked) return; // a later search (another query, or a refresh) answers instead
  const body = $("offers").tBodies[0];
  body.replaceChildren();
  $("offers-discount").textContent = discountNote(offers);
  const models = new Set();
  const regions = new Set();
  for (const offer of offers) {
    models.add(offer.gpu_model);
    regions.add(offer.region);
    const row = body.insertRow();
    cell(row, offer.gpu_model);
    cell(row, offer.shares ? shareUnit(offer) : (offer.mig_profile ?? "GPU"));
    cell(row, `${offer.region} (${offer.jurisdiction})`);
    cell(row, offer.tier);
    cell(row, offer.free_gpus, "num");
    cell(row, offer.max_gpus_per_node, "num");
    cell(row, offer.nodes_with_free_gpus, "num");
    cell(row, units(offer.unit_price_micros_per_hour), "num");
    const use = document.createElement("button");
    use.type = "button";
    use.textContent = "Use";
    use.setAttribute("aria-label", `Use ${offer.gpu_model} ${row.cells[1].textContent} ${offer.region} ${offer.tier}`);
    use.addEventListener("click", () => {
      $("rent-model").value = offer.gpu_model;
      $("rent-profile").value = offer.mig_profile ?? "";
      $("rent-share").value = offer.shares ? String(offer.largest_share_milli / 1000) : "";
      $("rent-gpus").value = offer.mig_profile || offer.shares ? 1 : Math.min(offer.max_gpus_per_node, 8);
      $("rent-tier").value = offer.tier;
      $("rent-command").focus();
    });
    row.insertCell().append(use);
  }
  $("models").replaceChildren(...suggestions(models));
  $("regions").replaceChildren(...suggestions(regions));
}

// --- the price book -------------------------------------------------------------------------------------

const PRICE_COLUMN = { on_demand: 0, reserved: 1, spot: 2 }; // the spot entries are floors

// the price in force now, then each one taking effect later with its date
function priceText(entries, nowS) {
  const sorted = [...entries].sort((a, b) => a.effective_from_s - b.effective_from_s);
  const inForce = sorted.filter((e) => e.effective_from_s <= nowS).at(-1);
  const later = sorted
    .filter((e) => e.effective_from_s > nowS)
    .map((e) => `${units(e.price_micros_per_gpu_hour)} from ${utcText(new Date(e.effective_from_s * 1000).toISOString())}`);
  return [inForce ? units(inForce.price_micros_per_gpu_hour) : null, ...later].filter(Boolean).join(", ");
}

async function refreshPrices() {
  let entries;
  try {
    entries = await api("GET", "/v1/prices");
  } catch (error) {
    showRefreshError("prices-error", error);
    return;
  }
  showError("prices-error", null);
  const rows = new Map(); // one row per GPU model (or MIG profile) and region, a column per tier
  for (const entry of entries) {
    const what = entry.mig_profile ? `${entry.gpu_model} ${entry.mig_profile}` : entry.gpu_model;
    const key = JSON.stringify([what, entry.region]);
    if (!rows.has(key)) rows.set(key, { what, region: entry.region, source: entry.source, tiers: [[], [], []] });
    rows.get(key).tiers[PRICE_COLUMN[entry.tier]].push(entry);
  }
  const models = new Set(entries.map((e) => e.gpu_model));
  $("price-models").replaceChildren(...suggestions(models));
  const nowS = Date.now() / 1000;
  const body = $("prices").tBodies[0];
  body.replaceChildren();
  for (const row of rows.values()) {
    const tr = body.insertRow();
    tr.dataset.model = row.what;
    tr.dataset.region = row.region;
    cell(tr, row.what).title = row.source;
    cell(tr, row.region === "*" ? "any" : row.region);
    for (const entriesOfTier of row.tiers) cell(tr, priceText(entriesOfTier, nowS), "num");
  }
}

// the form's refusal has its own line, which the list's refresh leaves alone: it stays until the form changes
async function addPrice(event) {
  event.preventDefault();
  showError("price-form-error", null);
  const form = $("price-form");
  try {
    const entry = {
      gpu_model: form.gpu_model.value.trim(),
      region: form.region.value.trim(),
      tier: form.tier.value,
      price_micros_per_gpu_hour: toMicros(form.price.value, "price / GPU-h"),
      source: form.source.value.trim(),
    };
    if (form.from.value) entry.effective_from = `${form.from.value}:00Z`; // read as UTC; now when empty
    await api("PUT", "/v1/prices", [entry]);
  } catch (error) {
    showError("price-form-error", error);
    return;
  }
  await Promise.all([refreshPrices(), searchOffers()]);
}

function decimal(text, field) {
  if (!text.trim()) return null;
  const value = Number(text);
  if (!Number.isFinite(value) || value <= 0) throw new ApiError(0, "give a positive number", field);
  return value;
}

// the share box's fraction of a GPU, checked in its own units (the server's are milli): whole percents below 1
function gpuShare(text) {
  const share = decimal(text, "share");
  if (share === null) return null;
  if (share >= 1) {
    throw new ApiError(0, `a share of a GPU is between 0 and 1 (got ${share}); whole GPUs are counts`, "share");
  }
  const percents = share * 100;
  if (percents < 1 - 1e-9 || Math.abs(percents - Math.round(percents)) > 1e-9) {
    throw new ApiError(0, `at least 0.01 of a GPU, in whole percents (got ${share})`, "share");
  }
  return share;
}

// the max hours box as whole seconds, at least 1 (the server's unit), refused in hours as typed
function maxDurationS(hours) {
  const seconds = Math.round(hours * 3600);
  if (seconds < 1) throw new ApiError(0, `at least 1 second (0.0003 h), got ${hours}`, "max hours");
  return seconds;
}

// the share memory box's GiB as MiB: only beside a share (the server would refuse it), and never a value that
// rounds to 0 MiB (which means "none held")
function shareMemory(text, share) {
  const gib = decimal(text, "share memory GiB");
  if (gib === null) return null;
  if (share === null) throw new ApiError(0, "only with a share of a GPU (give Share of a GPU too)", "share memory GiB");
  const mib = Math.round(gib * 1024);
  if (mib < 1) throw new ApiError(0, `at least 1 MiB (0.001 GiB), got ${gib}`, "share memory GiB");
  return mib;
}

function rentalRequest() {
  const form = $("rent-form");
  const request = {
    gpus: Number(form.gpus.value),
    nodes: Number(form.nodes.value),
    tier: form.tier.value,
  };
  if (form.gpu_model.value.trim()) request.gpu_model = form.gpu_model.value.trim();
  if (form.mig_profile.value.trim()) request.mig_profile = form.mig_profile.value.trim();
  const share = gpuShare(form.share.value);
  if (share !== null) request.share_milli = Math.round(share * 1000);
  const shareMemoryMib = shareMemory(form.share_memory.value, share);
  if (shareMemoryMib !== null) request.share_memory_mib = shareMemoryMib;
  const bid = toMicros(form.bid.value, "bid", null);
  if (bid !== null) request.bid_micros_per_gpu_hour = bid;
  const hours = decimal(form.hours.value, "max hours");
  if (hours !== null) request.max_duration_s = maxDurationS(hours);
  if (form.image.value.trim()) request.image = form.image.value.trim();
  if (form.name.value.trim()) request.name = form.name.value.trim();
  if (form.command.value.trim()) request.command = ["sh", "-c", form.command.value.trim()];
  return request;
}

async function dryRun() {
  showError("rent-error", null);
  $("rent-trial").textContent = "";
  try {
    $("rent-trial").textContent = trialText(await api("POST", "/v1/rentals/dry-run", rentalRequest()));
  } catch (error) {
    showError("rent-error", error);
  }
}

function trialText(trial) {
  let rate = trial.price_micros_per_hour == null ? "" : ` at ${units(trial.price_micros_per_hour)}/h`;
  if (trial.max_cost_micros != null) rate += ` (at most ${units(trial.max_cost_micros)} to its time limit)`;
  let text;
  if (trial.starts_now) text = `Would start now on ${trial.nodes.join(", ")}${rate}.`;
  else if (trial.preempts) text = `Would give ${trial.preempts} lower-tier rental(s) notice and start when they leave${rate}.`;
  else text = `Would wait (${trial.pending_reason}): ${trial.message}.`;
  if (trial.expected_start_at) text += ` Capacity would be reserved for it: starts by ${trial.expected_start_at} at the latest.`;
  if (trial.head_start_at) text += ` Behind the head of the queue, whose capacity is reserved from ${trial.head_start_at}.`;
  if (trial.rentals_waiting) text += ` ${trial.rentals_waiting} rentals are waiting; judged in the queue's order with them.`;
  return `${text} Dry run: nothing was created.`;
}

async function rent(event) {
  event.preventDefault();
  showError("rent-error", null);
  $("rent-trial").textContent = "";
  try {
    const rental = await api("POST", "/v1/rentals", rentalRequest(), { "Idempotency-Key": crypto.randomUUID() });
    await refreshRentals();
    select(rental.id);
  } catch (error) {
    showError("rent-error", error);
  }
}

// --- rentals ------------------------------------------------------------------------------------------

let rentalsAsked = 0; // reads of the rentals table sent: only the newest one's answer is shown
// what the table shows, kept between refreshes: its rows newest first, the cursor past its last page (the
// Link's `after`; null when no more follow), and the moment (server's clock) to ask for changes from
const shown = { rentals: [], after: null, last: null, since: null, busy: false };

// a page of rentals for the table: at most `limit` past the rental `after`, in the states the filter picks
function rentalsPath(limit, after) {
  const query = new URLSearchParams({ limit: String(limit), ...(after ? { after } : {}) });
  for (const state of filterStates()) query.append("state", state);
  return `/v1/rentals?${query}`;
}

// the states the table's filter picks (none: all)
function filterStates() {
  return { live: LIVE_STATES, ended: ENDED_STATES, all: [] }[$("rentals-state").value];
}

// `limit` more rentals past the cursor `after` (all from the newest when null), a page (1,000 at most) at a
// time, each past the cursor of the Link of the one before; the cursor past the last, null when none follow
async function readRentals(limit, after = null) {
  const rentals = [];
  let date = null;
  for (;;) {
    const page = await apiPage(rentalsPath(Math.min(RENTALS_MOST, limit - rentals.length), after));
    date ??= page.date;
    rentals.push(...page.items);
    after = page.after;
    if (!after || !page.items.length || rentals.length >= limit) return { rentals, after, date };
  }
}

// every rental changed since `since` (any state: one that left the filter's leaves the table), every page
async function readChanged(since) {
  const rentals = [];
  let after = null, date = null;
  do {
    const query = new URLSearchParams({ updated_after: since, limit: String(RENTALS_MOST), ...(after ? { after } : {}) });
    const page = await apiPage(`/v1/rentals?${query}`);
    date ??= page.date;
    rentals.push(...page.items);
    after = page.items.length ? page.after : null;
  } while (after);
  return { rentals, date };
}

// a change is stamped when its transaction writes it: ask from this long before the last answer, so one that
// was still committing then is read too
const CHANGES_OVERLAP_MS = 30_000;
function changesFrom(date) {
  return date ? new Date(date.getTime() - CHANGES_OVERLAP_MS).toISOString() : null;
}

// before b in the table's order (the API's: created_at newest first, then id)?
function newerThan(a, b) {
  const at = Date.parse(a.created_at), bt = Date.parse(b.created_at);
  return at !== bt ? at > bt : a.id < b.id;
}

// the table's rows read again from the newest, `limit` of them (sign-in, another filter)
async function reloadRentals(limit) {
  const asked = ++rentalsAsked;
  let read;
  try {
    read = await readRentals(limit);
  } catch (error) {
    if (error.status === 401) signOut(error);
    return;
  }
  if (asked !== rentalsAsked) return; // the filter changed since: a later read answers
  Object.assign(shown, { rentals: read.rentals, after: read.after, since: changesFrom(read.date) });
  shown.last = read.rentals.at(-1) ?? null;
  drawRentals();
}

// a refresh: only the rentals changed since the last read (new ones among them), merged into those shown;
// one changed past the last page read stays unread, one that left the filter leaves. A server that gives no
// `Date` (nothing to ask from) is read again whole.
async function refreshRentals() {
  if (!shown.since) return reloadRentals(Math.max(shown.rentals.length, RENTALS_PAGE));
  if (shown.busy) return; // the last refresh has not answered yet
  const asked = rentalsAsked;
  shown.busy = true;
  let read;
  try {
    read = await readChanged(shown.since);
  } catch (error) {
    if (error.status === 401) signOut(error);
    return;
  } finally {
    shown.busy = false;
  }
  if (asked !== rentalsAsked) return; // the filter or the page changed since: that read answers
  const states = filterStates();
  const byId = new Map(shown.rentals.map((r) => [r.id, r]));
  for (const rental of read.rentals) {
    const inRange = !shown.after || !shown.last || !newerThan(shown.last, rental);
    if ((states.length && !states.includes(rental.state)) || !inRange) byId.delete(rental.id);
    else byId.set(rental.id, rental);
  }
  shown.rentals = [...byId.values()].sort((a, b) => (newerThan(a, b) ? -1 : newerThan(b, a) ? 1 : 0));
  shown.since = changesFrom(read.date) ?? shown.since;
  drawRentals();
}

// "Show older": the next page past the last one read, added below
async function showOlder() {
  const asked = ++rentalsAsked;
  let read;
  try {
    read = await readRentals(RENTALS_PAGE, shown.after);
  } catch (error) {
    if (error.status === 401) signOut(error);
    return;
  }
  if (asked !== rentalsAsked) return;
  const known = new Set(shown.rentals.map((r) => r.id));
  shown.rentals.push(...read.rentals.filter((r) => !known.has(r.id)));
  shown.after = read.after;
  shown.last = read.rentals.at(-1) ?? shown.last;
  drawRentals();
}

function drawRentals() {
  const rentals = shown.rentals;
  showRentalsCount(rentals.length, !!shown.after);
  const body = $("rentals").tBodies[0];
  body.replaceChildren();
  for (const rental of rentals) {
    const row = body.insertRow();
    row.dataset.id = rental.id;
    row.classList.toggle("selected", rental.id === session.selected);
    row.insertCell().append(openButton(rental.id));
    cell(row, rental.request.name ?? "");
    cell(row, rental.state, `state ${rental.state}`);
    cell(row, shape(rental.request));
    cell(row, rental.request.tier);
    cell(row, rental.allocation.map((a) => a.node).join(", "));
    cell(row, rental.price_micros_per_hour == null ? "" : units(rental.price_micros_per_hour), "num");
    cell(row, rental.charged_micros || rental.allocation.length ? units(rental.charged_micros) : "", "num");
    cell(row, rental.pending_reason ?? "");
    row.addEventListener("click", () => select(rental.id));
  }
  $("rentals-empty").hidden = rentals.length > 0;
  const states = rentals.map((r) => `${r.id}:${r.state}`).join(",");
  if (states !== session.states) {  // a rental started or ended: what the month owes changed
    session.states = states;
    refreshUsage();
  }
}

// the rental's id as a button that opens it: a row opens with a click anywhere, and from the keyboard with this
function openButton(id) {
  const button = Object.assign(document.createElement("button"), { type: "button", textContent: id, className: "link" });
  button.setAttribute("aria-label", `open rental ${id}`);
  return button;
}

// how many rows the table shows, and "Show older" while the server says more follow them
function showRentalsCount(count, more) {
  const filter = $("rentals-state").value;
  const which = filter === "all" ? "" : ` ${filter}`;
  $("rentals-count").textContent = more ? `the newest ${count}${which}` : `${count}${which}`;
  $("rentals-more").hidden = !more;
  $("rentals-empty").textContent = filter === "all" ? "No rentals yet." : `No ${filter} rentals.`;
}

// the table's filter changed: read it again at once
function showRentals() {
  return reloadRentals(RENTALS_PAGE);
}

function select(id) {
  if (session.selected !== id) {
    session.selected = id;
    session.logNode = "";
    restartLog();
    $("detail-log-node").replaceChildren(new Option("every node", ""));
    showError("detail-error", null);
    showError("exec-error", null);
    $("exec-status").textContent = "";
    $("exec-output").hidden = true;
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
    showRefreshError("detail-error", error);
    return;
  }
  if (id !== session.selected) return;
  $("detail-id").textContent = rental.id;
  const parts = [rental.state, shape(rental.request), rental.request.tier];
  if (rental.price_micros_per_hour != null) parts.push(`${units(rental.price_micros_per_hour)} / h`);
  if (rental.charged_micros || rental.allocation.length) {
    const ended = ENDED_STATES.includes(rental.state);
    parts.push(`charged ${units(rental.charged_micros)}${ended ? "" : " so far"}`);
  }
  if (rental.pending_reason) {
    parts.push(`waiting: ${rental.pending_reason}${rental.pending_message ? ` (${rental.pending_message})` : ""}`);
  }
  if (rental.expected_start_at) parts.push(`starts by ${rental.expected_start_at}`);
  if (rental.notice_keeps_gpus != null) {
    parts.push(`preempted in part: runs on ${rental.notice_keeps_gpus} GPUs from ${rental.notice_deadline}`);
  } else if (rental.notice_deadline) parts.push(`preempted, ends at ${rental.notice_deadline}`);
  if (rental.time_limit_at) parts.push(`stops at ${rental.time_limit_at} (max hours)`);
  $("detail-summary").textContent = parts.join(" · ");
  $("detail-stop").disabled = [...ENDED_STATES, "stopping"].includes(rental.state);
  $("detail-terminal").disabled = rental.state !== "running";
  const body = $("detail-events").tBodies[0];
  body.replaceChildren();
  for (const event of rental.events) {
    const row = body.insertRow();
    cell(row, event.at.replace("T", " ").slice(0, 19));
    cell(row, event.kind);
    cell(row, event.reason ?? "");
    cell(row, event.message);
  }
  await showGpus(id, rental);
  if (rental.request.nodes > 1) await listLogNodes(id);
  $("detail-log-node-label").hidden = rental.request.nodes <= 1;
  await followLog(id);
}

const BARS = "▁▂▃▄▅▆▇█";

function sparkline(minutes, end) {
  // the last hour's utilization, a character a minute (a space where nothing was read), as `suanli gpus`
  const start = Math.floor(end / 60000) * 60000 - 59 * 60000;
  const bars = Array(60).fill(" ");
  for (const minute of minutes) {
    const at = Math.floor((Date.parse(minute.minute) - start) / 60000);
    if (minute.utilization_pct == null || at < 0 || at >= 60) continue;
    bars[at] = BARS[Math.min(Math.floor((Math.max(minute.utilization_pct, 0) / 100) * BARS.length), BARS.length - 1)];
  }
  return bars.join("");
}

async function showGpus(id, rental) {
  // the last reading of each GPU the rental holds, as `suanli show` prints it, and its last hour; hidden
  // when none was read
  let gpus = [];
  let history = [];
  if (rental.allocation.length && !ENDED_STATES.includes(rental.state)) {
    try {
      const path = `/v1/rentals/${encodeURIComponent(id)}/gpus`;
      [gpus, history] = await Promise.all([api("GET", path), api("GET", `${path}/history?minutes=60`)]);
    } catch (error) {
      showRefreshError("detail-error", error);
    }
  }
  if (id !== session.selected) return;
  const minutes = new Map(history.map((gpu) => [`${gpu.node}/${gpu.gpu_index}`, gpu.minutes]));
  const now = Date.now();
  const read = gpus.filter((gpu) => gpu.read_at);
  const body = $("detail-gpus").tBodies[0];
  body.replaceChildren();
  for (const gpu of read) {
    const row = body.insertRow();
    cell(row, gpu.node);
    cell(row, String(gpu.gpu_index));
    cell(row, gpu.mig_profile ?? (gpu.whole_gpu ? "whole" : `${gpu.milli / 10}% share`));
    cell(row, gpu.utilization_pct == null ? "-" : String(gpu.utilization_pct), "num");
    cell(row, sparkline(minutes.get(`${gpu.node}/${gpu.gpu_index}`) ?? [], now), "spark");
    for (const value of [gpu.memory_used_mib, gpu.power_w]) {
      cell(row, value == null ? "-" : Number(value).toLocaleString("en-US"), "num");
    }
    cell(row, gpu.read_at.replace("T", " ").slice(0, 19));
  }
  $("detail-gpus-block").hidden = read.length === 0;
}

function restartLog() {
  session.logOffset = 0;
  $("detail-log").textContent = "";
}

// A multi-node rental's output can be read one node (rank) at a time: the nodes it ran on, as its agents say.
async function listLogNodes(id) {
  let runs;
  try {
    runs = await api("GET", `/v1/rentals/${encodeURIComponent(id)}/runs`);
  } catch (error) {
    return;
  }
  if (id !== session.selected) return;
  const select = $("detail-log-node");
  const known = new Set([...select.options].map((option) => option.value));
  for (const run of runs) if (!known.has(run.node)) select.add(new Option(run.node, run.node));
}

async function followLog(id) {
  const node = session.logNode;
  const only = node ? `&node=${encodeURIComponent(node)}` : "";
  try {
    const page = await api("GET", `/v1/rentals/${encodeURIComponent(id)}/logs?offset=${session.logOffset}${only}`);
    if (id !== session.selected || node !== session.logNode || page.offset !== session.logOffset) return;
    $("detail-log").textContent += page.data;
    session.logOffset = page.next_offset;
  } catch (error) {
    /* no log yet */
  }
}

// submit the shown rental's request again: a new rental, which the page then shows
async function rerunSelected() {
  showError("detail-error", null);
  try {
    const shown = await api("GET", `/v1/rentals/${encodeURIComponent(session.selected)}`);
    const rental = await api("POST", "/v1/rentals", shown.request, { "Idempotency-Key": crypto.randomUUID() });
    await refreshRentals();
    select(rental.id);
  } catch (error) {
    showError("detail-error", error);
  }
}

// a one-off command inside the shown (running) rental, as `suanli exec`: queued for its node's agent, then
// its output as it comes (the last 64 Ki characters) and its exit code once it ends
async function execInSelected(event) {
  event.preventDefault();
  showError("exec-error", null);
  const id = session.selected;
  const text = $("exec-command").value.trim();
  if (!text) {
    showError("exec-error", new ApiError(0, "command: give one to run, e.g. nvidia-smi"));
    return;
  }
  const base = `/v1/rentals/${encodeURIComponent(id)}/execs`;
  let found;
  try {
    found = await api("POST", base, { command: ["sh", "-c", text] });
    $("exec-output").hidden = true;
    while (["queued", "running"].includes(found.state)) {
      $("exec-status").textContent = `${found.state}…`;
      $("exec-output").textContent = found.output;
      $("exec-output").hidden = !found.output;
      await new Promise((resolve) => setTimeout(resolve, 500));
      if (id !== session.selected) return;
      found = await api("GET", `${base}/${encodeURIComponent(found.id)}`);
    }
  } catch (error) {
    $("exec-status").textContent = "";
    showError("exec-error", error);
    return;
  }
  $("exec-output").textContent = found.output;
  $("exec-output").hidden = false;
  $("exec-status").textContent =
    found.state === "exited" ? `exit ${found.exit_code}` : `${found.state}: ${found.message}`;
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

// --- the month's invoice, and the nodes (operators) -----------------------------------------------------

// edits of the budget form so far: a refresh that began before the latest leaves the form as typed
let budgetEdits = 0;

// the tenant's own budget in the form, and the operator's caps beside it (read at sign-in and after a change,
// so a refresh never overwrites what is being typed, even one whose answer comes after the typing began)
// the form's fields are filled at sign-in and after a save; every refresh after that (`refreshSlow`) updates
// only what was spent and the operator's caps, never a field the tenant may be editing
async function refreshBudget(fields = true) {
  const edits = budgetEdits;
  let limits;
  try {
    limits = await api("GET", "/v1/limits");
  } catch (error) {
    showRefreshError("budget-error", error);
    return;
  }
  const shown = (micros) => (micros == null ? "" : units(micros));
  if (fields && edits === budgetEdits) {
    $("budget-daily").value = shown(limits.budget_daily_micros);
    $("budget-monthly").value = shown(limits.budget_monthly_micros);
    $("budget-stop").checked = limits.budget_stops_running;
  }
  $("budget-spent").textContent =
    `spent ${units(limits.spent_today_micros)} today, ${units(limits.spent_month_micros)} this month`;
  const caps = [["daily", limits.daily_cap_micros], ["monthly", limits.monthly_cap_micros]]
    .filter(([, micros]) => micros != null)
    .map(([name, micros]) => `${name} ${units(micros)}`);
  $("budget-caps").textContent = caps.length ? `the operator's caps: ${caps.join(", ")}` : "";
}

async function setBudget(event) {
  event.preventDefault();
  showError("budget-error", null);
  try {
    const body = {};
    const daily = toMicros($("budget-daily").value, "daily budget", null);
    if (daily !== null) body.daily_micros = daily;
    const monthly = toMicros($("budget-monthly").value, "monthly budget", null);
    if (monthly !== null) body.monthly_micros = monthly;
    if ($("budget-stop").checked) body.stop_running = true;
    await api("PUT", "/v1/budget", body);
  } catch (error) {
    showError("budget-error", error);
    return;
  }
  await refreshBudget();
}

// the month's invoice with its first `session.usageLines` rental lines, a page (1,000 at most) at a time past
// the Link's cursor; a month of 10,000 rentals is not one answer, nor a table of 10,000 rows
async function readUsage(month) {
  const lines = [];
  let after = null, invoice;
  for (;;) {
    const query = new URLSearchParams({ limit: String(Math.min(RENTALS_MOST, session.usageLines - lines.length)), ...(after ? { after } : {}) });
    const page = await apiPage(`/v1/invoices/${month}?${query}`);
    invoice = page.items;
    lines.push(...invoice.lines);
    after = page.after;
    if (!after || !invoice.lines.length || lines.length >= session.usageLines) return { ...invoice, lines, more: !!after };
  }
}

async function refreshUsage() {
  const month = new Date().toISOString().slice(0, 7);
  let invoice;
  try {
    invoice = await readUsage(month);
  } catch (error) {
    showRefreshError("usage-error", error);
    return;
  }
  showError("usage-error", null);
  $("usage-month").textContent = `${month} (UTC)`;
  const count = invoice.line_count ?? invoice.lines.length;
  $("usage-count").textContent = invoice.more ? `(the first ${invoice.lines.length} of ${count} rental lines)` : "";
  $("usage-more").hidden = !invoice.more;
  const body = $("usage").tBodies[0];
  body.replaceChildren();
  for (const line of [...invoice.lines, ...invoice.plan_lines, ...invoice.sla_credit_lines]) {
    const row = body.insertRow();
    cell(row, line.ref, "mono");
    cell(row, line.description);
    cell(row, (line.gpu_seconds / 3600).toFixed(3), "num");
    cell(row, units(line.rate_micros_per_hour), "num");
    cell(row, line.discounts.map((d) => `${d.label} ${units(d.micros_per_hour)}`).join(", "));
    cell(row, units(line.amount_micros), "num");
    cell(row, line.energy_kwh == null ? "" : line.energy_kwh.toFixed(3), "num");
    cell(row, line.co2_kg == null ? "" : line.co2_kg.toFixed(3), "num");
  }
  $("usage-total").textContent = units(invoice.total_micros);
  $("usage-kwh").textContent = invoice.total_energy_kwh.toFixed(3);
  $("usage-co2").textContent = invoice.total_co2_kg.toFixed(3);
}

function nodeState(node) {
  if (node.gpu_mismatch) return `cordoned: ${node.gpu_mismatch}`;
  if (node.maintenance_until) return `maintenance until ${node.maintenance_until.replace("T", " ").slice(0, 16)}`;
  return node.schedulable ? "schedulable" : "drained";
}

async function refreshNodes() {
  if ($("nodes-section").hidden) return;
  let nodes;
  try {
    nodes = await api("GET", "/v1/nodes");
  } catch (error) {
    showRefreshError("nodes-error", error);
    return;
  }
  fillSelect("maintenance-node", nodes.map((n) => option(n.name)));
  const body = $("nodes").tBodies[0];
  body.replaceChildren();
  for (const node of nodes) {
    const row = body.insertRow();
    row.dataset.node = node.name;
    cell(row, node.name, "mono");
    cell(row, node.region);
    const gpus = cell(row, `${node.gpu_count} x ${node.gpu_model} (${node.gpu_mode})`);
    if (node.gpu_mode === "mig") gpus.append(migList(node));
    cell(row, (node.free_gpu_milli / 1000).toFixed(node.free_gpu_milli % 1000 ? 3 : 0), "num");
    cell(row, node.provider);
    cell(row, nodeState(node));
    const action = node.schedulable ? "drain" : "undrain";
    const button = Object.assign(document.createElement("button"), { type: "button", textContent: action });
    button.disabled = session.role !== "admin";
    button.addEventListener("click", () => setDrained(node.name, action));
    row.insertCell().append(button);
  }
}

// a MIG node's instances, a line per GPU, as the scheduler lays them out: as the host reported, or declared
function migList(node) {
  const list = Object.assign(document.createElement("ul"), { className: "mig" });
  for (let index = 0; index < node.gpu_count; index++) {
    const instances = node.mig_instances
      .filter((i) => i.gpu_index === index)
      .map((i) => `${i.profile}@${i.start_slot}${i.busy ? " (busy)" : ""}`);
    const from = node.mig_host_gpus.includes(index) ? "as the host has it" : "as declared";
    const item = document.createElement("li");
    item.textContent = `GPU ${index}: ${instances.join(", ") || "no instances"}, ${from}`;
    list.append(item);
  }
  return list;
}

const utcText = (moment) => moment.replace("T", " ").slice(0, 16);

// GET `path` and write a row per item into table `id`; the table, and its section `${id}-section` unless
// that keeps a form (data-keep), stay hidden while there are none, or when the server cannot say
async function refreshOwnList(path, id, writeRow) {
  let items;
  try {
    items = await api("GET", path);
  } catch (error) {
    return;
  }
  const section = $(`${id}-section`);
  if (!("keep" in section.dataset)) section.hidden = items.length === 0;
  $(id).hidden = items.length === 0;
  const body = $(id).tBodies[0];
  body.replaceChildren();
  for (const item of items) writeRow(body.insertRow(), item);
}

// "ended", "to come", or `openText` while now is in [starts_at, ends_at)
function periodState(period, openText) {
  const now = Date.now();
  if (Date.parse(period.ends_at) <= now) return "ended";
  return Date.parse(period.starts_at) <= now ? openText : "to come";
}

async function refreshContracts() {
  const shown = [];
  await refreshOwnList("/v1/contracts", "contracts", (row, contract) => {
    shown.push(contract);
    row.dataset.contract = contract.id;
    cell(row, contract.id, "mono");
    cell(row, contract.tenant_id, "mono");
    cell(row, `${contract.count} x ${contract.gpu_model}`);
    cell(row, contract.region);
    cell(row, utcText(contract.starts_at));
    cell(row, utcText(contract.ends_at));
    cell(row, units(contract.price_micros), "num");
    cell(row, periodState(contract, "open: held for you"));
  });
  fillSelect("transfer-contract", shown.filter((c) => periodState(c, "open") !== "ended").map((c) => option(c.id)));
}

// --- offers: an operator's negotiated price, accepted or declined by its tenant ------------------------

async function refreshOffers() {
  let offers;
  try {
    offers = await api("GET", "/v1/contract-offers");
  } catch (error) {
    return;
  }
  $("contract-offers-block").hidden = offers.length === 0;
  const body = $("contract-offers").tBodies[0];
  body.replaceChildren();
  for (const offer of offers) {
    const row = body.insertRow();
    row.dataset.offer = offer.id;
    cell(row, offer.id, "mono");
    cell(row, offer.tenant_id, "mono");
    cell(row, `${offer.count} x ${offer.gpu_model}`);
    cell(row, offer.region);
    cell(row, utcText(offer.starts_at));
    cell(row, utcText(offer.ends_at));
    cell(row, units(offer.price_micros), "num");
    cell(row, utcText(offer.expires_at));
    cell(row, offer.state === "accepted" ? `accepted: ${offer.contract_id}` : offer.state);
    const actions = row.insertCell();
    if (offer.state !== "open") continue;
    const admin = session.role === "admin";
    if (!admin) actions.append(offerButton("accept", offer.id));
    actions.append(offerButton(admin ? "withdraw" : "decline", offer.id));
  }
}

function offerButton(label, offerId) {
  const button = Object.assign(document.createElement("button"), { type: "button", textContent: label });
  const action = label === "accept" ? "accept" : "decline";
  button.addEventListener("click", () => decideOffer(offerId, action, button));
  return button;
}

async function decideOffer(offerId, action, button) {
  button.disabled = true; // one click, one decision (accepting again would change nothing anyway)
  showError("offer-error", null);
  $("offer-done").textContent = "";
  try {
    const result = await api("POST", `/v1/contract-offers/${encodeURIComponent(offerId)}/${action}`);
    $("offer-done").textContent =
      action === "accept" ? `Signed ${result.id}: ${units(result.price_micros)} prepaid.` : `${offerId} ${result.state}.`;
  } catch (error) {
    showError("offer-error", error);
  }
  await Promise.all([refreshOffers(), refreshContracts(), refreshBalance()]);
}

async function makeOffer(event) {
  event.preventDefault();
  showError("offer-form-error", null);
  const form = $("offer-form");
  try {
    const request = {
      tenant_id: form.tenant.value,
      gpu_model: form.gpu_model.value.trim(),
      count: Number(form.count.value),
      region: form.region.value.trim(),
      starts_at: `${form.from.value}:00Z`, // the inputs are read as UTC
      ends_at: `${form.until.value}:00Z`,
      price_micros: toMicros(form.price.value, "price"),
    };
    if (form.expires.value) request.expires_at = `${form.expires.value}:00Z`;
    await api("POST", "/v1/contract-offers", request);
  } catch (error) {
    showError("offer-form-error", error);
    return;
  }
  await refreshOffers();
}

async function transferContract(event) {
  event.preventDefault();
  showError("transfer-error", null);
  $("transfer-done").textContent = "";
  const contractId = $("transfer-contract").value;
  const body = { to_tenant_id: $("transfer-tenant").value };
  try {
    const moved = await api("POST", `/v1/contracts/${encodeURIComponent(contractId)}/transfer`, body);
    $("transfer-done").textContent = `${moved.id} is now held by ${moved.tenant_id}.`;
  } catch (error) {
    showError("transfer-error", error);
  }
  await refreshContracts();
}

// --- buying compute futures: quote first, then sign exactly what was quoted ------------------------------

function contractRequest() {
  const form = $("contract-form");
  return {
    gpu_model: form.gpu_model.value.trim(),
    count: Number(form.count.value),
    region: form.region.value.trim(),
    starts_at: `${form.from.value}:00Z`, // the inputs are read as UTC
    ends_at: `${form.until.value}:00Z`,
  };
}

function forgetQuote() {
  session.quoted = null;
  $("contract-sign").disabled = true;
  $("contract-quote-text").textContent = "";
}

function quoteText(quote) {
  const gpuHours = (quote.count * (Date.parse(quote.ends_at) - Date.parse(quote.starts_at))) / 3.6e6;
  const window = `${utcText(quote.starts_at)} to ${utcText(quote.ends_at)} UTC`;
  const price = `${units(quote.price_micros_per_gpu_hour)} / GPU-h = ${units(quote.price_micros)}`;
  const text = `${quote.count} x ${quote.gpu_model} in ${quote.region}, ${window}: ${gpuHours} GPU-h at ${price}`;
  return quote.payable
    ? `${text}, prepaid when you sign.`
    : `${text}. That is more than you can pay now: top up first.`;
}

async function quoteContract(event) {
  event.preventDefault();
  forgetQuote();
  showError("contract-error", null);
  const request = contractRequest();
  try {
    const quote = await api("POST", "/v1/contracts/quote", request);
    $("contract-quote-text").textContent = quoteText(quote);
    if (quote.payable) session.quoted = { request, key: crypto.randomUUID() };
    $("contract-sign").disabled = !quote.payable;
  } catch (error) {
    showError("contract-error", error);
  }
}

async function signContract() {
  const quoted = session.quoted;
  if (!quoted) return;
  forgetQuote(); // one click signs once
  showError("contract-error", null);
  try {
    const contract = await api("POST", "/v1/contracts", quoted.request, { "Idempotency-Key": quoted.key });
    $("contract-quote-text").textContent = `Signed ${contract.id}: ${units(contract.price_micros)} prepaid.`;
  } catch (error) {
    showError("contract-error", error);
  }
  await Promise.all([refreshContracts(), refreshBalance()]);
}

const percent = (bp) => `${(bp / 100).toFixed(2)}%`;

function planTerms(plan) {
  if (plan.kind === "membership") {
    return `${percent(plan.discount_bp)} off on-demand; fee ${units(plan.fee_micros)}`;
  }
  const share = `${percent(plan.revenue_share_bp)} of reported revenue`;
  return `${percent(plan.discount_bp)} off on-demand and reserved; ${share}`;
}

const refreshPlans = () =>
  refreshOwnList("/v1/plans", "plans", (row, plan) => {
    cell(row, plan.id, "mono");
    cell(row, plan.kind.replace("_", " "));
    cell(row, planTerms(plan));
    cell(row, utcText(plan.starts_at));
    cell(row, utcText(plan.ends_at));
    cell(row, periodState(plan, "in force"));
  });

// --- API keys -----------------------------------------------------------------------------------------

const keysPath = () => `/v1/tenants/${encodeURIComponent(session.tenantId)}/keys`;

const refreshKeys = () =>
  refreshOwnList(keysPath(), "keys", (row, key) => {
    cell(row, key.id + (key.id === session.keyId ? " (this session's)" : ""), "mono");
    cell(row, key.label);
    cell(row, utcText(key.created_at));
    cell(row, key.revoked ? "revoked" : "active");
    const revoke = document.createElement("button");
    revoke.textContent = "Revoke";
    revoke.disabled = key.revoked || key.id === session.keyId; // not the key this console signed in with
    revoke.addEventListener("click", () => revokeKey(key.id));
    row.insertCell().append(revoke);
  });

// POST the form field `field` as `body` (with `more()`'s fields): the secret made is shown once, the field
// cleared, the list redrawn
async function makeWithSecret(event, { path, field, body, prefix, refresh, more = () => ({}) }) {
  event.preventDefault();
  showError(`${prefix}-error`, null);
  try {
    const made = await api("POST", path, { [body]: $(field).value.trim(), ...more() });
    $(`${prefix}-secret-value`).textContent = made.secret;
    $(`${prefix}-secret`).hidden = false;
    $(field).value = "";
  } catch (error) {
    showError(`${prefix}-error`, error);
  }
  await refresh();
}

// DELETE `path`, an error shown under the section `prefix`, then its list again
async function deleteThen(path, prefix, refresh) {
  showError(`${prefix}-error`, null);
  try {
    await api("DELETE", path);
  } catch (error) {
    showError(`${prefix}-error`, error);
  }
  await refresh();
}

const createKey = (event) =>
  makeWithSecret(event, {
    path: keysPath(), field: "key-label", body: "label", prefix: "key", refresh: refreshKeys,
  });
const revokeKey = (id) => deleteThen(`${keysPath()}/${encodeURIComponent(id)}`, "key", refreshKeys);

// --- webhooks -----------------------------------------------------------------------------------------

const refreshWebhooks = () =>
  refreshOwnList("/v1/webhooks", "webhooks", (row, hook) => {
    cell(row, hook.id, "mono");
    cell(row, hook.url);
    cell(row, hook.events.length ? hook.events.join(", ") : "all");
    cell(row, hook.delivered_at ? utcText(hook.delivered_at) : "");
    cell(row, String(hook.failures), "num");
    cell(row, hook.last_error ?? "");
    const remove = document.createElement("button");
    remove.textContent = "Remove";
    remove.addEventListener("click", () => removeWebhook(hook.id));
    row.insertCell().append(remove);
  });

const addWebhook = (event) =>
  makeWithSecret(event, {
    path: "/v1/webhooks", field: "webhook-url", body: "url", prefix: "webhook", refresh: refreshWebhooks,
    more: () => ({ events: $("webhook-events").value.split(/[\s,]+/).filter(Boolean) }),
  });
const removeWebhook = (id) => deleteThen(`/v1/webhooks/${encodeURIComponent(id)}`, "webhook", refreshWebhooks);

// --- tenants and their plans (admins) ------------------------------------------------------------------

async function refreshTenants() {
  if ($("tenants-section").hidden) return;
  let tenants;
  try {
    tenants = await api("GET", "/v1/tenants");
  } catch (error) {
    showRefreshError("plan-error", error);
    return;
  }
  const body = $("tenants").tBodies[0];
  body.replaceChildren();
  for (const tenant of tenants) {
    const row = body.insertRow();
    row.dataset.tenant = tenant.id;
    cell(row, tenant.id, "mono");
    cell(row, tenant.name);
    cell(row, tenant.role);
    cell(row, utcText(tenant.created_at));
  }
  const customers = tenants.filter((t) => t.role === "tenant");
  for (const id of ["plan-tenant", "transfer-tenant", "offer-tenant"]) {
    fillSelect(id, customers.map((t) => option(t.id, `${t.name} (${t.id})`)));
  }
}

// a percentage as basis points; "" is 0
function basisPoints(text, field) {
  const value = text.trim() ? Number(text) : 0;
  if (!Number.isFinite(value) || value < 0 || value > 100) throw new ApiError(0, "give a percentage from 0 to 100", field);
  return Math.round(value * 100);
}

function planRequest() {
  const form = $("plan-form");
  const feeMicros = toMicros(form.fee.value, "fee", 0);
  const request = {
    kind: form.kind.value,
    discount_bp: basisPoints(form.discount.value, "discount %"),
    fee_micros: feeMicros,
    revenue_share_bp: basisPoints(form.share.value, "revenue share %"),
  };
  if (form.from.value) request.starts_at = `${form.from.value}:00Z`; // the inputs are read as UTC
  if (form.until.value) request.ends_at = `${form.until.value}:00Z`;
  return request;
}

async function putOnPlan(event) {
  event.preventDefault();
  showError("plan-error", null);
  $("plan-made").textContent = "";
  const tenantId = $("plan-tenant").value;
  try {
    const plan = await api("POST", `/v1/tenants/${encodeURIComponent(tenantId)}/plans`, planRequest());
    const period = `${utcText(plan.starts_at)} to ${utcText(plan.ends_at)} UTC`;
    $("plan-made").textContent = `${plan.id} for ${plan.tenant_id}: ${planTerms(plan)}, ${period}.`;
  } catch (error) {
    showError("plan-error", error);
  }
}

const PAYOUT_PAGE = 1000; // lines per /v1/payouts page: the most the server sends in one

// Every provider's payout, its lines from all pages (each page after the last line of the one before).
async function allPayouts() {
  const byProvider = new Map();
  let after = null;
  for (;;) {
    const query = new URLSearchParams({ limit: String(PAYOUT_PAGE), ...(after ? { after } : {}) });
    const page = await api("GET", `/v1/payouts?${query}`);
    let last = null;
    let count = 0;
    for (const payout of page) {
      if (!byProvider.has(payout.provider)) byProvider.set(payout.provider, { ...payout, lines: [] });
      byProvider.get(payout.provider).lines.push(...payout.lines);
      count += payout.lines.length;
      if (payout.lines.length) last = `${payout.provider}/${payout.lines[payout.lines.length - 1].ref}`;
    }
    if (count !== PAYOUT_PAGE) return [...byProvider.values()];
    after = last;
  }
}

async function refreshPayouts() {
  if ($("payouts-section").hidden) return;
  let payouts;
  try {
    payouts = await allPayouts();
  } catch (error) {
    showRefreshError("payouts-error", error);
    return;
  }
  showError("payouts-error", null);
  const body = $("payouts").tBodies[0];
  body.replaceChildren();
  for (const payout of payouts) {
    const row = body.insertRow();
    row.dataset.provider = payout.provider;
    cell(row, payout.provider);
    cell(row, String(payout.lines.length), "num");
    cell(row, units(payout.payable_micros), "num");
  }
}

async function refreshMaintenance() {
  if ($("nodes-section").hidden) return;
  let windows;
  try {
    windows = await api("GET", "/v1/fleet/maintenance");
  } catch (error) {
    showRefreshError("maintenance-error", error);
    return;
  }
  const body = $("maintenance").tBodies[0];
  body.replaceChildren();
  for (const window of windows) {
    const row = body.insertRow();
    row.dataset.window = window.id;
    cell(row, window.id, "mono");
    cell(row, window.node, "mono");
    cell(row, utcText(window.starts_at));
    cell(row, utcText(window.ends_at));
    cell(row, window.reason);
    const cancel = Object.assign(document.createElement("button"), { type: "button", textContent: "cancel" });
    cancel.disabled = session.role !== "admin";
    cancel.addEventListener("click", () => cancelMaintenance(window.id));
    row.insertCell().append(cancel);
  }
}

async function scheduleMaintenance(event) {
  event.preventDefault();
  showError("maintenance-error", null);
  const form = $("maintenance-form");
  const body = {
    node: form.node.value,
    starts_at: `${form.from.value}:00Z`, // the inputs are read as UTC
    ends_at: `${form.until.value}:00Z`,
    reason: form.reason.value.trim(),
  };
  try {
    await api("POST", "/v1/fleet/maintenance", body);
  } catch (error) {
    showError("maintenance-error", error);
    return;
  }
  await Promise.all([refreshMaintenance(), refreshNodes()]);
}

async function cancelMaintenance(id) {
  showError("maintenance-error", null);
  try {
    await api("DELETE", `/v1/fleet/maintenance/${encodeURIComponent(id)}`);
  } catch (error) {
    showError("maintenance-error", error);
  }
  await Promise.all([refreshMaintenance(), refreshNodes()]);
}

async function setDrained(name, action) {
  showError("nodes-error", null);
  try {
    await api("POST", `/v1/nodes/${encodeURIComponent(name)}/${action}`);
  } catch (error) {
    showError("nodes-error", error);
  }
  await Promise.all([refreshNodes(), searchOffers()]);
}

async function refreshSlow() {
  await Promise.all([
    refreshPrices(),
    refreshUsage(),
    refreshNodes(),
    refreshMaintenance(),
    refreshContracts(),
    refreshOffers(),
    refreshPlans(),
    refreshWebhooks(),
    refreshKeys(),
    refreshPayouts(),
    refreshTenants(),
    refreshBudget(false),
  ]);
}

async function tick() {
  session.ticks += 1;
  const slow = session.ticks % SLOW_EVERY === 0 ? refreshSlow() : null;
  await Promise.all([refreshRentals(), refreshDetail(), refreshBalance(), slow]);
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
$("sign-out").addEventListener("click", () => signOut());
$("rentals-state").addEventListener("change", () => showRentals());
$("rentals-more").addEventListener("click", showOlder);
$("usage-more").addEventListener("click", () => {
  session.usageLines += USAGE_PAGE;
  refreshUsage();
});
$("offers-form").addEventListener("submit", (event) => {
  event.preventDefault();
  searchOffers();
});
$("rent-form").addEventListener("submit", rent);
$("rent-check").addEventListener("click", dryRun);
$("budget-form").addEventListener("submit", setBudget);
$("budget-form").addEventListener("input", () => { budgetEdits += 1; });
$("detail-stop").addEventListener("click", stopSelected);
$("detail-rerun").addEventListener("click", rerunSelected);
// a tab this one opens gets a copy of its sessionStorage (the key): not with noopener, so not a plain link
$("detail-terminal").addEventListener("click", () =>
  window.open(`terminal.html?rental=${encodeURIComponent(session.selected)}`, "_blank"));
$("exec-form").addEventListener("submit", execInSelected);
$("detail-log-node").addEventListener("change", (event) => {
  session.logNode = event.target.value;
  restartLog();
  followLog(session.selected);
});
$("maintenance-form").addEventListener("submit", scheduleMaintenance);
$("contract-form").addEventListener("submit", quoteContract);
$("contract-form").addEventListener("input", forgetQuote); // a changed form is no longer what was quoted
$("contract-sign").addEventListener("click", signContract);
$("plan-form").addEventListener("submit", putOnPlan);
$("price-form").addEventListener("submit", addPrice);
$("price-form").addEventListener("input", () => showError("price-form-error", null));
$("transfer-form").addEventListener("submit", transferContract);
$("offer-form").addEventListener("submit", makeOffer);
$("webhook-form").addEventListener("submit", addWebhook);
$("key-form").addEventListener("submit", createKey);

if (session.key) {
  signIn(session.key).catch(signOut);
} else {
  $("login").hidden = false;
  $("login-error").textContent = sessionStorage.getItem(SIGNED_OUT_ITEM) ?? "";
  sessionStorage.removeItem(SIGNED_OUT_ITEM);
}
