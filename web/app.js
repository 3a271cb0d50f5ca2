// The dashboard's shell: hash routes to pages, the admin-token prompt, the open-API warning, and
// live updates.
//
// Live updates poll GET /api/live every 2 s (while the tab is visible) and refresh the page when
// a request was recorded since. That endpoint reads one row of an index (the newest request's
// insertion number, and for a thread view that thread's), so a poll costs the server
// microseconds; unlike a server-sent event stream it holds no connection open, so kvgate's
// shutdown drain never waits on a dashboard, and any proxy in between passes it. Telemetry is
// committed within ~20 ms, so a new turn shows within about two seconds.
import { api, setToken, setUnauthorizedHandler, token } from './api.js';
import { h, clear } from './format.js';
import * as overview from './overview.js';
import * as threads from './threads.js';
import * as thread from './thread.js';
import * as requests from './requests.js';
import * as monitors from './monitors.js';
import * as engine from './engine.js';
import * as keys from './keys.js';

const POLL_MS = 2000;
const view = document.getElementById('view');
const banner = document.getElementById('banner');
const dialog = document.getElementById('token-dialog');
const liveBadge = document.getElementById('live');

let current = null;      // {page, handle}
let lastSeq = null;      // the last /api/live answer's last_seq
let lastThreadSeq = null;
let pollTimer = null;
let tokenRequired = false;

function route() {
  const hash = location.hash.replace(/^#/, '') || '/';
  const [pathPart, queryPart] = hash.split('?');
  const parts = pathPart.split('/').filter(Boolean).map(decodeURIComponent);
  const params = Object.fromEntries(new URLSearchParams(queryPart || ''));
  if (parts[0] === 'threads' && parts.length > 1) return { name: 'thread', page: thread, id: parts.slice(1).join('/'), params };
  const pages = { threads, requests, monitors, engine, keys };
  if (pages[parts[0]]) return { name: parts[0], page: pages[parts[0]], params };
  return { name: 'overview', page: overview, params };
}

async function show() {
  if (current && current.handle && current.handle.unmount) current.handle.unmount();
  const r = route();
  for (const a of document.querySelectorAll('#nav a')) {
    a.classList.toggle('active', a.dataset.page === (r.name === 'thread' ? 'threads' : r.name));
  }
  clear(view);
  current = { route: r, handle: null };
  const mine = current;
  // The baseline is read before the page loads its data, so a turn recorded in between is a
  // change the next poll sees (at worst one refresh too many, never one too few).
  await baseline(r.name === 'thread' ? r.id : '');
  try {
    const handle = await r.page.mount(view, r);
    if (current === mine) current.handle = handle || {};
  } catch (e) {
    if (current === mine) showError(e);
  }
}

export function showError(e) {
  clear(view);
  view.append(h('div', { class: 'card error-card' },
    h('h2', {}, e.status === 404 ? 'Not found' : 'Something went wrong'),
    h('p', {}, e.message || String(e))));
}

const liveUrl = (threadId) => `/api/live${threadId ? `?thread_id=${encodeURIComponent(threadId)}` : ''}`;

async function baseline(threadId) {
  lastSeq = null;
  lastThreadSeq = null;
  try {
    const live = await api(liveUrl(threadId));
    lastSeq = live.last_seq;
    lastThreadSeq = live.thread ? live.thread.last_seq : null;
  } catch {
    // The page's own load reports what is wrong.
  }
}

async function poll() {
  pollTimer = null;
  if (!document.hidden && current && current.handle && current.handle.refresh) {
    const threadId = current.handle.liveThread || '';
    try {
      const live = await api(liveUrl(threadId));
      liveBadge.classList.remove('stale');
      const changed = lastSeq !== null && live.last_seq !== lastSeq;
      const threadSeq = live.thread ? live.thread.last_seq : null;
      const threadChanged = threadId && lastThreadSeq !== null && threadSeq !== lastThreadSeq;
      lastSeq = live.last_seq;
      lastThreadSeq = threadSeq;
      if (threadId ? threadChanged : changed) await current.handle.refresh();
    } catch {
      liveBadge.classList.add('stale');
    }
  }
  pollTimer = setTimeout(poll, POLL_MS);
}

function askToken(message) {
  const err = document.getElementById('token-error');
  err.hidden = !message;
  err.textContent = message || '';
  if (!dialog.open) dialog.showModal();
  document.getElementById('token-input').focus();
}

document.getElementById('token-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const input = document.getElementById('token-input');
  setToken(input.value.trim());
  try {
    await api('/api/live');
  } catch (e) {
    setToken('');
    askToken(e.status === 401 ? 'That token was refused.' : e.message);
    return;
  }
  input.value = '';
  dialog.close();
  show();
});
dialog.addEventListener('cancel', (ev) => ev.preventDefault());  // the pages need the token

setUnauthorizedHandler(() => {
  if (!tokenRequired) return;
  setToken('');
  askToken(token() ? 'The token was refused.' : '');
});

async function start() {
  try {
    const access = await api('/api/access');
    tokenRequired = access.token_required;
    if (!access.token_required && access.warning) {
      banner.hidden = false;
      banner.textContent = `Warning: ${access.warning}. Set server.admin_token in the config ` +
        'to require a token.';
    }
  } catch (e) {
    banner.hidden = false;
    banner.textContent = `kvgate did not answer: ${e.message}`;
  }
  window.addEventListener('hashchange', show);
  if (tokenRequired && !token()) askToken('');
  else show();
  pollTimer = setTimeout(poll, POLL_MS);
}

start();
