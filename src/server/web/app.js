// The chat page's controller: the conversation list, the message view, sending and streaming,
// stop, regenerate, edit-and-resend, images (attach, paste, drop), settings and the API key
// dialog. State lives in the Store
// (localStorage); the view is rebuilt from it, except the answer being streamed, whose parts
// are updated in place once per animation frame.
import { ApiError, serverInfo, setApiKey, apiKey, streamChat } from './api.js';
import { Store, SETTING_KEYS } from './store.js';
import { el, copyButton, renderMarkdown, renderToolCalls, statsText } from './render.js';
import { ACCEPT, imageFiles, imageFromFile } from './images.js';

const $ = (id) => document.getElementById(id);
const store = new Store();
let info = null;        // serverInfo(), once known
let running = null;     // {controller, conv, msg} while an answer streams
const views = new WeakMap();  // assistant message -> its DOM parts
let attached = [];      // data: URLs of the images for the next message
const kMaxImages = 8;   // per message: the server's default --max-images

// ---- server info and the API key ------------------------------------------------------------

function notice(text) {
  $('notice').textContent = text || '';
  $('notice').hidden = !text;
}

async function loadInfo() {
  try {
    info = await serverInfo();
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) return askKey(loadInfo);
    // 503 while the model loads, or the server is not up yet: try again shortly.
    notice(e instanceof ApiError ? e.message : 'The server does not answer; retrying…');
    setTimeout(loadInfo, 1500);
    return;
  }
  notice('');
  $('model-name').textContent = info.name;
  $('model-ctx').textContent = info.ctx
    ? 'context ' + info.ctx.toLocaleString('en-US') + ' tokens' +
      (info.slots ? ' · ' + info.slots + ' slots' : '')
    : '';
  document.title = info.name + ' · qwen35';
  const d = info.defaults;
  for (const k of ['temperature', 'top_p', 'top_k']) {
    if (d[k] !== undefined) $('set-' + k).placeholder = String(d[k]);
  }
  $('set-max_tokens').placeholder = 'up to the context';
  if (!info.chat) notice('This model has no chat template: the chat endpoint is off.');
}

let keyRetry = null;
function askKey(retry) {
  keyRetry = retry;
  $('key-error').hidden = !apiKey();
  $('key-input').value = '';
  if (!$('key-dialog').open) $('key-dialog').showModal();
  $('key-input').focus();
}

$('key-save').addEventListener('click', () => {
  setApiKey($('key-input').value.trim());
  $('key-dialog').close();
  const retry = keyRetry;
  keyRetry = null;
  if (retry) retry();
});
// Nothing works without the key: Escape does not dismiss the question.
$('key-dialog').addEventListener('cancel', (e) => e.preventDefault());
$('key-input').addEventListener('keydown', (e) => {
  if (e.key === 'Enter') $('key-save').click();
});

// ---- conversation list ----------------------------------------------------------------------

function renderSidebar() {
  const list = $('conversations');
  list.replaceChildren();
  for (const c of store.sorted()) {
    const li = el('li', c.id === store.currentId ? 'active' : '');
    const open = el('button', 'conv-title', c.title || 'New chat');
    open.type = 'button';
    open.addEventListener('click', () => {
      store.currentId = c.id;
      store.save();
      closeSidebarOnNarrow();
      renderAll();
    });
    const del = el('button', 'conv-delete', '×');
    del.type = 'button';
    del.title = 'Delete this conversation';
    del.setAttribute('aria-label', 'Delete ' + (c.title || 'conversation'));
    del.addEventListener('click', () => {
      if (running && running.conv === c) running.controller.abort();
      store.remove(c.id);
      store.save();
      renderAll();
    });
    li.append(open, del);
    list.append(li);
  }
}

const narrow = window.matchMedia('(max-width: 760px)');
function closeSidebarOnNarrow() {
  if (narrow.matches) setSidebar(false);
}
function setSidebar(open) {
  $('app').classList.toggle('sidebar-open', open);
  $('app').classList.toggle('sidebar-closed', !open);
  $('scrim').hidden = !(open && narrow.matches);
}
$('toggle-sidebar').addEventListener('click', () => {
  const open = narrow.matches ? !$('app').classList.contains('sidebar-open')
    : $('app').classList.contains('sidebar-closed');
  setSidebar(open);
});
$('scrim').addEventListener('click', () => setSidebar(false));
$('new-chat').addEventListener('click', () => {
  store.startNew();
  store.save();
  closeSidebarOnNarrow();
  renderAll();
  $('input').focus();
});

