// Conversations and settings, kept in the browser's localStorage (nothing is stored on the
// server). What is read back is checked field by field: a damaged or foreign entry is dropped,
// never trusted, so the page always starts. Images are kept within a budget (images.js).
import { fitImages, isImageUrl, kStoreBudget } from './images.js';

const STORE = 'qwen35.chat.v1';

export const SETTING_KEYS = ['temperature', 'top_p', 'top_k', 'max_tokens'];

function str(x) {
  return typeof x === 'string' ? x : '';
}

function num(x) {
  return typeof x === 'number' && Number.isFinite(x) ? x : null;
}

function cleanToolCalls(calls) {
  if (!Array.isArray(calls)) return [];
  return calls
    .filter((c) => c && typeof c === 'object' && c.function && typeof c.function === 'object')
    .map((c) => ({
      id: str(c.id),
      type: 'function',
      function: { name: str(c.function.name), arguments: str(c.function.arguments) },
    }));
}

function cleanStats(s) {
  if (!s || typeof s !== 'object') return null;
  const out = {};
  for (const k of ['prompt_tokens', 'cached_tokens', 'completion_tokens', 'ttft_ms', 'tps']) {
    if (num(s[k]) !== null) out[k] = s[k];
  }
  return out;
}

function cleanMessage(m) {
  if (!m || typeof m !== 'object') return null;
  if (m.role === 'user') {
    const u = { role: 'user', content: str(m.content) };
    const images = Array.isArray(m.images) ? m.images.filter(isImageUrl) : [];
    if (images.length) u.images = images;
    const dropped = num(m.images_dropped);
    if (dropped && dropped > 0) u.images_dropped = Math.floor(dropped);
    return u;
  }
  if (m.role !== 'assistant') return null;
  return {
    role: 'assistant',
    content: str(m.content),
    reasoning: str(m.reasoning),
    tool_calls: cleanToolCalls(m.tool_calls),
    finish: str(m.finish),
    error: str(m.error),
    stats: cleanStats(m.stats),
  };
}

function cleanConversation(c) {
  if (!c || typeof c !== 'object' || typeof c.id !== 'string' || !Array.isArray(c.messages)) {
    return null;
  }
  return {
    id: c.id,
    title: str(c.title),
    updated: num(c.updated) || 0,
    messages: c.messages.map(cleanMessage).filter(Boolean),
  };
}

function cleanSettings(s) {
  const out = { system: '', thinking: true };
  for (const k of SETTING_KEYS) out[k] = null;
  if (!s || typeof s !== 'object') return out;
  out.system = str(s.system);
  out.thinking = s.thinking !== false;
  for (const k of SETTING_KEYS) out[k] = num(s[k]);
  return out;
}

export function newId() {
  return Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
}

export class Store {
  constructor() {
    let raw = null;
    try {
      raw = JSON.parse(localStorage.getItem(STORE) || 'null');
    } catch (e) {
      raw = null;
    }
    raw = raw && typeof raw === 'object' ? raw : {};
    this.conversations = Array.isArray(raw.conversations)
      ? raw.conversations.map(cleanConversation).filter(Boolean)
      : [];
    this.settings = cleanSettings(raw.settings);
    this.currentId = typeof raw.current === 'string' ? raw.current : null;
    if (!this.current()) this.currentId = this.conversations.length ? this.sorted()[0].id : null;
  }

  // The oldest images go first when the browser refuses the whole (its quota may be smaller
  // than the budget): text is never the price of a picture.
  save() {
    let budget = kStoreBudget;
    for (;;) {
      fitImages(this.conversations, budget);
      const data = { conversations: this.conversations, settings: this.settings, current: this.currentId };
      try {
        localStorage.setItem(STORE, JSON.stringify(data));
        return true;
      } catch (e) {
        if (budget === 0) return false;  // full or disabled: the page keeps working, unsaved
        budget = budget < 4096 ? 0 : Math.floor(budget / 2);
      }
    }
  }

  sorted() {
    return [...this.conversations].sort((a, b) => b.updated - a.updated);
  }

  current() {
    return this.conversations.find((c) => c.id === this.currentId) || null;
  }

  // The current conversation, made when there is none.
  ensureCurrent() {
    let c = this.current();
    if (!c) {
      c = { id: newId(), title: '', updated: Date.now(), messages: [] };
      this.conversations.push(c);
      this.currentId = c.id;
    }
    return c;
  }

  startNew() {
    const c = this.current();
    if (c && c.messages.length === 0) return c;  // an empty chat is reused, not piled up
    this.currentId = null;
    return this.ensureCurrent();
  }

  remove(id) {
    this.conversations = this.conversations.filter((c) => c.id !== id);
    if (this.currentId === id) {
      const next = this.sorted()[0];
      this.currentId = next ? next.id : null;
    }
  }

  touch(c) {
    c.updated = Date.now();
    if (!c.title) {
      const first = c.messages.find((m) => m.role === 'user');
      if (first) c.title = first.content.trim().replace(/\s+/g, ' ').slice(0, 60) || (first.images ? 'Image' : '');
    }
  }
}
