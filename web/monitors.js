// Monitors (list, create, edit, delete), the notification channels (with a test send each) and
// the alert history, over /api/monitors, /api/channels and /api/alerts.
import { api } from './api.js';
import { clear, fmtTime, h } from './format.js';

const METRICS = ['cost', 'latency_p95', 'ttft_p95', 'error_rate', 'cache_hit_rate', 'cache_drop', 'budget'];
const SCOPES = ['global', 'model', 'provider', 'thread', 'api_key'];

export async function mount(view) {
  const root = h('section', { class: 'monitors-page' });
  view.append(root);
  const state = { root, editing: null };
  await load(state);
  return { refresh: () => (state.editing ? null : load(state)) };
}

async function load(state) {
  let monitors, channels, alerts;
  try {
    [monitors, channels, alerts] = await Promise.all([api('/api/monitors'), api('/api/channels'), api('/api/alerts?limit=100')]);
  } catch (e) {
    if (e.status !== 404) throw e;
    clear(state.root).append(h('h1', {}, 'Monitors and alerts'),
      h('div', { class: 'card' }, h('p', {}, e.message), h('p', { class: 'muted' },
        'Add an alerts: section to the config (docs/configuration.md) to define channels and monitors.')));
    return;
  }
  state.channels = channels.channels;
  render(state, monitors.monitors, channels.channels, alerts.alerts);
}

function render(state, monitors, channels, alerts) {
  const root = clear(state.root);
  root.append(h('div', { class: 'page-head row' }, h('h1', {}, 'Monitors and alerts'),
    h('button', { type: 'button', class: 'primary', id: 'new-monitor', onclick: () => edit(state, null) }, 'New monitor')));
  state.formBox = h('div', { id: 'monitor-form-box' });
  root.append(state.formBox);
  root.append(h('div', { class: 'card' }, h('h2', {}, 'Monitors'),
    monitors.length ? h('div', { class: 'scroll' }, h('table', { id: 'monitors' },
      h('thead', {}, h('tr', {}, ['Name', 'Measures', 'Condition', 'Window', 'Channels', 'Enabled', ''].map((c) => h('th', {}, c)))),
      h('tbody', {}, monitors.map((m) => h('tr', { dataset: { monitorId: m.id } },
        h('td', {}, m.name), h('td', {}, `${m.metric} per ${m.scope}`),
        h('td', {}, `${m.condition} ${m.threshold}`), h('td', {}, windowText(m)),
        h('td', {}, (m.channels || []).join(', ') || '—'), h('td', {}, m.enabled ? 'yes' : 'no'),
        h('td', { class: 'actions' },
          h('button', { type: 'button', class: 'edit', onclick: () => edit(state, m) }, 'Edit'),
          h('button', { type: 'button', class: 'danger', onclick: () => remove(state, m) }, 'Delete'))))))) :
      h('p', { class: 'muted' }, 'No monitors yet.')));
  root.append(h('div', { class: 'card' }, h('h2', {}, 'Channels'),
    channels.length ? h('ul', { class: 'channels', id: 'channels' }, channels.map((c) => {
      const result = h('span', { class: 'muted' });
      return h('li', { dataset: { channel: c.name } }, h('strong', {}, c.name), ` ${c.type} `,
        h('span', { class: 'muted small' }, c.url || (c.to || []).join(', ') || ''),
        h('button', { type: 'button', class: 'test-channel', onclick: async () => {
          result.textContent = ' sending…';
          try { await api(`/api/channels/${encodeURIComponent(c.name)}/test`, { method: 'POST' }); result.textContent = ' test sent'; load(state); } catch (e) { result.textContent = ` failed: ${e.message}`; }
        } }, 'Send test'), result);
    })) : h('p', { class: 'muted' }, 'No channels configured (alerts.channels in the config).')));
  root.append(h('div', { class: 'card' }, h('h2', {}, 'Incident history'),
    alerts.length ? h('div', { class: 'scroll' }, h('table', { id: 'alerts' },
      h('thead', {}, h('tr', {}, ['When', 'Kind', 'Monitor', 'Scope', 'Value', 'Summary'].map((c) => h('th', {}, c)))),
      h('tbody', {}, alerts.map((a) => h('tr', { class: `alert-${a.kind}` },
        h('td', { class: 'nowrap' }, fmtTime(a.at || (a.at_us ? new Date(a.at_us / 1000).toISOString() : null))),
        h('td', {}, h('span', { class: `status ${a.kind === 'resolved' ? 'ok' : a.kind === 'test' ? 'warn' : 'bad'}` }, a.kind)),
        h('td', {}, a.rule_name || '—'), h('td', {}, a.scope_key ? `${a.scope} ${a.scope_key}` : a.scope || '—'),
        h('td', { class: 'num' }, a.kind === 'test' ? '—' : `${round(a.value)} (${a.condition} ${a.threshold})`),
        h('td', {}, a.summary || '')))))) : h('p', { class: 'muted' }, 'No alerts yet.')));
}