// ---- messages -------------------------------------------------------------------------------

function actionButton(label, onClick) {
  const b = el('button', 'action', label);
  b.type = 'button';
  b.addEventListener('click', onClick);
  return b;
}

function thumbnails(urls, onRemove) {
  const row = el('div', 'thumbs');
  urls.forEach((url, k) => {
    const box = el('span', 'thumb');
    const img = el('img');
    img.src = url;
    img.alt = 'image ' + (k + 1);
    box.append(img);
    if (onRemove) {
      const x = el('button', 'thumb-remove', '×');
      x.type = 'button';
      x.title = 'Remove this image';
      x.setAttribute('aria-label', 'Remove image ' + (k + 1));
      x.addEventListener('click', () => onRemove(k));
      box.append(x);
    }
    row.append(box);
  });
  return row;
}

function userNode(conv, m, i) {
  const node = el('div', 'msg user');
  if (m.images && m.images.length) node.append(thumbnails(m.images));
  if (m.images_dropped) {
    node.append(el('div', 'muted', m.images_dropped === 1 ? '1 image was not kept (browser storage)'
      : m.images_dropped + ' images were not kept (browser storage)'));
  }
  const bubble = el('div', 'bubble', m.content);
  bubble.hidden = !m.content;
  const actions = el('div', 'actions');
  if (!running) actions.append(actionButton('Edit', () => editMessage(conv, i, node)));
  actions.append(copyButton(() => m.content));
  node.append(bubble, actions);
  return node;
}

function assistantNode(conv, m, i) {
  const node = el('div', 'msg assistant');
  const thinking = el('details', 'thinking');
  const summary = el('summary', '', 'Thinking');
  const thinkingBody = el('div', 'thinking-body');
  thinking.append(summary, thinkingBody);
  const tools = el('div', 'tool-calls');
  const content = el('div', 'content');
  const error = el('div', 'error');
  const meta = el('div', 'meta');
  const stats = el('span', 'stats');
  const actions = el('span', 'actions');
  meta.append(stats, actions);
  node.append(thinking, content, tools, error, meta);  // the order the model writes them
  const parts = { node, thinking, summary, thinkingBody, tools, content, error, stats, actions };
  views.set(m, parts);
  updateAssistant(m, parts);
  const last = i === conv.messages.length - 1;
  if (!(running && running.msg === m)) {
    actions.append(copyButton(() => m.content));
    if (last && !running) actions.append(actionButton('Regenerate', () => regenerate(conv)));
  }
  return node;
}

function updateAssistant(m, p) {
  const live = running && running.msg === m;
  // A model that closes its think block at once leaves a newline: no block for that.
  const reasoning = m.reasoning.trim() !== '';
  p.thinking.hidden = !reasoning;
  if (reasoning) {
    p.thinkingBody.textContent = m.reasoning;
    p.summary.textContent = live && !m.content && !m.tool_calls.length ? 'Thinking…' : 'Thoughts';
  }
  if (m.tool_calls.length) renderToolCalls(p.tools, m.tool_calls);
  renderMarkdown(p.content, m.content);
  p.content.classList.toggle('streaming', live);
  p.error.textContent = m.error;
  p.error.hidden = !m.error;
  p.stats.textContent = statsText(m);
}

function nearBottom() {
  const box = $('messages');
  return box.scrollTop + box.clientHeight >= box.scrollHeight - 60;
}

function scrollToBottom() {
  $('messages').scrollTop = $('messages').scrollHeight;
}

function renderMessages() {
  const conv = store.current();
  const box = $('messages');
  box.replaceChildren();
  $('chat-title').textContent = (conv && conv.title) || 'New chat';
  if (!conv || conv.messages.length === 0) {
    box.append(emptyView);
    return;
  }
  conv.messages.forEach((m, i) => {
    box.append(m.role === 'user' ? userNode(conv, m, i) : assistantNode(conv, m, i));
  });
  scrollToBottom();
}
const emptyView = $('empty');

function renderComposer() {
  $('send').hidden = !!running;
  $('stop').hidden = !running;
}

function renderAll() {
  renderSidebar();
  renderMessages();
  renderComposer();
}

