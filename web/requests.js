// The request log, newest first, with filters (status, model, provider, thread, time range, the
// provider's own cache diagnosis against kvgate's) and each request's full record. More rows come
// through the server's cursor.
import { api, query } from './api.js';
import { clear, fmtInt, fmtMs, fmtTime, fmtUsd, h, providerDiagnosisText, providerReason, servedModel, statusClass } from './format.js';
import { recordDetail } from './thread.js';

const STATUSES = ['', 'ok', 'error', 'upstream_error', 'timeout', 'client_disconnected', 'shutdown'];
const DIAGNOSES = ['', 'reported', 'agrees', 'disagrees'];
const DIAGNOSIS_LABELS = { '': 'any provider diagnosis', reported: 'provider diagnosed',
  agrees: 'provider agrees with kvgate', disagrees: 'provider disagrees with kvgate' };
const PAGE = 100;

export async function mount(view, route) {
  const p = route.params;
  const state = { status: STATUSES.includes(p.status) ? p.status : '', model: p.model || '',
    provider: p.provider || '', thread_id: p.thread_id || '', since: p.since || '', until: p.until || '',
    provider_diagnosis: DIAGNOSES.includes(p.provider_diagnosis) ? p.provider_diagnosis : '',
    rows: [], next: null };
  const root = h('section', { class: 'requests-page' });
  view.append(root);
  root.append(h('div', { class: 'page-head' }, h('h1', {}, 'Requests')), controls(state));
  state.body = h('div', { id: 'requests-body' });
  state.detail = h('div', { id: 'request-detail' });
  root.append(state.detail, state.body);
  await load(state, false);
  if (p.id) showDetail(state, p.id);
  // Live: new requests arrive on top while the reader has not paged further.
  return { refresh: () => (state.rows.length <= PAGE ? load(state, false) : null) };
}

// datetime-local (the browser's local time) -> RFC 3339 for the API.
const toIso = (v) => (v ? new Date(v).toISOString() : '');
const toLocalInput = (iso) => {
  if (!iso) return '';
  const d = new Date(iso);
  const pad = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
};

function controls(state) {
  const f = {
    status: h('select', { id: 'req-status', 'aria-label': 'Status' }, STATUSES.map((s) => h('option', { value: s, selected: s === state.status }, s || 'any status'))),
    model: h('input', { id: 'req-model', placeholder: 'Model', value: state.model, 'aria-label': 'Model' }),
    provider: h('input', { id: 'req-provider', placeholder: 'Provider', value: state.provider, 'aria-label': 'Provider' }),
    thread_id: h('input', { id: 'req-thread', placeholder: 'Thread id', value: state.thread_id, 'aria-label': 'Thread id' }),
    since: h('input', { id: 'req-since', type: 'datetime-local', value: toLocalInput(state.since), 'aria-label': 'From' }),
    until: h('input', { id: 'req-until', type: 'datetime-local', value: toLocalInput(state.until), 'aria-label': 'To' }),
    provider_diagnosis: h('select', { id: 'req-provider-diagnosis', 'aria-label': "Provider's cache diagnosis" },
      DIAGNOSES.map((d) => h('option', { value: d, selected: d === state.provider_diagnosis }, DIAGNOSIS_LABELS[d]))),
  };
  const lookup = h('input', { id: 'req-lookup', placeholder: 'req_…, chatcmpl-…, msg_…', 'aria-label': 'Find a request by id' });
  return h('div', {},
    h('form', { class: 'filters', id: 'request-filters', onsubmit: (ev) => {
      ev.preventDefault();
      state.status = f.status.value; state.model = f.model.value.trim(); state.provider = f.provider.value.trim();
      state.thread_id = f.thread_id.value.trim(); state.since = toIso(f.since.value); state.until = toIso(f.until.value);
      state.provider_diagnosis = f.provider_diagnosis.value;
      history.replaceState(null, '', `#/requests${query(filters(state))}`);
      load(state, false).catch((e) => clear(state.body).append(h('p', { class: 'error' }, e.message)));
    } }, f.status, f.model, f.provider, f.thread_id, f.provider_diagnosis,
    h('label', { class: 'inline' }, 'from ', f.since), h('label', { class: 'inline' }, 'to ', f.until),
    h('button', { type: 'submit', class: 'primary' }, 'Apply')),
    h('form', { class: 'filters', id: 'request-lookup', onsubmit: (ev) => { ev.preventDefault(); if (lookup.value.trim()) showDetail(state, lookup.value.trim()); } },
      lookup, h('button', { type: 'submit' }, 'Open')));
}

