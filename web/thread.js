// One thread, turn by turn: tokens per turn by kind (stacked), cost per turn by component with
// the cumulative saving, every diagnosed turn with its cause in words, and each turn's full
// record (raw usage JSON, the router's decision and attempts when present) one click away.
import { api } from './api.js';
import { COST_PARTS, KINDS, causeText, chart, clear, fmtClock, fmtInt, fmtMs, fmtPct, fmtTime, fmtUsd, h,
  hitRate, providerDiagnosisText, providerReason, statusClass, threadSourceText, comparisonNote, servedModel } from './format.js';

export async function mount(view, route) {
  const id = route.id;
  const root = h('section', { class: 'thread-page' });
  view.append(root);
  const state = { id, expanded: new Set() };
  await load(root, state);
  return { refresh: () => load(root, state), liveThread: id };
}

async function load(root, state) {
  const data = await api(`/api/threads/${encodeURIComponent(state.id)}`);
  // The render time is measured from here, when the data has arrived, to the end of layout.
  const t0 = performance.now();
  render(root, state, data);
  void root.offsetHeight;  // force layout, so the figure includes it
  const ms = performance.now() - t0;
  root.dataset.renderMs = ms.toFixed(1);
  root.dataset.turns = String(data.turns.length);
}

function render(root, state, data) {
  for (const c of state.charts || []) c.destroy();
  state.charts = [];
  clear(root);
  const turns = data.turns;
  const s = data.summary;
  const last = turns[turns.length - 1];
  const diagnosed = turns.map((t, i) => ({ t, i })).filter(({ t }) => t.cache_diagnosis);

  root.append(
    h('div', { class: 'page-head' },
      h('a', { href: '#/threads', class: 'back' }, '← Threads'),
      h('h1', { class: 'thread-id', title: state.id }, state.id),
      h('p', { class: 'muted' }, `${fmtInt(s.turns)} turns · ${s.models.join(', ')} · ` +
        `${fmtTime(s.first_seen)} → ${fmtTime(s.last_seen)}`),
      h('p', { class: 'muted thread-source', dataset: { source: s.thread_source || '' } },
        threadSourceText(s.thread_source),
        s.thread_parent ? h('span', {}, ' · forked from ',
          h('a', { href: `#/threads/${encodeURIComponent(s.thread_parent)}` }, s.thread_parent)) : null)),
    h('div', { class: 'kpis' },
      kpi('Session hit rate', fmtPct(hitRate(s.tokens)), 'cache read ÷ (read + writes + uncached)', 'kpi-session-hit'),
      kpi('Latest turn hit rate', fmtPct(hitRate(last.usage)), `turn ${turns.length}`, 'kpi-latest-hit'),
      kpi('Cost', fmtUsd(s.cost_usd.total), s.cost_complete ? 'all turns priced' : 'lower bound: some usage unknown', 'kpi-cost'),
      kpi('Saved by the cache', fmtUsd(s.cost_usd.saved), 'against the same tokens uncached', 'kpi-saved'),
      kpi('Lost to misses', fmtUsd(s.cost_usd.missed), `${diagnosed.length} diagnosed turn${diagnosed.length === 1 ? '' : 's'}`, 'kpi-missed'),
      keepWarmKpi(data.keep_warm)),
  );

  const priced = Object.fromEntries(Object.entries(data.comparison_prices || {}).filter(([m]) => s.models.includes(m)));
  const note = comparisonNote(priced);
  if (note) root.append(note);

  const tokenCanvas = h('canvas', { id: 'tokens-chart', 'aria-label': 'Tokens per turn' });
  const costCanvas = h('canvas', { id: 'cost-chart', 'aria-label': 'Cost per turn' });
  root.append(
    h('div', { class: 'card' }, h('h2', {}, 'Tokens per turn'), h('div', { class: 'chart tall' }, tokenCanvas)),
    h('div', { class: 'card' }, h('h2', {}, 'Cost per turn and cumulative saving'), h('div', { class: 'chart' }, costCanvas)));

  if (diagnosed.length) {
    root.append(h('div', { class: 'card' }, h('h2', {}, 'Why the cache missed'),
      h('ul', { class: 'causes', id: 'causes' }, diagnosed.map(({ t, i }) =>
        h('li', { dataset: { turn: String(i + 1), cause: t.cache_diagnosis.cause } },
          h('a', { href: `#turn-${i + 1}`, class: 'turn-link', onclick: (ev) => { ev.preventDefault(); openTurn(root, state, i); } }, `Turn ${i + 1}`),
          h('span', { class: 'cause-text' }, causeText(t.cache_diagnosis, t)),
          t.cost_usd.missed > 0 ? h('span', { class: 'muted' }, ` · ${fmtUsd(t.cost_usd.missed)} lost`) : null)))));
  }

  const tCharts = performance.now();
  const wide = window.innerWidth > 640;  // axis titles only where there is room for them
  const labels = turns.map((t, i) => `${i + 1}`);
  const tickColor = (ctx) => (turns[ctx.index] && turns[ctx.index].cache_diagnosis ? '#c0392b' : '#667');
  const tokenChart = chart(tokenCanvas, {
    type: 'bar',
    data: { labels, datasets: KINDS.map((k) => ({ label: k.label, kvgateKind: k.key, backgroundColor: k.color,
      data: turns.map((t) => t.usage[k.key] ?? 0), stack: 'tokens' })) },
    options: {
      scales: { x: { stacked: true, ticks: { color: tickColor, autoSkip: true, maxRotation: 0, sampleSize: 8 },
        title: { display: true, text: 'turn (red: diagnosed cache miss)' } },
      y: { stacked: true, title: { display: wide, text: 'tokens' } } },
      plugins: { tooltip: { callbacks: { footer: (items) => footer(turns[items[0].dataIndex]) } } },
      onClick: (_, els) => { if (els.length) openTurn(root, state, els[0].index); },
    },
  });
  let saved = 0;
  const cumulative = turns.map((t) => (saved += t.cost_usd.saved));
  const costChart = chart(costCanvas, {
    type: 'bar',
    data: { labels, datasets: [
      ...COST_PARTS.map((p) => ({ label: p.label, backgroundColor: p.color, data: turns.map((t) => t.cost_usd[p.key]), stack: 'cost', yAxisID: 'y', order: 1 })),
      // order 0: drawn over the bars
      { type: 'line', label: 'Cumulative saving', data: cumulative, borderColor: '#1b7f4f', backgroundColor: '#1b7f4f', yAxisID: 'y2', pointRadius: 0, borderWidth: 2, order: 0 },
    ] },
    options: { scales: {
      x: { stacked: true, ticks: { color: tickColor, autoSkip: true, maxRotation: 0, sampleSize: 8 } },
      y: { stacked: true, title: { display: wide, text: 'USD per turn' }, ticks: { callback: (v) => fmtUsd(v) } },
      y2: { position: 'right', grid: { drawOnChartArea: false }, title: { display: wide, text: 'USD saved' }, ticks: { callback: (v) => fmtUsd(v) } } },
      onClick: (_, els) => { if (els.length) openTurn(root, state, els[0].index); } },
  });
  state.charts.push(tokenChart, costChart);
  root.dataset.chartsMs = (performance.now() - tCharts).toFixed(1);

  const table = h('table', { class: 'turns', id: 'turns' },
    h('thead', {}, h('tr', {}, ['#', 'Time', 'Model', 'Status', 'Latency', 'TTFT',
      ...KINDS.map((k) => k.label), 'Cost', 'Hit rate', 'Cause'].map((c, i) => h('th', { class: i >= 4 && i < 14 ? 'num' : null }, c)))),
    h('tbody', {}, turns.map((t, i) => turnRow(root, state, t, i))));
  root.append(h('div', { class: 'card turns-card' }, h('h2', {}, 'Turns'), h('div', { class: 'scroll' }, table)));
  for (const i of state.expanded) expandTurn(root, state, i, turns[i]);
}