// Streamed text is drawn at most once per frame: re-rendering the Markdown on every token of
// a fast model would cost more than the model.
let pending = false;
function scheduleUpdate(m) {
  if (pending) return;
  pending = true;
  requestAnimationFrame(() => {
    pending = false;
    // A message that has finished was drawn whole by renderAll: a frame that comes after it
    // must not redraw it again (a click on its buttons would land on replaced nodes).
    if (!running || running.msg !== m) return;
    const p = views.get(m);
    if (!p || !p.node.isConnected) return;
    const stick = nearBottom();
    updateAssistant(m, p);
    if (stick) scrollToBottom();
  });
}

// ---- sending --------------------------------------------------------------------------------

function apiMessages(conv, upTo) {
  const out = [];
  const system = store.settings.system.trim();
  if (system) out.push({ role: 'system', content: system });
  for (const m of conv.messages.slice(0, upTo)) {
    if (m.role === 'user') {
      if (m.images && m.images.length) {
        const parts = m.images.map((url) => ({ type: 'image_url', image_url: { url } }));
        if (m.content) parts.push({ type: 'text', text: m.content });
        out.push({ role: 'user', content: parts });
      } else {
        out.push({ role: 'user', content: m.content });
      }
    } else if (m.content || m.tool_calls.length) {
      const a = { role: 'assistant', content: m.content };
      if (m.tool_calls.length) {
        a.tool_calls = m.tool_calls;
        a.content = m.content || null;
      }
      out.push(a);
    }
  }
  return out;
}

function requestBody(conv, upTo) {
  const body = { messages: apiMessages(conv, upTo) };
  for (const k of SETTING_KEYS) {
    if (store.settings[k] !== null) body[k] = store.settings[k];
  }
  body.chat_template_kwargs = { enable_thinking: store.settings.thinking };
  return body;
}

async function complete(conv) {
  const m = { role: 'assistant', content: '', reasoning: '', tool_calls: [], finish: '',
    error: '', stats: null };
  conv.messages.push(m);
  store.touch(conv);
  const controller = new AbortController();
  running = { controller, conv, msg: m };
  renderAll();
  const t0 = performance.now();
  let tFirst = 0, tLast = 0, usage = null, timings = null;
  try {
    await streamChat(requestBody(conv, conv.messages.length - 1), controller.signal, {
      delta(d) {
        tLast = performance.now();
        if (!tFirst) tFirst = tLast;
        m.content += d.content;
        m.reasoning += d.reasoning;
        for (const c of d.toolCalls) {
          if (c && c.function) m.tool_calls.push({ id: String(c.id || ''), type: 'function',
            function: { name: String(c.function.name || ''),
              arguments: String(c.function.arguments || '') } });
        }
        scheduleUpdate(m);
      },
      usage(u, t) {
        usage = u;
        timings = t;
      },
      finish(reason) { m.finish = reason; },
    });
  } catch (e) {
    if (e.name === 'AbortError') {
      m.finish = 'stopped';
    } else if (e instanceof ApiError && e.status === 401) {
      conv.messages.pop();
      running = null;
      renderAll();
      askKey(() => complete(conv));
      return;
    } else {
      m.error = e.message || String(e);
    }
  }
  const stats = {};
  if (tFirst) stats.ttft_ms = Math.round(tFirst - t0);
  if (usage) {
    stats.prompt_tokens = usage.prompt_tokens;
    const details = usage.prompt_tokens_details;
    if (details && typeof details.cached_tokens === 'number') {
      stats.cached_tokens = details.cached_tokens;
    }
    stats.completion_tokens = usage.completion_tokens;
    // Decode speed: the server's measure. The browser's own is a fallback for servers that do
    // not send one; it fails when the chunks came out of one read (no time to divide by).
    if (timings && typeof timings.predicted_per_second === 'number') {
      stats.tps = timings.predicted_per_second;
    } else if (usage.completion_tokens > 1 && tLast - tFirst >= 1) {
      stats.tps = (usage.completion_tokens - 1) / ((tLast - tFirst) / 1000);
    }
  }
  m.stats = stats;
  running = null;
  store.touch(conv);
  if (!store.save()) notice('The browser did not save this conversation (storage full?).');
  if (store.current() === conv) {
    renderAll();
  } else {
    renderSidebar();
    renderComposer();
  }
}

function send() {
  const text = $('input').value;
  if (running || (!text.trim() && !attached.length)) return;
  const conv = store.ensureCurrent();
  const m = { role: 'user', content: text };
  if (attached.length) m.images = attached;
  conv.messages.push(m);
  attached = [];
  renderAttachments();
  $('input').value = '';
  resizeInput();
  complete(conv);
}

// ---- images ---------------------------------------------------------------------------------