const round = (v) => (typeof v === 'number' ? Math.round(v * 10000) / 10000 : v);
function windowText(m) {
  const w = m.window_seconds ?? m.window;
  return typeof w === 'number' ? `${w} s` : String(w ?? '—');
}

function edit(state, m) {
  state.editing = m || {};
  const v = m || { name: '', metric: 'cache_hit_rate', scope: 'global', condition: 'below', threshold: 0.5,
    window: '5m', min_requests: null, cooldown: '15m', for: '0s', resolve_threshold: null, channels: [], enabled: true };
  const f = {
    name: h('input', { name: 'name', required: true, value: v.name }),
    metric: h('select', { name: 'metric' }, METRICS.map((x) => h('option', { value: x, selected: x === v.metric }, x))),
    scope: h('select', { name: 'scope' }, SCOPES.map((x) => h('option', { value: x, selected: x === v.scope }, x))),
    condition: h('select', { name: 'condition' }, ['above', 'below'].map((x) => h('option', { value: x, selected: x === v.condition }, x))),
    threshold: h('input', { name: 'threshold', type: 'number', step: 'any', required: true, value: v.threshold }),
    window: h('input', { name: 'window', value: v.window_seconds !== undefined ? `${v.window_seconds}s` : v.window }),
    min_requests: h('input', { name: 'min_requests', type: 'number', min: '1', value: v.min_requests ?? '',
      placeholder: 'default: 20 for rates, else 1' }),
    cooldown: h('input', { name: 'cooldown', value: v.cooldown_seconds !== undefined ? `${v.cooldown_seconds}s` : v.cooldown }),
    pending: h('input', { name: 'for', value: v.for ?? '0s' }),
    resolve: h('input', { name: 'resolve_threshold', type: 'number', step: 'any', value: v.resolve_threshold ?? '' }),
    enabled: h('input', { name: 'enabled', type: 'checkbox', checked: v.enabled !== false }),
  };
  const channelBoxes = (state.channels || []).map((c) => h('label', { class: 'inline' },
    h('input', { type: 'checkbox', name: 'channel', value: c.name, checked: (v.channels || []).includes(c.name) }), ` ${c.name}`));
  const error = h('p', { class: 'error', hidden: true });
  const field = (label, el) => h('label', {}, label, el);
  const form = h('form', { id: 'monitor-form', class: 'card form', onsubmit: async (ev) => {
    ev.preventDefault();
    const body = { name: f.name.value.trim(), metric: f.metric.value, scope: f.scope.value, condition: f.condition.value,
      threshold: Number(f.threshold.value), window: f.window.value.trim() || '5m',
      ...(f.min_requests.value ? { min_requests: Number(f.min_requests.value) } : {}),
      cooldown: f.cooldown.value.trim() || '15m',
      for: f.pending.value.trim() || '0s',
      resolve_threshold: f.resolve.value.trim() === '' ? null : Number(f.resolve.value),
      channels: channelBoxes.map((l) => l.firstChild).filter((c) => c.checked).map((c) => c.value), enabled: f.enabled.checked };
    try {
      if (m && m.id) await api(`/api/monitors/${encodeURIComponent(m.id)}`, { method: 'PUT', body });
      else await api('/api/monitors', { method: 'POST', body });
      state.editing = null;
      await load(state);
    } catch (e) {
      error.hidden = false;
      error.textContent = e.message;
    }
  } },
  h('h2', {}, m ? `Edit ${m.name}` : 'New monitor'),
  h('div', { class: 'form-grid' }, field('Name', f.name), field('Measures', f.metric), field('Per', f.scope),
    field('Fires when', f.condition), field('Threshold', f.threshold), field('Window', f.window),
    field('At least requests', f.min_requests), field('Cooldown', f.cooldown),
    field('Holds for', f.pending), field('Resolves at (empty: the threshold)', f.resolve),
    field('Enabled', f.enabled)),
  channelBoxes.length ? h('div', { class: 'channel-boxes' }, 'Notify: ', channelBoxes) : null,
  error,
  h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Save'),
    h('button', { type: 'button', onclick: () => { state.editing = null; clear(state.formBox); } }, 'Cancel')));
  clear(state.formBox).append(form);
  f.name.focus();
}

async function remove(state, m) {
  if (!window.confirm(`Delete monitor ${m.name}?`)) return;
  await api(`/api/monitors/${encodeURIComponent(m.id)}`, { method: 'DELETE' });
  await load(state);
}