// What keep-warm pings saved this thread's turns minus what they cost (negative when they did not
// pay); absent for a thread that was never pinged.
function keepWarmKpi(kw) {
  if (!kw || !kw.pings) return null;
  return kpi('Keep-warm net', fmtUsd(kw.net_usd),
    `${fmtInt(kw.pings)} ping${kw.pings === 1 ? '' : 's'}: saved ${fmtUsd(kw.saved_usd)}, cost ${fmtUsd(kw.cost_usd)}`,
    'kpi-keep-warm');
}

function kpi(label, value, note, id) {
  return h('div', { class: 'kpi', id }, h('div', { class: 'kpi-label' }, label),
    h('div', { class: 'kpi-value' }, value), h('div', { class: 'kpi-note' }, note));
}

function footer(t) {
  if (!t) return '';
  const lines = [`cost ${fmtUsd(t.cost_usd.total)} · latency ${fmtMs(t.latency_ms)}`];
  if (t.cache_diagnosis) lines.push(causeText(t.cache_diagnosis, t));
  return lines.join('\n');
}

function turnRow(root, state, t, i) {
  const routeBadge = t.route ? h('span', { class: 'badge', title: t.route.reason || '' }, `routed → ${t.route.target}`) : null;
  const attempts = Array.isArray(t.attempts) && t.attempts.length > 1 ? h('span', { class: 'badge warn' }, `${t.attempts.length} attempts`) : null;
  return h('tr', { class: `turn-row${t.cache_diagnosis ? ' diagnosed' : ''}`, id: `turn-${i + 1}`,
    dataset: { index: String(i), requestId: t.request_id }, tabindex: '0',
    onclick: () => toggleTurn(root, state, i, t),
    onkeydown: (ev) => { if (ev.key === 'Enter') toggleTurn(root, state, i, t); } },
  h('td', {}, String(i + 1)),
  h('td', { class: 'nowrap', title: fmtTime(t.created_at) }, fmtClock(t.created_at)),
  h('td', { class: 'model-cell' }, servedModel(t), h('div', { class: 'muted small' }, t.provider), routeBadge, attempts,
    t.purpose === 'keep_warm' ? h('span', { class: 'badge', title: 'a ping kvgate sent to renew the cache; not a turn' }, 'keep-warm ping') : null),
  h('td', {}, h('span', { class: `status ${statusClass(t.status)}` }, t.status)),
  h('td', { class: 'num' }, fmtMs(t.latency_ms)),
  h('td', { class: 'num' }, fmtMs(t.ttft_ms)),
  ...KINDS.map((k) => h('td', { class: 'num', dataset: { kind: k.key } }, fmtInt(t.usage[k.key]))),
  h('td', { class: 'num' }, fmtUsd(t.cost_usd.total)),
  h('td', { class: 'num' }, fmtPct(hitRate(t.usage))),
  h('td', { class: 'cause' }, t.cache_diagnosis ? causeText(t.cache_diagnosis, t) : '', disagreement(t)));
}

