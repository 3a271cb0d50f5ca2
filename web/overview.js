// The overview: requests, cost, what the cache saved and what its misses cost, and the hit rate
// over the last hour, day or week, by model and provider; and the threads that lost the most
// money to cache misses in that window, what those misses cost by cause and the threads whose
// prompt changes at the same place every turn; and, where a provider reports on its own cache misses
// (Anthropic's cache diagnostics), how often its account agrees with kvgate's.
import { api, query } from './api.js';
import { causeText, comparisonNote, servedModel, chart, clear, fmtInt, fmtPct, fmtTime, fmtUsd, h, providerReason } from './format.js';

const WINDOWS = ['1h', '24h', '7d'];
const DIAGNOSED = 200;  // the latest provider-diagnosed turns the agreement card counts
const PALETTE = ['#4c7fd6', '#2f9e6e', '#e3a72f', '#c0392b', '#8e5bd0', '#17a2b8', '#d2691e', '#7f8c8d'];

export async function mount(view, route) {
  const state = { window: WINDOWS.includes(route.params.window) ? route.params.window : '24h', charts: [] };
  const root = h('section', { class: 'overview-page' });
  view.append(root);
  await load(root, state);
  return { refresh: () => load(root, state), unmount: () => state.charts.forEach((c) => c.destroy()) };
}

function sinceOf(windowName) {
  const ms = { '1h': 3600e3, '24h': 86400e3, '7d': 7 * 86400e3 }[windowName];
  return new Date(Date.now() - ms).toISOString();
}

async function load(root, state) {
  const since = sinceOf(state.window);
  const [ov, top, diagnosed] = await Promise.all([
    api(`/api/overview${query({ window: state.window })}`),
    api(`/api/threads${query({ sort: 'missed_cost', since, limit: 10 })}`),
    api(`/api/requests${query({ provider_diagnosis: 'reported', since, limit: DIAGNOSED })}`),
  ]);
  render(root, state, ov, top.threads.filter((t) => t.missed_pico_usd > 0));
  if (diagnosed.requests.length) root.append(agreementCard(state, diagnosed.requests));
}

// The provider's diagnoses against kvgate's: counts over the latest ones, and the latest
// disagreements side by side (a link to all of them on the Requests page).
function agreementCard(state, turns) {
  const count = (v) => turns.filter((t) => t.provider_cache_diagnosis.agrees_with_kvgate === v).length;
  const off = turns.filter((t) => t.provider_cache_diagnosis.agrees_with_kvgate === false).slice(0, 10);
  const latest = turns.length === DIAGNOSED ? `the latest ${DIAGNOSED}` : `${fmtInt(turns.length)}`;
  return h('div', { class: 'card', id: 'provider-agreement' },
    h('h2', {}, "Provider's cache diagnosis against kvgate's"),
    h('p', {}, `Of ${latest} turns a provider diagnosed in the last ${state.window}: `,
      h('strong', { id: 'agree-count' }, fmtInt(count(true))), ' agree, ',
      h('strong', { id: 'disagree-count' }, fmtInt(count(false))), ' disagree, ',
      fmtInt(count(null)), ' cannot be compared. ',
      h('a', { href: `#/requests?provider_diagnosis=disagrees&since=${encodeURIComponent(sinceOf(state.window))}` }, 'All disagreements')),
    off.length ? h('div', { class: 'scroll' }, h('table', { id: 'disagreements' },
      h('thead', {}, h('tr', {}, ['Time', 'Thread', 'Model', 'kvgate', 'Provider'].map((c) => h('th', {}, c)))),
      h('tbody', {}, off.map((t) => h('tr', { dataset: { requestId: t.request_id } },
        h('td', { class: 'nowrap' }, fmtTime(t.created_at)),
        h('td', { class: 'id' }, t.thread_id ? h('a', { href: `#/threads/${encodeURIComponent(t.thread_id)}` }, t.thread_id) : '—'),
        h('td', {}, servedModel(t)),
        h('td', {}, t.cache_diagnosis ? causeText(t.cache_diagnosis, t) : 'no miss'),
        h('td', {}, providerReason(t.provider_cache_diagnosis)))))))
      : null);
}

