// The server's API as the page uses it: the model's name and context (/v1/models, /props), and
// streamed chat completions (server-sent events) that a Stop can abort. Aborting the fetch
// closes the connection, which is how the server learns to cancel the request and free its slot.

const KEY_STORE = 'qwen35.apiKey';
let memoryKey = '';  // when sessionStorage is unavailable

// The API key lives in sessionStorage: it survives a reload, not the tab.
export function apiKey() {
  try {
    return sessionStorage.getItem(KEY_STORE) || memoryKey;
  } catch (e) {
    return memoryKey;
  }
}

export function setApiKey(key) {
  try {
    if (key) sessionStorage.setItem(KEY_STORE, key);
    else sessionStorage.removeItem(KEY_STORE);
  } catch (e) { /* storage off: the key lasts until the next reload */ }
  memoryKey = key;
}

function headers(json) {
  const h = {};
  if (json) h['Content-Type'] = 'application/json';
  const key = apiKey();
  if (key) h.Authorization = 'Bearer ' + key;
  return h;
}

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function errorOf(res) {
  let message = res.status + ' ' + res.statusText;
  try {
    const body = await res.json();
    if (body && body.error && body.error.message) message = body.error.message;
  } catch (e) { /* not JSON */ }
  return new ApiError(res.status, message);
}

async function getJson(path) {
  const res = await fetch(path, { headers: headers(false) });
  if (!res.ok) throw await errorOf(res);
  return res.json();
}

// {name, ctx, slots, defaults, chat}. Throws ApiError (401 when a key is needed).
export async function serverInfo() {
  const [models, props] = await Promise.all([getJson('/v1/models'), getJson('/props')]);
  const m = (models.data && models.data[0]) || {};
  return {
    name: String(props.model || m.id || 'model'),
    ctx: Number(props.n_ctx || m.max_model_len || 0),
    slots: Number(props.total_slots || 0),
    chat: props.chat !== false,
    defaults: props.default_generation_settings || {},
  };
}

// Splits a server-sent-events byte stream into the payloads of its `data:` lines.
class SseParser {
  constructor() {
    this.buffer = '';
  }
  push(text) {
    this.buffer += text;
    const out = [];
    let end;
    while ((end = this.buffer.indexOf('\n\n')) >= 0) {
      const event = this.buffer.slice(0, end);
      this.buffer = this.buffer.slice(end + 2);
      for (const line of event.split('\n')) {
        if (line.startsWith('data:')) out.push(line.slice(5).trimStart());
      }
    }
    return out;
  }
}

// Streams one chat completion. `on` receives: delta({content, reasoning, toolCalls}) for each
// chunk, usage(usage, timings) (the server's token counts and speeds), finish(reason). Resolves when the stream ends (or is aborted through
// `signal`: then it rejects with an AbortError).
export async function streamChat(body, signal, on) {
  const res = await fetch('/v1/chat/completions', {
    method: 'POST',
    headers: headers(true),
    body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
    signal,
  });
  if (!res.ok) throw await errorOf(res);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  const sse = new SseParser();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    for (const data of sse.push(decoder.decode(value, { stream: true }))) {
      if (data === '[DONE]') return;
      let chunk;
      try {
        chunk = JSON.parse(data);
      } catch (e) {
        continue;
      }
      if (chunk.error) throw new ApiError(500, chunk.error.message || 'error');
      if (chunk.usage) on.usage(chunk.usage, chunk.timings || null);
      for (const choice of chunk.choices || []) {
        const d = choice.delta || {};
        if (d.content || d.reasoning_content || d.tool_calls) {
          on.delta({
            content: typeof d.content === 'string' ? d.content : '',
            reasoning: typeof d.reasoning_content === 'string' ? d.reasoning_content : '',
            toolCalls: Array.isArray(d.tool_calls) ? d.tool_calls : [],
          });
        }
        if (choice.finish_reason) on.finish(choice.finish_reason);
      }
    }
  }
}