function renderAttachments() {
  const box = $('attachments');
  box.replaceChildren();
  box.hidden = !attached.length;
  if (attached.length) {
    box.append(thumbnails(attached, (k) => {
      attached.splice(k, 1);
      renderAttachments();
    }));
  }
}

async function attach(files) {
  for (const f of files) {
    if (attached.length >= kMaxImages) {
      notice(`At most ${kMaxImages} images per message.`);
      break;
    }
    try {
      attached.push(await imageFromFile(f));
      notice('');
    } catch (e) {
      notice(e.message || String(e));
    }
  }
  renderAttachments();
}

$('file').accept = ACCEPT.join(',');
$('attach').addEventListener('click', () => $('file').click());
$('file').addEventListener('change', () => {
  attach([...$('file').files]);
  $('file').value = '';  // the same file may be chosen again
});
$('input').addEventListener('paste', (e) => {
  const files = imageFiles(e.clipboardData);
  if (!files.length) return;  // text pastes as usual
  e.preventDefault();
  attach(files);
});
for (const type of ['dragenter', 'dragover']) {
  document.addEventListener(type, (e) => {
    if (e.dataTransfer && [...e.dataTransfer.types].includes('Files')) {
      e.preventDefault();
      $('app').classList.add('dropping');
    }
  });
}
document.addEventListener('dragleave', (e) => {
  if (!e.relatedTarget) $('app').classList.remove('dropping');
});
document.addEventListener('drop', (e) => {
  $('app').classList.remove('dropping');
  const files = imageFiles(e.dataTransfer);
  if (!files.length) return;
  e.preventDefault();
  attach(files);
});

function regenerate(conv) {
  if (running) return;
  if (conv.messages.length && conv.messages[conv.messages.length - 1].role === 'assistant') {
    conv.messages.pop();
  }
  complete(conv);
}

function editMessage(conv, i, node) {
  if (running) return;
  const area = el('textarea', 'edit-area');
  area.value = conv.messages[i].content;
  const save = actionButton('Send', () => {
    if (running || (!area.value.trim() && !(conv.messages[i].images || []).length)) return;
    const images = conv.messages[i].images;  // an edit changes the text; the images stay
    conv.messages.splice(i);
    const m = { role: 'user', content: area.value };
    if (images && images.length) m.images = images;
    conv.messages.push(m);
    if (i === 0) conv.title = '';  // named again after its new first message
    complete(conv);
  });
  save.classList.add('primary');
  const cancel = actionButton('Cancel', () => renderMessages());
  const row = el('div', 'actions');
  row.append(save, cancel);
  node.replaceChildren(area, row);
  area.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      save.click();
    } else if (e.key === 'Escape') {
      cancel.click();
    }
  });
  area.focus();
}

function resizeInput() {
  const t = $('input');
  t.style.height = 'auto';
  t.style.height = Math.min(t.scrollHeight, 240) + 'px';
}

$('input').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    send();
  }
});
$('input').addEventListener('input', resizeInput);
$('send').addEventListener('click', send);
$('stop').addEventListener('click', () => {
  if (running) running.controller.abort();
});

// ---- settings -------------------------------------------------------------------------------

function showSettings() {
  const s = store.settings;
  $('set-system').value = s.system;
  for (const k of SETTING_KEYS) $('set-' + k).value = s[k] === null ? '' : String(s[k]);
  $('set-thinking').checked = s.thinking;
  $('settings').showModal();
}

function readSettings() {
  const s = store.settings;
  s.system = $('set-system').value;
  for (const k of SETTING_KEYS) {
    const v = $('set-' + k).value.trim();
    const n = Number(v);
    s[k] = v === '' || !Number.isFinite(n) ? null : n;
  }
  s.thinking = $('set-thinking').checked;
  store.save();
}

$('open-settings').addEventListener('click', showSettings);
// Read at once on Done (the dialog's close event comes a task later); Escape closes too.
$('settings-close').addEventListener('click', () => {
  readSettings();
  $('settings').close();
});
$('settings').addEventListener('close', readSettings);
$('settings-reset').addEventListener('click', () => {
  $('set-system').value = '';
  for (const k of SETTING_KEYS) $('set-' + k).value = '';
  $('set-thinking').checked = true;
});

// ---- start ----------------------------------------------------------------------------------

setSidebar(!narrow.matches);
narrow.addEventListener('change', () => setSidebar(!narrow.matches));
renderAll();
loadInfo();
$('input').focus();