const filters = (state) => ({ status: state.status, model: state.model, provider: state.provider,
  thread_id: state.thread_id, since: state.since, until: state.until, provider_diagnosis: state.provider_diagnosis });

async function load(state, more) {
  const data = await api(`/api/requests${query({ ...filters(state), limit: PAGE, cursor: more ? state.next : '' })}`);
  state.rows = more ? state.rows.concat(data.requests) : data.requests;
  state.next = data.next_cursor;
  render(state);
}

function render(state) {
  const body = clear(state.body);
  if (!state.rows.length) {
    body.append(h('p', { class: 'muted', id: 'no-requests' }, 'No requests match.'));
    // A filter on the provider's diagnosis scans a bounded part of the log per page.
    if (state.next) body.append(olderButton(state));
    return;
  }
  body.append(h('div', { class: 'scroll' }, h('table', { id: 'requests' },
    h('thead', {}, h('tr', {}, ['Time', 'Status', 'Model', 'Provider', 'Thread', 'Latency', 'Input', 'Cache read', 'Output', 'Cost'].map((c, i) => h('th', { class: i >= 5 ? 'num' : null }, c)))),
    h('tbody', {}, state.rows.map((r) => h('tr', { class: 'request-row', tabindex: '0', dataset: { requestId: r.request_id, status: r.status },
      onclick: () => showDetail(state, r.request_id), onkeydown: (ev) => { if (ev.key === 'Enter') showDetail(state, r.request_id); } },
      h('td', { class: 'nowrap' }, fmtTime(r.created_at)),
      h('td', {}, h('span', { class: `status ${statusClass(r.status)}` }, r.status), r.http_status ? h('span', { class: 'muted small' }, ` ${r.http_status}`) : null,
        providerBadge(r.provider_cache_diagnosis)),
      h('td', {}, servedModel(r)), h('td', {}, r.provider || '—'),
      h('td', { class: 'id' }, r.thread_id ? h('a', { href: `#/threads/${encodeURIComponent(r.thread_id)}`, onclick: (ev) => ev.stopPropagation() }, r.thread_id) : '—'),
      h('td', { class: 'num' }, fmtMs(r.latency_ms)),
      h('td', { class: 'num' }, fmtInt(sumInput(r.usage))),
      h('td', { class: 'num' }, fmtInt(r.usage.cache_read)),
      h('td', { class: 'num' }, fmtInt(r.usage.output)),
      h('td', { class: 'num' }, fmtUsd(r.cost_usd.total))))))));
  if (state.next) body.append(olderButton(state));
}

const olderButton = (state) => h('div', { class: 'pager' },
  h('button', { type: 'button', id: 'more-requests', onclick: () => load(state, true) }, 'Older requests'));

// What the provider said of its own cache miss, marked when it disagrees with kvgate.
function providerBadge(pd) {
  if (!pd) return null;
  const off = pd.agrees_with_kvgate === false;
  return h('div', {}, h('span', { class: `badge${off ? ' warn' : ''} provider-diagnosis`, title: providerDiagnosisText(pd),
    dataset: { agrees: String(pd.agrees_with_kvgate) } }, `provider: ${providerReason(pd)}${off ? ' ≠ kvgate' : ''}`));
}

function sumInput(u) {
  const parts = ['cache_read', 'cache_write_5m', 'cache_write_1h', 'cache_write_no_ttl', 'uncached'];
  if (parts.some((p) => u[p] === null)) return null;
  return parts.reduce((a, p) => a + (u[p] || 0), 0);
}

async function showDetail(state, id) {
  const box = clear(state.detail);
  box.append(h('div', { class: 'card' }, h('p', { class: 'muted' }, `Loading ${id}…`)));
  try {
    const rec = await api(`/api/requests/${encodeURIComponent(id)}`);
    clear(box).append(h('div', { class: 'card detail-card' },
      h('div', { class: 'row' }, h('h2', {}, `Request ${rec.request_id}`),
        h('button', { type: 'button', class: 'close', 'aria-label': 'Close', onclick: () => clear(box) }, '×')),
      recordDetail(rec)));
    box.scrollIntoView({ block: 'start' });
  } catch (e) {
    clear(box).append(h('div', { class: 'card' }, h('p', { class: 'error' }, e.status === 404 ? `No request ${id}.` : e.message)));
  }
}
