// Model output -> DOM. Markdown goes through marked, code through highlight.js, and the HTML
// they make through DOMPurify before it reaches the page. Raw HTML in the model's text is shown
// as text (the `html` renderer escapes it), so `<img onerror=...>` or `<script>` from a model
// is something the reader sees, never something the browser runs; DOMPurify then removes
// whatever else could run (javascript: links, event attributes). Everything that is not
// Markdown (the reasoning, tool calls, user messages) is set as textContent.

const { marked, hljs, DOMPurify } = window;

function escapeHtml(s) {
  return s.replace(/[&<>"']/g, (c) => ({
    '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;',
  })[c]);
}

marked.use({
  gfm: true,
  breaks: false,
  headerIds: false,
  mangle: false,
  langPrefix: 'hljs language-',
  renderer: {
    html(html) {
      return escapeHtml(html);
    },
  },
  // Only fences that name a language are highlighted: guessing the language of every block
  // on every streamed token would cost far more than the rendering.
  highlight(code, lang) {
    const name = (lang || '').trim().split(/\s+/)[0];
    if (!name || !hljs.getLanguage(name)) return null;
    try {
      return hljs.highlight(name, code, true).value;
    } catch (e) {
      return null;
    }
  },
});

DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  if (node.tagName === 'A' && node.getAttribute('href')) {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer');
  }
});

const PURIFY = {
  USE_PROFILES: { html: true },
  FORBID_TAGS: ['style', 'form', 'input', 'button', 'textarea', 'select', 'iframe'],
  FORBID_ATTR: ['style'],
};

export function markdownToHtml(text) {
  let html;
  try {
    html = marked.parse(text);
  } catch (e) {
    html = '<pre>' + escapeHtml(text) + '</pre>';
  }
  return DOMPurify.sanitize(html, PURIFY);
}

export function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

export async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch (e) {
    // Not a secure context (a LAN address over http): the old way still works.
    const t = el('textarea');
    t.value = text;
    t.className = 'offscreen';
    document.body.appendChild(t);
    t.select();
    let ok = false;
    try {
      ok = document.execCommand('copy');
    } catch (e2) { /* ignore */ }
    t.remove();
    return ok;
  }
}

export function copyButton(getText, label = 'Copy') {
  const b = el('button', 'copy', label);
  b.type = 'button';
  b.addEventListener('click', async () => {
    const ok = await copyText(getText());
    b.textContent = ok ? 'Copied' : 'Copy failed';
    setTimeout(() => { b.textContent = label; }, 1200);
  });
  return b;
}

// Sets rendered Markdown into `target` and gives each code block a copy button.
export function renderMarkdown(target, text) {
  target.innerHTML = markdownToHtml(text);
  for (const pre of target.querySelectorAll('pre')) {
    const code = pre.querySelector('code') || pre;
    const wrap = el('div', 'code-block');
    pre.replaceWith(wrap);
    wrap.append(copyButton(() => code.textContent), pre);
  }
}

function prettyArguments(args) {
  try {
    return JSON.stringify(JSON.parse(args), null, 2);
  } catch (e) {
    return args;
  }
}

export function renderToolCalls(target, calls) {
  target.replaceChildren();
  for (const call of calls) {
    const box = el('div', 'tool-call');
    const head = el('div', 'tool-head');
    head.append(el('span', 'tool-label', 'tool call'), el('span', 'tool-name', call.function.name));
    box.append(head, el('pre', 'tool-args', prettyArguments(call.function.arguments)));
    target.append(box);
  }
}

function fmt(n, digits = 0) {
  return Number(n).toLocaleString('en-US', { maximumFractionDigits: digits });
}

// "12 prompt tokens (8 cached) · 48 tokens · 95.1 tokens/s · first token 120 ms"
export function statsText(m) {
  const s = m.stats || {};
  const parts = [];
  if (s.prompt_tokens !== undefined) {
    let p = fmt(s.prompt_tokens) + ' prompt tokens';
    if (s.cached_tokens !== undefined) p += ' (' + fmt(s.cached_tokens) + ' cached)';
    parts.push(p);
  }
  if (s.completion_tokens !== undefined) parts.push(fmt(s.completion_tokens) + ' tokens');
  if (s.tps !== undefined) parts.push(fmt(s.tps, 1) + ' tokens/s');
  if (s.ttft_ms !== undefined) parts.push('first token ' + fmt(s.ttft_ms) + ' ms');
  if (m.finish === 'stopped') parts.push('stopped');
  else if (m.finish === 'abort') parts.push('ended by the server');
  else if (m.finish === 'length') parts.push('cut at max tokens');
  return parts.join(' · ');
}
