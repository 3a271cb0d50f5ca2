// Formatting and DOM helpers shared by the pages: numbers, money, times, the token kinds and
// their colours, and a diagnosis put into words.

// h('a', {href: '#/'}, 'text', child...): an element. Attributes starting with "on" are event
// listeners; `class` and `dataset` are set as such; null/false children are skipped. Text is
// always set as text (never parsed as HTML).
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k === 'value') el.value = v;
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

export function clear(el) { while (el.firstChild) el.firstChild.remove(); return el; }

const intFmt = new Intl.NumberFormat('en-US');
export function fmtInt(n) { return n === null || n === undefined ? '—' : intFmt.format(n); }

// Dollars with enough digits to tell small costs apart: $12.34, $0.0123, $0.000045.
export function fmtUsd(v) {
  if (v === null || v === undefined) return '—';
  const a = Math.abs(v);
  if (a === 0) return '$0';
  if (a >= 100) return `${v < 0 ? '-' : ''}$${intFmt.format(Math.round(a))}`;
  if (a >= 1) return `${v < 0 ? '-' : ''}$${a.toFixed(2)}`;
  const digits = Math.min(8, Math.max(2, 2 - Math.floor(Math.log10(a))));
  return `${v < 0 ? '-' : ''}$${a.toFixed(digits)}`;
}

export function fmtPct(r, digits = 1) {
  return r === null || r === undefined || Number.isNaN(r) ? '—' : `${(r * 100).toFixed(digits)}%`;
}

export function fmtMs(ms) {
  if (ms === null || ms === undefined) return '—';
  if (ms >= 10000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms >= 1000) return `${(ms / 1000).toFixed(2)} s`;
  return `${ms.toFixed(ms < 10 ? 1 : 0)} ms`;
}

// One formatter for every call: toLocaleString with options builds a new one each time, which
// for a 200-turn thread was a third of its render time.
const timeFmt = new Intl.DateTimeFormat(undefined, { year: 'numeric', month: 'short', day: 'numeric',
  hour: '2-digit', minute: '2-digit', second: '2-digit' });
export function fmtTime(iso) {
  return iso ? timeFmt.format(new Date(iso)) : '—';
}
const clockFmt = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit' });
// The time of day only (tables of one thread's turns; the full date is in the title).
export function fmtClock(iso) {
  return iso ? clockFmt.format(new Date(iso)) : '—';
}