// The provider's own diagnosis, where it differs from kvgate's.
function disagreement(t) {
  const pd = t.provider_cache_diagnosis;
  if (!pd || pd.agrees_with_kvgate !== false) return null;
  return h('span', { class: 'badge warn provider-disagrees', title: providerDiagnosisText(pd) },
    `provider: ${providerReason(pd)}`);
}

function openTurn(root, state, i) {
  const row = root.querySelector(`#turn-${i + 1}`);
  if (!row) return;
  if (!state.expanded.has(i)) toggleTurn(root, state, i, null);
  row.scrollIntoView({ block: 'center' });
}

function toggleTurn(root, state, i, t) {
  const row = root.querySelector(`#turn-${i + 1}`);
  const next = row.nextElementSibling;
  if (next && next.classList.contains('turn-detail')) {
    next.remove();
    state.expanded.delete(i);
    return;
  }
  state.expanded.add(i);
  expandTurn(root, state, i, t);
}

async function expandTurn(root, state, i) {
  const row = root.querySelector(`#turn-${i + 1}`);
  if (!row) return;
  const cell = h('td', { colspan: String(row.children.length) }, h('p', { class: 'muted' }, 'Loading the full record…'));
  const detailRow = h('tr', { class: 'turn-detail' }, cell);
  row.after(detailRow);
  try {
    const rec = await api(`/api/requests/${encodeURIComponent(row.dataset.requestId)}`);
    clear(cell).append(recordDetail(rec));
  } catch (e) {
    clear(cell).append(h('p', { class: 'error' }, e.message));
  }
}