function render(root, state, ov, lossy) {
  state.charts.forEach((c) => c.destroy());
  state.charts = [];
  clear(root);
  root.dataset.since = ov.since;  // which buckets are shown (the window moves with the clock)
  const t = ov.totals;
  root.append(h('div', { class: 'page-head row' },
    h('h1', {}, 'Overview'),
    h('div', { class: 'segmented', role: 'group', 'aria-label': 'Time window' }, WINDOWS.map((w) =>
      h('a', { href: `#/?window=${w}`, class: w === state.window ? 'active' : '', dataset: { window: w } }, w)))));
  root.append(h('div', { class: 'kpis' },
    kpi('Requests', fmtInt(t.requests), `${fmtInt(t.errors)} failed`, 'kpi-requests'),
    kpi('Cost', fmtUsd(t.cost_usd), `in the last ${state.window}`, 'kpi-cost'),
    kpi('Saved by the cache', fmtUsd(t.saved_usd), 'against the same tokens uncached', 'kpi-saved'),
    kpi('Lost to misses', fmtUsd(t.missed_usd), 'diagnosed cache misses', 'kpi-missed'),
    kpi('Hit rate', fmtPct(t.hit_ratio), 'read ÷ (read + writes + uncached)', 'kpi-hit'),
    ov.keep_warm && ov.keep_warm.pings
      ? kpi('Keep-warm net', fmtUsd(ov.keep_warm.net_usd),
        `${fmtInt(ov.keep_warm.pings)} pings: saved ${fmtUsd(ov.keep_warm.saved_usd)}, cost ${fmtUsd(ov.keep_warm.cost_usd)}`,
        'kpi-keep-warm')
      : null));
  const note = comparisonNote(ov.comparison_prices);
  if (note) root.append(note);

  const labels = ov.series.map((p) => tickLabel(p.start, state.window));
  const volume = h('canvas', { id: 'volume-chart' });
  const hits = h('canvas', { id: 'hit-chart' });
  root.append(h('div', { class: 'grid2' },
    h('div', { class: 'card' }, h('h2', {}, 'Cost, saving and requests'), h('div', { class: 'chart' }, volume)),
    h('div', { class: 'card' }, h('h2', {}, 'Hit rate by model'), h('div', { class: 'chart' }, hits))));
  state.charts.push(chart(volume, {
    type: 'bar',
    data: { labels, datasets: [
      { label: 'Cost', data: ov.series.map((p) => p.cost_usd), backgroundColor: '#4c7fd6', yAxisID: 'y' },
      { label: 'Saved', data: ov.series.map((p) => p.saved_usd), backgroundColor: '#2f9e6e', yAxisID: 'y' },
      { label: 'Lost to misses', data: ov.series.map((p) => p.missed_usd), backgroundColor: '#c0392b', yAxisID: 'y' },
      { type: 'line', label: 'Requests', data: ov.series.map((p) => p.requests), borderColor: '#555', backgroundColor: '#555', yAxisID: 'y2', pointRadius: (c) => (c.raw ? 2 : 0), borderWidth: 1.5, order: 0 },
    ] },
    options: { scales: { x: { ticks: { autoSkip: true, maxRotation: 0 } },
      y: { ticks: { callback: (v) => fmtUsd(v) } },
      y2: { position: 'right', grid: { drawOnChartArea: false }, beginAtZero: true } } },
  }));
  state.charts.push(chart(hits, {
    type: 'line',
    data: { labels, datasets: [
      { label: 'All', data: ov.series.map((p) => p.hit_ratio), borderColor: '#222', backgroundColor: '#222', borderWidth: 2, pointRadius: 3, spanGaps: true },
      ...ov.by_model.slice(0, 6).map((m, i) => ({ label: `${m.model || '(no model)'} · ${m.provider || '—'}`,
        data: m.series.map((p) => p.hit_ratio), borderColor: PALETTE[i % PALETTE.length],
        backgroundColor: PALETTE[i % PALETTE.length], borderWidth: 1.5, pointRadius: 2, spanGaps: true })),
    ] },
    options: { scales: { x: { ticks: { autoSkip: true, maxRotation: 0 } },
      y: { min: 0, max: 1, ticks: { callback: (v) => fmtPct(v, 0) } } } },
  }));

  root.append(h('div', { class: 'card' }, h('h2', {}, 'By model and provider'),
    ov.by_model.length ? h('div', { class: 'scroll' }, h('table', { id: 'by-model' },
      h('thead', {}, h('tr', {}, ['Model', 'Provider', 'Requests', 'Failed', 'Cost', 'Saved', 'Lost to misses', 'Hit rate', 'Avg latency'].map((c) => h('th', {}, c)))),
      h('tbody', {}, ov.by_model.map((m) => h('tr', {},
        h('td', {}, m.model || '(rejected before routing)'), h('td', {}, m.provider || '—'),
        h('td', { class: 'num' }, fmtInt(m.requests)), h('td', { class: 'num' }, fmtInt(m.errors)),
        h('td', { class: 'num' }, fmtUsd(m.cost_usd)), h('td', { class: 'num' }, fmtUsd(m.saved_usd)),
        h('td', { class: 'num' }, fmtUsd(m.missed_usd)), h('td', { class: 'num' }, fmtPct(m.hit_ratio)),
        h('td', { class: 'num' }, m.latency_ms_avg === null ? '—' : `${Math.round(m.latency_ms_avg)} ms`)))))) :
      h('p', { class: 'muted' }, `No requests in the last ${state.window}.`)));

  root.append(h('div', { class: 'card' }, h('h2', {}, 'Threads that lost the most to cache misses'),
    lossy.length ? h('div', { class: 'scroll' }, h('table', { id: 'lossy' },
      h('thead', {}, h('tr', {}, ['Thread', 'Turns', 'Lost to misses', 'Cost', 'Hit rate', 'Models'].map((c) => h('th', {}, c)))),
      h('tbody', {}, lossy.map((th) => h('tr', {},
        h('td', {}, h('a', { href: `#/threads/${encodeURIComponent(th.thread_id)}` }, th.thread_id)),
        h('td', { class: 'num' }, fmtInt(th.turns)), h('td', { class: 'num' }, fmtUsd(th.missed_usd)),
        h('td', { class: 'num' }, fmtUsd(th.cost_usd)), h('td', { class: 'num' }, fmtPct(th.hit_ratio)),
        h('td', {}, th.models.join(', '))))))) :
      h('p', { class: 'muted' }, 'No thread lost money to a diagnosed cache miss in this window.')));

  const causes = ov.lost_by_cause || [];
  root.append(h('div', { class: 'card' }, h('h2', {}, 'Lost to misses by cause'),
    causes.length ? h('div', { class: 'scroll' }, h('table', { id: 'lost-by-cause' },
      h('thead', {}, h('tr', {}, ['Cause', 'Requests', 'Lost to misses'].map((c) => h('th', {}, c)))),
      h('tbody', {}, causes.map((c) => h('tr', { dataset: { cause: c.cause || '' } },
        h('td', {}, c.cause || '—'), h('td', { class: 'num' }, fmtInt(c.requests)),
        h('td', { class: 'num' }, fmtUsd(c.cost_missed_usd))))))) :
      h('p', { class: 'muted' }, `No diagnosed cache miss in the last ${state.window}.`)));

  // A timestamp, a request id or a counter early in a prompt re-writes the cache after it on
  // every turn: each thread where kvgate saw one, and what it cost.
  const volatile = ov.volatile_prefixes || [];
  root.append(h('div', { class: 'card' }, h('h2', {}, 'Prompts that change at the same place every turn'),
    volatile.length ? h('div', { class: 'scroll' }, h('table', { id: 'volatile-prefixes' },
      h('thead', {}, h('tr', {}, ['Thread', 'Model', 'Where', 'Character', 'Turns in a row', 'Lost to misses'].map((c) => h('th', {}, c)))),
      h('tbody', {}, volatile.map((v) => h('tr', {},
        h('td', { class: 'id' }, h('a', { href: `#/threads/${encodeURIComponent(v.thread_id)}` }, v.thread_id)),
        h('td', {}, v.model || '—'),
        h('td', {}, v.message_number ? `message ${v.message_number} (${v.role || '?'})` : (v.role || '—')),
        h('td', { class: 'num' }, v.char_offset === null || v.char_offset === undefined ? '—' : fmtInt(v.char_offset)),
        h('td', { class: 'num' }, fmtInt(v.turns_changed)),
        h('td', { class: 'num' }, fmtUsd(v.cost_missed_usd))))))) :
      h('p', { class: 'muted' }, 'No prompt changed at the same place on three turns in a row in this window.')));
}

function kpi(label, value, note, id) {
  return h('div', { class: 'kpi', id }, h('div', { class: 'kpi-label' }, label),
    h('div', { class: 'kpi-value' }, value), h('div', { class: 'kpi-note' }, note));
}

function tickLabel(iso, windowName) {
  const d = new Date(iso);
  if (windowName === '7d') return d.toLocaleDateString(undefined, { weekday: 'short', hour: '2-digit' });
  return d.toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit' });
}