export function fmtAgo(iso) {
  if (!iso) return '—';
  const s = (Date.now() - new Date(iso).getTime()) / 1000;
  if (s < 60) return `${Math.max(0, Math.round(s))} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}

// The token kinds of a turn, in the order the bars stack them (bottom up).
export const KINDS = [
  { key: 'cache_read', label: 'Cache read', color: '#2f9e6e' },
  { key: 'cache_write_5m', label: 'Write 5m', color: '#e3a72f' },
  { key: 'cache_write_1h', label: 'Write 1h', color: '#d2691e' },
  { key: 'cache_write_no_ttl', label: 'Write (no TTL)', color: '#b9975b' },
  { key: 'uncached', label: 'Uncached', color: '#8391a7' },
  { key: 'output', label: 'Output', color: '#4c7fd6' },
];
export const COST_PARTS = [
  { key: 'cache_read', label: 'Cache read', color: '#2f9e6e' },
  { key: 'cache_write', label: 'Cache write', color: '#e3a72f' },
  { key: 'uncached', label: 'Uncached', color: '#8391a7' },
  { key: 'output', label: 'Output', color: '#4c7fd6' },
];

// cache_read ÷ (cache_read + every write + uncached); null unless all are known. Leaving the
// writes out would overstate it.
export function hitRate(u) {
  if (!u) return null;
  const parts = ['cache_read', 'cache_write_5m', 'cache_write_1h', 'cache_write_no_ttl', 'uncached'];
  let total = 0;
  for (const p of parts) {
    const v = u[p];
    if (v === undefined) continue;  // a kind this server does not report
    if (v === null) return null;    // reported as unknown
    total += v;
  }
  return total > 0 ? u.cache_read / total : null;
}

export function inputTokens(u) {
  let total = 0;
  for (const p of ['cache_read', 'cache_write_5m', 'cache_write_1h', 'cache_write_no_ttl', 'uncached']) {
    if (u && typeof u[p] === 'number') total += u[p];
  }
  return total;
}

const seconds = (s) => `${fmtInt(Math.round(s))} s`;

// Why a turn's cache reads fell off, in one sentence (the turn gives context the diagnosis
// leaves out: its model, its input size).
// A provider's account of its own cache miss (a turn's provider_cache_diagnosis, from Anthropic's
// cache diagnostics) and whether it agrees with kvgate's diagnosis.
export function providerReason(pd) {
  return pd && pd.cache_miss_reason ? pd.cache_miss_reason.replace(/_/g, ' ') : 'no miss';
}

export function providerDiagnosisText(pd) {
  if (!pd) return '';
  const reason = providerReason(pd);
  const verdict = pd.agrees_with_kvgate === true ? 'agrees with kvgate'
    : pd.agrees_with_kvgate === false ? 'disagrees with kvgate' : 'not comparable with kvgate';
  return `${reason} — ${verdict}`;
}

export function causeText(d, turn = {}) {
  if (!d) return '';
  const idle = typeof d.idle_seconds === 'number' ? d.idle_seconds : null;
  switch (d.cause) {
    case 'expired':
      return `expired after ${seconds(idle)} idle` +
        (d.ttl_seconds ? ` (TTL ${seconds(d.ttl_seconds)})` : '');
    case 'partial_eviction': {
      let s = `partly evicted: read ${fmtInt(d.cached)} of ${fmtInt(d.expected_cached)} expected ` +
        'cached tokens';
      if (idle !== null) s += ` after ${seconds(idle)} idle`;
      if (d.ttl_seconds && idle !== null && idle < d.ttl_seconds) s += `, before the ${seconds(d.ttl_seconds)} TTL`;
      return s;
    }
    case 'prompt_changed': {
      let near = typeof d.char_offset === 'number' ? `, near character ${fmtInt(d.char_offset)}` : '';
      if (d.volatile) near += ` (the same place on ${fmtInt(d.turns_changed)} turns in a row: ${fmtUsd(d.lost_usd)} lost)`;
      // What changed, by its role and 1-based number, then the text around the change.
      const ex = d.excerpt && typeof d.excerpt.after === 'string'
        ? `: “…${d.excerpt.before}…” → “…${d.excerpt.after}…”` : '';
      const system = d.role === 'system' || d.role === 'developer';
      if (d.element === 'message' && d.message_number) {
        return (system ? `the system prompt (message ${d.message_number}) changed`
          : `message ${d.message_number} (${d.role || 'message'}) changed`) + near + ex;
      }
      if (d.element === 'message') return `prompt changed at message ${d.message_index + 1}${near}${ex}`;
      if (d.element === 'system') return `the system prompt changed${near}${ex}`;
      if (d.element === 'tools') return `the tool definitions changed${near}${ex}`;
      return d.detail ? d.detail.replace(/^the prompt changed: /, 'prompt changed: ') : 'prompt changed';
    }
    case 'model_switch':
      return `switched from ${d.previous_model || '?'} (${d.previous_provider || '?'}) to ` +
        `${turn.model || 'another model'}: prompt caches are per model`;
    case 'below_minimum':
      return `prompt of ${fmtInt(inputTokens(turn.usage))} tokens is below the provider's minimum ` +
        `of ${fmtInt(d.min_tokens)} cacheable tokens`;
    case 'routed_away': {
      const to = d.target || d.to || (turn.route && turn.route.target) || turn.provider || '?';
      return `the router moved this thread to ${to}`;
    }
    case 'engine_restarted':
      return 'the built-in engine restarted and lost its cache';
    default:
      return d.detail || d.cause || 'cache reads fell off';
  }
}

export function statusClass(status) {
  return status === 'ok' ? 'ok' : status === 'client_disconnected' ? 'warn' : 'bad';
}

// A Chart.js instance on `canvas`, replacing one already there; animation off (instant
// updates, and the render time is the drawing's, not a transition's).
export function chart(canvas, config) {
  const existing = window.Chart && window.Chart.getChart(canvas);
  if (existing) existing.destroy();
  // normalized: the data are in label order with one value per label, which spares Chart.js a
  // scan of every dataset; ticks are measured on a sample (sampleSize) where the pages set it.
  config.options = Object.assign({ animation: false, responsive: true, normalized: true,
    maintainAspectRatio: false }, config.options || {});
  return new window.Chart(canvas, config);
}

// Where a thread's id came from (a turn's thread_source), in words.
export function threadSourceText(source) {
  switch (source) {
    case 'body': return 'named in the request body';
    case 'header': return 'named by a header (X-Thread-Id or an agent\'s session)';
    case 'response_chain': return 'a Responses API chain (previous_response_id)';
    case 'auto': return 'inferred: each turn continues the previous one';
    default: return 'thread source unknown';
  }
}

// The label of comparison prices ({model: catalog model}, pricing: {as: ...}): those models' costs
// are what the named API model would charge for the same tokens. Null when there are none.
export function comparisonNote(prices) {
  const entries = Object.entries(prices || {});
  if (!entries.length) return null;
  const list = entries.map(([m, as]) => `${m} as ${as}`).join(', ');
  return h('p', { class: 'note comparison-prices' },
    `Comparison prices: ${list}. These costs are what that API model would charge for the same ` +
    'tokens; a self-hosted model charges nothing per token.');
}

// The model a request asked for, and beside it the model that served it when a router chose
// another (a record's `target`).
export function servedModel(r) {
  if (!r.model) return '—';
  if (!r.target || r.target === r.model) return r.model;
  return h('span', { class: 'served', title: `asked for ${r.model}, served by ${r.target}` },
    r.model, h('span', { class: 'muted' }, ' → '), h('span', { class: 'served-target' }, r.target));
}
