// Gateway keys (/api/keys): every key with its limits, its spend and what is left of its budget,
// requests in flight and refusals by limit; making a key (its secret is shown once, here),
// rotating and revoking one. Config keys are listed but changed in the config file only.
import { api } from './api.js';
import { clear, fmtInt, fmtTime, fmtUsd, h } from './format.js';

export async function mount(view) {
  const root = h('section', { class: 'keys-page' });
  view.append(root);
  const state = { root, secret: null };
  await load(state);
  return { refresh: () => load(state) };
}

async function load(state) {
  const listing = await api('/api/keys');
  render(state, listing.keys);
}

function limitsText(l) {
  const parts = [];
  if (l.rpm) parts.push(`${fmtInt(l.rpm)} rpm`);
  if (l.tpm) parts.push(`${fmtInt(l.tpm)} tpm`);
  if (l.max_parallel) parts.push(`${fmtInt(l.max_parallel)} in flight`);
  if (l.models && l.models.length) parts.push(`models: ${l.models.join(', ')}`);
  return parts.join(' · ') || '—';
}

function budgetText(k) {
  if (k.max_budget_usd === null || k.max_budget_usd === undefined) return '—';
  const every = k.budget_duration ? ` per ${k.budget_duration}` : ' lifetime';
  return `${fmtUsd(k.budget_remaining_usd)} left of ${fmtUsd(k.max_budget_usd)}${every}`;
}

function refusedText(r) {
  const parts = Object.entries(r || {}).filter(([, n]) => n > 0).map(([limit, n]) => `${limit} ${fmtInt(n)}`);
  return parts.join(', ') || '0';
}

function render(state, keys) {
  const root = clear(state.root);
  root.append(h('div', { class: 'page-head row' }, h('h1', {}, 'Gateway keys'),
    h('button', { type: 'button', class: 'primary', id: 'new-key', onclick: () => create(state) }, 'New key')));
  state.formBox = h('div', { id: 'key-form-box' });
  root.append(state.formBox);
  if (state.secret) {
    root.append(h('div', { class: 'card', id: 'key-secret' },
      h('p', {}, `The secret of ${state.secret.name}, shown this once: `, h('code', {}, state.secret.key)),
      h('button', { type: 'button', onclick: () => { state.secret = null; load(state); } }, 'Done')));
  }
  root.append(h('div', { class: 'card' }, keys.length ? h('div', { class: 'scroll' }, h('table', { id: 'keys' },
    h('thead', {}, h('tr', {}, ['Name', 'Id', 'From', 'Limits', 'Spend', 'Budget', 'In flight', 'Refused', 'Created', ''].map((c) => h('th', {}, c)))),
    h('tbody', {}, keys.map((k) => h('tr', { dataset: { keyId: k.id }, class: k.revoked ? 'muted' : '' },
      h('td', {}, k.name || '—'), h('td', { class: 'small' }, k.id), h('td', {}, k.source),
      h('td', {}, limitsText(k)), h('td', { class: 'num spend' }, fmtUsd(k.spend_usd)),
      h('td', { class: 'budget' }, budgetText(k)), h('td', { class: 'num' }, fmtInt(k.in_flight)),
      h('td', {}, refusedText(k.rate_limited)),
      h('td', { class: 'nowrap' }, k.created_at ? fmtTime(k.created_at) : '—'),
      h('td', { class: 'actions' }, k.revoked ? 'revoked' : k.source === 'api' ? [
        h('button', { type: 'button', class: 'rotate', onclick: () => rotate(state, k) }, 'Rotate'),
        h('button', { type: 'button', class: 'danger revoke', onclick: () => revoke(state, k) }, 'Revoke')] : '')))))) :
    h('p', { class: 'muted' }, 'No gateway keys: requests need none (server.api_keys in the config, or New key).')));
}

function create(state) {
  const f = {
    name: h('input', { name: 'name', required: true }),
    models: h('input', { name: 'models', placeholder: 'any' }),
    max_budget_usd: h('input', { name: 'max_budget_usd', type: 'number', step: 'any', min: '0' }),
    budget_duration: h('input', { name: 'budget_duration', placeholder: 'lifetime (or 1h, 1d, 30d)' }),
    rpm: h('input', { name: 'rpm', type: 'number', min: '1' }),
    tpm: h('input', { name: 'tpm', type: 'number', min: '1' }),
    max_parallel: h('input', { name: 'max_parallel', type: 'number', min: '1' }),
  };
  const error = h('p', { class: 'error', hidden: true });
  const field = (label, el) => h('label', {}, label, el);
  const form = h('form', { id: 'key-form', class: 'card form', onsubmit: async (ev) => {
    ev.preventDefault();
    const body = { name: f.name.value.trim() };
    const models = f.models.value.split(',').map((m) => m.trim()).filter(Boolean);
    if (models.length) body.models = models;
    for (const k of ['max_budget_usd', 'rpm', 'tpm', 'max_parallel']) if (f[k].value !== '') body[k] = Number(f[k].value);
    if (f.budget_duration.value.trim()) body.budget_duration = f.budget_duration.value.trim();
    try {
      const made = await api('/api/keys', { method: 'POST', body });
      state.secret = { name: made.name || made.id, key: made.key };
      await load(state);
    } catch (e) {
      error.hidden = false;
      error.textContent = e.message;
    }
  } },
  h('h2', {}, 'New key'),
  h('div', { class: 'form-grid' }, field('Name', f.name), field('Models (comma-separated)', f.models),
    field('Budget, USD', f.max_budget_usd), field('Budget resets every', f.budget_duration),
    field('Requests per minute', f.rpm), field('Tokens per minute', f.tpm), field('In flight at most', f.max_parallel)),
  error,
  h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Create'),
    h('button', { type: 'button', onclick: () => clear(state.formBox) }, 'Cancel')));
  clear(state.formBox).append(form);
  f.name.focus();
}

async function rotate(state, k) {
  if (!window.confirm(`Rotate ${k.name}? Its current secret stops working at once.`)) return;
  const made = await api(`/api/keys/${encodeURIComponent(k.id)}/rotate`, { method: 'POST' });
  state.secret = { name: made.name || made.id, key: made.key };
  await load(state);
}

async function revoke(state, k) {
  if (!window.confirm(`Revoke ${k.name}? Its requests get 401 from now on.`)) return;
  await api(`/api/keys/${encodeURIComponent(k.id)}`, { method: 'DELETE' });
  await load(state);
}
