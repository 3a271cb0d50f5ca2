// The built-in engines: KV pool in use, prefix-cache hit rate, blocks, evictions, the offload tier;
// and "is this prompt cached?" (POST /api/engine/lookup: how much of a prompt the prefix cache
// holds now, without running it).
import { api } from './api.js';
import { clear, fmtInt, fmtPct, h } from './format.js';

export async function mount(view) {
  const root = h('section', { class: 'engine-page' });
  view.append(root);
  root.append(h('div', { class: 'page-head' }, h('h1', {}, 'Built-in engine')));
  const cards = h('div', { id: 'engines' });
  root.append(cards);
  const data = await api('/api/engine');
  render(cards, data.engines);
  if (data.engines.length) root.append(lookupBox(data.engines));
  return { refresh: async () => render(cards, (await api('/api/engine')).engines) };
}

function render(box, engines) {
  clear(box);
  if (!engines.length) {
    box.append(h('div', { class: 'card' }, h('p', { class: 'muted' }, 'No model is served by the built-in engine in this configuration.')));
    return;
  }
  for (const e of engines) {
    const hit = e.prefix_cache_queries_tokens > 0 ? e.prefix_cache_hits_tokens / e.prefix_cache_queries_tokens : null;
    // A block holds data while a running request uses it or while it keeps a cached prefix
    // (free, reusable on a hit until evicted): "in use" counts both, as a person reading the pool
    // expects; the share held by running requests is shown beside it.
    const holding = e.used_blocks + (e.cached_free_blocks || 0);
    const used = e.pool_blocks > 0 ? holding / e.pool_blocks : 0;
    const running = e.kv_cache_usage_perc ?? (e.pool_blocks > 0 ? e.used_blocks / e.pool_blocks : 0);
    const meter = h('div', { class: 'meter', role: 'meter', 'aria-valuemin': '0', 'aria-valuemax': '100', 'aria-valuenow': String(Math.round(used * 100)) },
      h('div', { class: 'meter-fill' }));
    meter.firstChild.style.width = `${(used * 100).toFixed(1)}%`;  // CSSOM, allowed by the CSP
    box.append(h('div', { class: 'card engine', dataset: { provider: e.provider } },
      h('h2', {}, `${e.provider} `, h('span', { class: 'muted small' }, `${e.backend} · ${(e.models || []).join(', ')}`)),
      h('div', { class: 'kpis' },
        stat('KV pool in use', fmtPct(used), `${fmtInt(holding)} of ${fmtInt(e.pool_blocks)} blocks of ${e.block_size} tokens: ` +
          `${fmtInt(e.used_blocks)} by running requests, ${fmtInt(e.cached_free_blocks)} holding cached prefixes`),
        stat('Held by running requests', fmtPct(running), 'the rest of the pool is cache or free'),
        stat('Prefix-cache hit rate', fmtPct(hit), `${fmtInt(e.prefix_cache_hits_tokens)} of ${fmtInt(e.prefix_cache_queries_tokens)} prompt tokens`),
        stat('Cached, free blocks', fmtInt(e.cached_free_blocks), 'reusable until evicted'),
        stat('Evictions', fmtInt(e.evictions), `${fmtInt(e.cache_written_blocks)} blocks written`),
        stat('Running / waiting', `${fmtInt(e.running)} / ${fmtInt(e.waiting)}`, `${fmtInt(e.preemptions)} preemptions`),
        stat('Requests', fmtInt(e.requests_total), `${fmtInt(e.prompt_tokens_total)} prompt, ${fmtInt(e.generation_tokens_total)} generated tokens`),
        ...(e.offload ? [stat(e.offload.kind === 'host' ? 'Host-memory tier' : 'Disk tier', `${fmtInt(e.offload.hit_tokens)} tokens restored`,
          `${fmtInt(e.offload.used_blocks)} of ${fmtInt(e.offload.capacity_blocks)} blocks used · ${fmtInt(e.offload.corrupt_blocks)} corrupt`)] : [])),
      meter));
  }
}

function stat(label, value, note) {
  return h('div', { class: 'kpi' }, h('div', { class: 'kpi-label' }, label), h('div', { class: 'kpi-value' }, value), h('div', { class: 'kpi-note' }, note));
}

function lookupBox(engines) {
  const models = engines.flatMap((e) => e.models || []);
  const model = h('select', { id: 'lookup-model', 'aria-label': 'Model' }, models.map((m) => h('option', { value: m }, m)));
  const text = h('textarea', { id: 'lookup-text', rows: '6', placeholder: 'A prompt, or a JSON array of chat messages: [{"role": "user", "content": "…"}]', 'aria-label': 'Prompt or messages' });
  const out = h('div', { id: 'lookup-result', class: 'lookup-result' });
  return h('form', { class: 'card', id: 'lookup-form', onsubmit: async (ev) => {
    ev.preventDefault();
    // The prompt is sent as typed: whitespace is tokens too.
    const raw = text.value;
    let body = { model: model.value, prompt: raw };
    if (raw.trim().startsWith('[')) {
      try { body = { model: model.value, messages: JSON.parse(raw) }; } catch (e) { out.textContent = `Not valid JSON: ${e.message}`; return; }
    }
    try {
      const r = await api('/api/engine/lookup', { method: 'POST', body });
      const share = r.prompt_tokens > 0 ? r.cached_tokens / r.prompt_tokens : 0;
      const t = r.cached_tokens_by_tier || {};
      const tier = t.host > 0 ? `${fmtInt(t.host)} in host memory` : `${fmtInt(t.disk || 0)} in the disk tier`;
      clear(out).append(h('strong', {}, `${fmtInt(r.cached_tokens)} of ${fmtInt(r.prompt_tokens)} prompt tokens are cached`),
        ` (${fmtPct(share)}) in ${r.model}'s prefix cache right now` +
        ((t.host || t.disk) > 0 ? `: ${fmtInt(t.pool)} in the KV pool, ${tier}.` : '.'));
    } catch (e) {
      clear(out).append(h('span', { class: 'error' }, e.message));
    }
  } },
  h('h2', {}, 'Is this prompt cached?'),
  h('p', { class: 'muted' }, 'Tokenizes the prompt as the engine would and walks its prefix cache; nothing runs.'),
  h('div', { class: 'filters' }, model), text,
  h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Look up')), out);
}