// The full record of one request: the fields a person looks for first, the router's decision and
// attempts when the router recorded any, then the raw usage JSON and the whole record.
export function recordDetail(rec) {
  const c = rec.cost_usd;
  const facts = [
    ['Request id', rec.request_id], ['Response id', rec.response_id || '—'],
    ['Upstream request id', rec.upstream_request_id || '—'], ['Thread', rec.thread_id ? `${rec.thread_id} (${threadSourceText(rec.thread_source)})` : '—'],
    ['Model', `${rec.model} → ${rec.upstream_model || rec.model} (${rec.provider || 'no provider'}, ${rec.provider_type || '—'})`],
    ['Status', `${rec.status} (HTTP ${rec.http_status}, upstream ${rec.upstream_status || '—'})`],
    ['Finish reason', rec.finish_reason || '—'], ['Stream', rec.stream ? 'yes' : 'no'],
    ['Latency / TTFT', `${fmtMs(rec.latency_ms)} / ${fmtMs(rec.ttft_ms)}`],
    ['Cost', `${fmtUsd(c.total)} = read ${fmtUsd(c.cache_read)} + write ${fmtUsd(c.cache_write)} + uncached ${fmtUsd(c.uncached)} + output ${fmtUsd(c.output)}${rec.cost_complete ? '' : ' (lower bound)'}`],
    ['Saved / lost', `${fmtUsd(c.saved)} saved, ${fmtUsd(c.missed)} lost to misses`],
  ];
  const tiers = rec.cache_read_by_tier;
  if (tiers) {
    const from = 'host' in tiers ? `${fmtInt(tiers.host)} from host memory` : `${fmtInt(tiers.disk)} from disk`;
    facts.push(['Cache read', `${fmtInt(tiers.pool)} from the pool, ${from}`]);
  }
  if (rec.error) facts.push(['Error', rec.error]);
  if (rec.cache_diagnosis) facts.push(['Cache diagnosis', `${causeText(rec.cache_diagnosis, rec)} — ${rec.cache_diagnosis.detail || ''}`]);
  if (rec.provider_cache_diagnosis) facts.push(["Provider's diagnosis", providerDiagnosisText(rec.provider_cache_diagnosis)]);
  const parts = [h('dl', { class: 'facts' }, facts.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]))];
  if (rec.route) parts.push(routeView(rec.route));
  if (Array.isArray(rec.attempts) && rec.attempts.length) parts.push(attemptsView(rec.attempts));
  parts.push(h('h3', {}, 'Raw usage (as the provider sent it)'),
    h('pre', { class: 'json raw-usage' }, rec.usage_raw === null || rec.usage_raw === undefined ? 'none' : JSON.stringify(rec.usage_raw, null, 2)));
  parts.push(h('details', {}, h('summary', {}, 'Whole record'), h('pre', { class: 'json' }, JSON.stringify(rec, null, 2))));
  return h('div', { class: 'record' }, parts);
}

function routeView(r) {
  return h('div', { class: 'route' },
    h('h3', {}, `Router ${r.router || ''} (${r.strategy || '—'}): chose ${r.target}`),
    r.reason ? h('p', {}, r.reason) : null,
    Array.isArray(r.candidates) && r.candidates.length ? h('div', { class: 'scroll' }, h('table', { class: 'candidates' },
      h('thead', {}, h('tr', {}, ['Target', 'Provider', 'Model', 'Eligible', 'Why not', 'Est. cached', 'Est. cost'].map((x) => h('th', {}, x)))),
      h('tbody', {}, r.candidates.map((c) => h('tr', { class: c.target === r.target ? 'chosen' : '' },
        h('td', {}, c.target), h('td', {}, c.provider), h('td', {}, c.model),
        h('td', {}, c.eligible ? 'yes' : 'no'), h('td', {}, c.why_not || ''),
        h('td', { class: 'num' }, fmtInt(c.est_cached_tokens)), h('td', { class: 'num' }, fmtUsd(c.est_cost_usd))))))) : null);
}

function attemptsView(attempts) {
  return h('div', { class: 'attempts' }, h('h3', {}, 'Attempts'),
    h('ol', {}, attempts.map((a) => h('li', {},
      h('span', { class: `status ${statusClass(a.status)}` }, a.status),
      ` ${a.target} via ${a.provider}: HTTP ${a.http_status}, ${fmtMs(a.latency_ms)}`,
      a.error ? h('span', { class: 'error' }, ` — ${a.error}`) : null))));
}
