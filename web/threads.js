// Every thread, sortable and filterable, a page at a time. Pages follow the server's keyset
// cursor (next_cursor), so the thousandth page costs what the first does; "Previous" replays
// the cursors already seen. Search finds threads whose id starts with the text typed.
import { api, query } from './api.js';
import { clear, fmtAgo, fmtInt, fmtPct, fmtTime, fmtUsd, h } from './format.js';

const SORTS = [
  ['last_seen', 'Last seen'], ['first_seen', 'First seen'], ['cost', 'Cost'], ['turns', 'Turns'],
  ['hit_ratio', 'Hit rate'], ['missed_cost', 'Lost to misses'],
];
const WINDOWS = { '': 'any time', '1h': 'last hour', '24h': 'last 24 h', '7d': 'last 7 days' };
const PAGE = 50;

export async function mount(view, route) {
  const p = route.params;
  const state = {
    sort: SORTS.some(([k]) => k === p.sort) ? p.sort : 'last_seen',
    order: p.order === 'asc' ? 'asc' : 'desc',
    model: p.model || '', q: p.q || '', window: WINDOWS[p.window] ? p.window : '',
    cursors: [''],  // cursors[i] opens page i
    page: 0,
  };
  const root = h('section', { class: 'threads-page' });
  view.append(root);
  renderControls(root, state);
  const body = h('div', { id: 'threads-body' });
  root.append(body);
  state.body = body;
  await load(state);
  // Live: only the first page moves (later pages are where the reader left them).
  return { refresh: () => (state.page === 0 ? load(state) : null) };
}

function sinceOf(w) {
  const ms = { '1h': 3600e3, '24h': 86400e3, '7d': 7 * 86400e3 }[w];
  return ms ? new Date(Date.now() - ms).toISOString() : '';
}

function syncHash(state) {
  const q = query({ sort: state.sort === 'last_seen' ? '' : state.sort, order: state.order === 'desc' ? '' : state.order,
    model: state.model, q: state.q, window: state.window });
  history.replaceState(null, '', `#/threads${q}`);
}

function renderControls(root, state) {
  const search = h('input', { type: 'search', id: 'thread-search', placeholder: 'Thread id starts with…', value: state.q, 'aria-label': 'Search threads by id' });
  const model = h('input', { type: 'text', id: 'thread-model', placeholder: 'Model', value: state.model, 'aria-label': 'Model' });
  const win = h('select', { id: 'thread-window', 'aria-label': 'Active in' }, Object.entries(WINDOWS).map(([k, label]) =>
    h('option', { value: k, selected: k === state.window }, label)));
  const form = h('form', { class: 'filters', id: 'thread-filters', onsubmit: (ev) => {
    ev.preventDefault();
    state.q = search.value.trim(); state.model = model.value.trim(); state.window = win.value;
    restart(state);
  } }, search, model, win, h('button', { type: 'submit', class: 'primary' }, 'Apply'));
  win.addEventListener('change', () => form.requestSubmit());
  root.append(h('div', { class: 'page-head' }, h('h1', {}, 'Threads')), form);
}

function restart(state) {
  state.cursors = [''];
  state.page = 0;
  syncHash(state);
  load(state).catch(showFailure(state));
}

const showFailure = (state) => (e) => { clear(state.body).append(h('p', { class: 'error' }, e.message)); };

async function load(state) {
  const data = await api(`/api/threads${query({ sort: state.sort, order: state.order, model: state.model,
    q: state.q, since: sinceOf(state.window), limit: PAGE, cursor: state.cursors[state.page] })}`);
  state.cursors[state.page + 1] = data.next_cursor || null;
  render(state, data);
}

function header(state, key, label) {
  const active = state.sort === key;
  const numeric = !['first_seen', 'last_seen'].includes(key);
  const arrow = active ? (state.order === 'desc' ? ' ▼' : ' ▲') : '';
  return h('th', { class: `sortable${active ? ' active' : ''}${numeric ? ' num' : ''}`, dataset: { sort: key }, 'aria-sort': active ? (state.order === 'desc' ? 'descending' : 'ascending') : 'none' },
    h('button', { type: 'button', onclick: () => {
      if (state.sort === key) state.order = state.order === 'desc' ? 'asc' : 'desc';
      else { state.sort = key; state.order = 'desc'; }
      restart(state);
    } }, label + arrow));
}

function render(state, data) {
  const body = clear(state.body);
  if (!data.threads.length) {
    body.append(h('p', { class: 'muted', id: 'no-threads' }, state.page === 0 ? 'No threads match.' : 'No more threads.'));
  } else {
    const sortLabel = Object.fromEntries(SORTS);
    body.append(h('div', { class: 'scroll' }, h('table', { id: 'threads' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Thread'), header(state, 'turns', sortLabel.turns), h('th', {}, 'Models'),
        header(state, 'cost', sortLabel.cost), header(state, 'missed_cost', sortLabel.missed_cost),
        header(state, 'hit_ratio', sortLabel.hit_ratio), header(state, 'first_seen', sortLabel.first_seen),
        header(state, 'last_seen', sortLabel.last_seen))),
      h('tbody', {}, data.threads.map((t) => h('tr', { dataset: { threadId: t.thread_id } },
        h('td', { class: 'id' }, h('a', { href: `#/threads/${encodeURIComponent(t.thread_id)}` }, t.thread_id)),
        h('td', { class: 'num' }, fmtInt(t.turns)),
        h('td', {}, t.models.join(', ')),
        h('td', { class: 'num' }, fmtUsd(t.cost_usd)),
        h('td', { class: 'num' }, fmtUsd(t.missed_usd)),
        h('td', { class: 'num' }, fmtPct(t.hit_ratio)),
        h('td', { class: 'nowrap', title: fmtTime(t.first_seen) }, fmtAgo(t.first_seen)),
        h('td', { class: 'nowrap', title: fmtTime(t.last_seen) }, fmtAgo(t.last_seen))))))));
  }
  body.append(h('div', { class: 'pager' },
    h('button', { type: 'button', id: 'prev-page', disabled: state.page === 0, onclick: () => { state.page -= 1; load(state).catch(showFailure(state)); } }, '← Previous'),
    h('span', { class: 'muted' }, `page ${state.page + 1}`),
    h('button', { type: 'button', id: 'next-page', disabled: !data.next_cursor, onclick: () => { state.page += 1; load(state).catch(showFailure(state)); } }, 'Next →')));
}
