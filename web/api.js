// The admin API as the dashboard calls it: JSON over fetch, with the admin token (when the
// server needs one) in an Authorization header, never in a URL or a cookie.
//
// The token is kept in sessionStorage: it lasts for this tab and is gone when the tab closes;
// unlike a cookie it is never sent by the browser on its own (no CSRF), and it is not written to
// disk the way localStorage is. Scripts of this origin can read it; the page's
// Content-Security-Policy admits no script but the dashboard's own files.

const TOKEN_KEY = 'kvgate.admin_token';

export class ApiError extends Error {
  constructor(status, message, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

let onUnauthorized = () => {};

export function setUnauthorizedHandler(fn) { onUnauthorized = fn; }
export function token() { return sessionStorage.getItem(TOKEN_KEY) || ''; }
export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

// GET (or another method with a JSON body) of an /api path; resolves to the parsed body.
export async function api(path, { method = 'GET', body, signal } = {}) {
  const headers = { Accept: 'application/json' };
  const t = token();
  if (t) headers.Authorization = `Bearer ${t}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, {
    method, headers, signal, cache: 'no-store', credentials: 'omit',
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = text; }
  if (!res.ok) {
    const err = data && data.error ? data.error : {};
    if (res.status === 401) onUnauthorized();
    throw new ApiError(res.status, err.message || `HTTP ${res.status}`, err.code || null);
  }
  return data;
}

// A query string from an object, leaving out empty values.
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : '';
}
