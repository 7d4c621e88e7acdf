// The web chat page in a real browser: Debian's chromium, headless, driven by puppeteer-core,
// against a live `qwen35 serve` on the bundled trained model. It sends messages and reads the
// answers and their figures, watches an answer stream and stops it (and checks on /metrics that
// the server freed the slot), reloads and finds the conversation, regenerates, edits and
// resends, makes and deletes a conversation; on an answer served by request interception it
// opens the thinking block and checks that hostile HTML and scripts render as text; it asks
// for the key of a server started with --api-key; and on a random-weight image-text checkpoint
// (`qwen35 synth`, which writes a vision tower) it attaches an image, sends it as an image_url
// part, sees the answer and the thumbnail, finds the image again after a reload, and on the
// text-only model reads the server's refusal; a Qwen3 checkpoint answers through the page. Screenshots (light and dark, wide and narrow)
// of both conversations go to SCREENSHOT_DIR.
//   node tests/server/web_page_test.cjs QWEN35_BINARY NODE_MODULES_DIR SCREENSHOT_DIR
// Exit code 0 when every check passes. CHROMIUM overrides the browser (default /usr/bin/chromium).
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');

const [binary, modules, shots] = process.argv.slice(2);
const puppeteer = require(path.join(modules, 'puppeteer-core'));
const { check, finish, sleep, startServer: startLive, stopServer } = require('./live_server.cjs');
const MODEL = path.join(__dirname, '..', '..', 'models', 'qwen35-tiny-kjv');
const IMAGE = path.join(__dirname, '..', 'fixtures', 'images', 'jpeg_444.jpg');

async function startServer(extra) {
  return startLive(binary, ['-m', MODEL, '--parallel', '2', '--ctx', '4096', '-t', '2', ...extra]);
}

async function metric(base, name) {
  const text = await (await fetch(base + '/metrics')).text();
  const m = text.match(new RegExp('^' + name + ' ([0-9.e+-]+)$', 'm'));
  return m ? Number(m[1]) : -1;
}

// The page's view of the current conversation.
function conversationView(page) {
  return page.evaluate(() => ({
    messages: [...document.querySelectorAll('#messages .msg')].map((m) => ({
      role: m.classList.contains('user') ? 'user' : 'assistant',
      text: (m.querySelector('.bubble, .content') || m).textContent,
      thinking: m.querySelector('.thinking-body') ? m.querySelector('.thinking-body').textContent : '',
      stats: m.querySelector('.stats') ? m.querySelector('.stats').textContent : '',
    })),
    conversations: document.querySelectorAll('#conversations li').length,
    running: !document.getElementById('stop').hidden,
  }));
}

async function typeAndSend(page, text) {
  await page.click('#input');
  await page.keyboard.type(text);
  await page.keyboard.press('Enter');
}

const waitIdle = (page, timeout = 60000) =>
  page.waitForFunction(() => document.getElementById('stop').hidden, { timeout });

async function setSettings(page, values) {
  await page.click('#open-settings');
  for (const [k, v] of Object.entries(values)) {
    await page.$eval('#set-' + k, (e, x) => { e.value = x; }, String(v));
  }
  await page.click('#settings-close');
}

async function screenshots(page, name) {
  const background = {};
  for (const scheme of ['light', 'dark']) {
    await page.emulateMediaFeatures([{ name: 'prefers-color-scheme', value: scheme }]);
    background[scheme] = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
    for (const [w, width, height] of [['wide', 1280, 800], ['narrow', 390, 844]]) {
      await page.setViewport({ width, height, deviceScaleFactor: 1 });
      await sleep(100);
      await page.screenshot({ path: path.join(shots, `${name}-${scheme}-${w}.png`) });
    }
  }
  await page.emulateMediaFeatures([{ name: 'prefers-color-scheme', value: 'light' }]);
  await page.setViewport({ width: 1280, height: 800 });
  check(background.light === 'rgb(255, 255, 255)' && background.dark !== background.light,
    `light and dark themes follow the system setting (${name}: ${background.light}, ${background.dark})`);
}

// The real model's answers. The bundled model always closes its think block at once (its
// reasoning is a newline), and its answers end after a few dozen tokens, too soon to press Stop:
// for the first answer and the Stop step the test adds `ignore_eos` to the request on its way
// out, so the server streams until max_tokens or until it is cancelled.
async function chatFlow(browser, server) {
  const page = await browser.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  page.on('console', (m) => {
    if (m.type() === 'error' && !/Failed to load resource/.test(m.text())) problems.push(m.text());
  });
  await page.setViewport({ width: 1280, height: 800 });
  const res = await page.goto(server.base + '/', { waitUntil: 'load' });
  check(res.status() === 200 && /script-src 'self'/.test(res.headers()['content-security-policy']),
    'page loads with a Content-Security-Policy');
  await page.waitForFunction(() => document.getElementById('model-name').textContent === 'qwen35-tiny-kjv');
  const ctx = await page.$eval('#model-ctx', (e) => e.textContent);
  check(/4,096/.test(ctx), 'context size from /props shown: ' + ctx);

  // The test adds `ignore_eos` to the page's requests on their way out while `longer` is on.
  const longer = (req) => {
    if (req.method() === 'POST' && req.url().endsWith('/v1/chat/completions')) {
      req.continue({ postData: JSON.stringify({ ...JSON.parse(req.postData()), ignore_eos: true }) });
    } else {
      req.continue();
    }
  };
  await page.setRequestInterception(true);
  page.on('request', longer);

  // A whole answer (200 tokens, long enough for the browser to time), with its figures.
  await setSettings(page, { max_tokens: 200 });
  await typeAndSend(page, 'Tell me a fortune.');
  await waitIdle(page);
  let view = await conversationView(page);
  const answer = view.messages[1];
  check(view.messages.length === 2 && view.messages[0].text === 'Tell me a fortune.', 'user message shown');
  check(answer.text.trim().length > 0, 'answer shown: ' + answer.text.trim().slice(0, 60));
  check(/^\d+ prompt tokens \(\d+ cached\) · 200 tokens · [\d,.]+ tokens\/s · first token \d+ ms · cut at max tokens$/
    .test(answer.stats), 'per-answer figures: ' + answer.stats);
  check(await page.$eval('.msg.assistant details.thinking', (d) => d.hidden),
    'no thinking block for an empty think block');

  // Streaming and Stop: the text grows while the answer runs; Stop aborts the stream, the
  // server cancels the request and frees its slot.
  await setSettings(page, { max_tokens: 3000 });
  const cancelled = await metric(server.base, 'qwen35_engine_cancelled_total');
  await typeAndSend(page, 'And the LORD said unto Moses, tell me the whole story.');
  const lastLength = () => page.evaluate(() => {
    const all = document.querySelectorAll('#messages .msg.assistant');
    return all[all.length - 1].querySelector('.content').textContent.length;
  });
  await page.waitForFunction(() => {
    const all = document.querySelectorAll('#messages .msg.assistant');
    return all[all.length - 1].querySelector('.content').textContent.length > 0;
  }, { timeout: 30000 });
  const first = await lastLength();
  await page.waitForFunction((n) => {
    const all = document.querySelectorAll('#messages .msg.assistant');
    return all[all.length - 1].querySelector('.content').textContent.length > n;
  }, { timeout: 30000 }, first);
  check(!(await page.$eval('#stop', (b) => b.hidden)), 'streamed text grows while the answer runs');
  check(await metric(server.base, 'qwen35_slots_used') === 1, 'the answer holds a slot');
  await page.click('#stop');
  await waitIdle(page, 10000);
  let used = -1;
  for (let i = 0; i < 200 && used !== 0; i++) {
    used = await metric(server.base, 'qwen35_slots_used');
    if (used !== 0) await sleep(25);
  }
  check(used === 0, 'slot freed after Stop (qwen35_slots_used 0)');
  check(await metric(server.base, 'qwen35_engine_cancelled_total') === cancelled + 1,
    'the server cancelled the request (qwen35_engine_cancelled_total)');
  view = await conversationView(page);
  check(/stopped/.test(view.messages[view.messages.length - 1].stats), 'answer marked stopped');
  page.off('request', longer);
  await page.setRequestInterception(false);

  // Reload: the conversation comes back from localStorage.
  const before = await conversationView(page);
  await page.reload({ waitUntil: 'load' });
  await page.waitForSelector('#messages .msg');
  const after = await conversationView(page);
  check(after.conversations === 1 && after.messages.length === 4 &&
    JSON.stringify(after.messages) === JSON.stringify(before.messages), 'conversation kept across a reload');

  // Regenerate replaces the last answer; edit-and-resend cuts the conversation at the edit.
  await setSettings(page, { max_tokens: 100 });
  await page.click('#messages .msg.assistant:last-child .actions button:last-child');
  await waitIdle(page);
  view = await conversationView(page);
  check(view.messages.length === 4 && !/stopped/.test(view.messages[3].stats), 'regenerate');
  // The stopped answer's prompt (over 200 tokens) left a prefix-cache snapshot; the same prompt
  // again resumes from it, and the figures say so.
  const cached = /\((\d+) cached\)/.exec(view.messages[3].stats);
  check(cached && Number(cached[1]) >= 64, 'cached prompt tokens shown: ' + view.messages[3].stats);
  await page.click('#messages .msg.user .actions button');  // Edit on the first message
  await page.$eval('#messages .edit-area', (e) => { e.value = 'Who are you?'; });
  await page.click('#messages .msg.user .actions button.primary');
  await waitIdle(page);
  view = await conversationView(page);
  check(view.messages.length === 2 && view.messages[0].text === 'Who are you?', 'edit and resend');

  // Shift+Enter is a new line, Enter sends.
  await page.click('#input');
  await page.keyboard.type('Give me a verse');
  await page.keyboard.down('Shift');
  await page.keyboard.press('Enter');
  await page.keyboard.up('Shift');
  await page.keyboard.type('from the Bible.');
  check(await page.$eval('#input', (e) => e.value) === 'Give me a verse\nfrom the Bible.' &&
    (await conversationView(page)).messages.length === 2, 'Shift+Enter makes a new line');
  await page.keyboard.press('Enter');
  await waitIdle(page);
  check((await conversationView(page)).messages.length === 4, 'Enter sends');
  await screenshots(page, 'chat');

  // A phone-width window: the conversation list is a drawer, opened by the menu button, closed
  // by a tap beside it; the chat keeps the width.
  await page.setViewport({ width: 390, height: 844 });
  await page.waitForFunction(() => !document.getElementById('app').classList.contains('sidebar-open'));
  const visible = (sel) => page.$eval(sel, (e) => e.getBoundingClientRect().width > 0);
  const sideClosed = !(await visible('#sidebar'));
  const inputWide = await page.$eval('#input', (e) => e.getBoundingClientRect().width > 250);
  await page.click('#toggle-sidebar');
  const sideOpen = (await visible('#sidebar')) && (await visible('#scrim'));
  await page.mouse.click(370, 400);  // on the scrim, right of the drawer
  check(sideClosed && inputWide && sideOpen && !(await visible('#sidebar')),
    'narrow window: the list is a drawer');
  await page.setViewport({ width: 1280, height: 800 });

  // New chat, then delete it.
  await page.click('#new-chat');
  await typeAndSend(page, 'Hello');
  await waitIdle(page);
  check((await conversationView(page)).conversations === 2, 'new conversation');
  await page.click('#conversations li.active .conv-delete');
  view = await conversationView(page);
  check(view.conversations === 1 && view.messages[0].text === 'Who are you?', 'delete conversation');
  check(problems.length === 0, 'no page errors or CSP violations: ' + problems.join(' | '));
  await page.close();
}

// A hostile answer, served by intercepting the completion request: raw HTML, a script, a
// javascript: link, a tool call. None of it may run or become markup.
async function hostileFlow(browser, server) {
  const context = await browser.createBrowserContext();  // its own localStorage
  const page = await context.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push(e.message));
  await page.setRequestInterception(true);
  const content = 'Look: <img src=x onerror="window.__pwned=1"> and <script>window.__pwned=2</script>\n\n' +
    '[click](javascript:window.__pwned=3) <a href="javascript:window.__pwned=4">a</a>\n\n' +
    '```js\nconst answer = 42;\n```\n';
  const events = [
    { choices: [{ index: 0, delta: { role: 'assistant', reasoning_content: '<b onmouseover="window.__pwned=5">bold?</b>' } }] },
    { choices: [{ index: 0, delta: { content } }] },
    { choices: [{ index: 0, delta: { tool_calls: [{ index: 0, id: 'call_1', type: 'function',
      function: { name: 'get_weather', arguments: '{"city": "<svg onload=alert(1)>"}' } }] } }] },
    { choices: [{ index: 0, delta: {}, finish_reason: 'tool_calls' }] },
    { choices: [], usage: { prompt_tokens: 9, completion_tokens: 30, total_tokens: 39,
      prompt_tokens_details: { cached_tokens: 0 } } },
  ];
  const sse = events.map((e) => 'data: ' + JSON.stringify(e) + '\n\n').join('') + 'data: [DONE]\n\n';
  let sent = null;
  page.on('request', (req) => {
    if (req.url().endsWith('/v1/chat/completions')) {
      sent = JSON.parse(req.postData());
      req.respond({ status: 200, contentType: 'text/event-stream', body: sse });
    } else {
      req.continue();
    }
  });
  await page.goto(server.base + '/', { waitUntil: 'load' });
  await page.waitForFunction(() => document.getElementById('model-name').textContent !== '…');
  // The settings go into the request.
  await setSettings(page, { system: 'Be brief.', temperature: 0.3, top_p: 0.9, top_k: 5, max_tokens: 50 });
  await page.click('#open-settings');
  await page.click('#set-thinking');
  await page.click('#settings-close');
  await typeAndSend(page, 'say something dangerous');
  await waitIdle(page);
  check(sent && sent.stream === true && sent.stream_options.include_usage === true &&
    JSON.stringify(sent.messages) === JSON.stringify([{ role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'say something dangerous' }]) &&
    sent.temperature === 0.3 && sent.top_p === 0.9 && sent.top_k === 5 && sent.max_tokens === 50 &&
    sent.chat_template_kwargs.enable_thinking === false, 'system prompt and settings sent: ' +
    JSON.stringify(sent));
  const inspect = () => page.evaluate(() => {
    const m = document.querySelector('#messages .msg.assistant');
    const onAttrs = [...document.querySelectorAll('#messages *')]
      .filter((e) => [...e.attributes].some((a) => /^on/i.test(a.name))).length;
    return {
      text: m.querySelector('.content').textContent,
      thinking: m.querySelector('.thinking-body').textContent,
      markup: m.querySelectorAll('img, script, svg, iframe, b').length,
      onAttrs,
      jsLinks: [...m.querySelectorAll('a')].filter((a) => /^\s*javascript:/i.test(a.getAttribute('href') || '')).length,
      code: !!m.querySelector('.code-block button.copy') &&
        !!m.querySelector('.code-block code .hljs-keyword'),
      tool: (m.querySelector('.tool-call .tool-name') || {}).textContent,
      toolArgs: (m.querySelector('.tool-call .tool-args') || {}).textContent,
      pwned: window.__pwned,
    };
  });
  // Copy on a code block puts the code on the clipboard.
  await context.overridePermissions(server.base, ['clipboard-read', 'clipboard-write',
    'clipboard-sanitized-write']);
  await page.click('.msg.assistant .code-block button.copy');
  check(await page.evaluate(() => navigator.clipboard.readText()) === 'const answer = 42;\n',
    'copy button copies the code');
  // The reasoning is a collapsed block of its own; a click opens it.
  const closed = await page.$eval('.msg.assistant details.thinking', (d) => !d.hidden && !d.open);
  await page.click('.msg.assistant details.thinking summary');
  const opened = await page.$eval('.msg.assistant details.thinking', (d) =>
    d.open && d.querySelector('.thinking-body').getBoundingClientRect().height > 0);
  check(closed && opened, 'thinking block expands');
  await screenshots(page, 'intercepted');
  for (const when of ['rendered', 'after a reload']) {
    const r = await inspect();
    check(r.text.includes('<img src=x onerror="window.__pwned=1">') &&
      r.text.includes('<script>window.__pwned=2</script>'), `hostile HTML shown as text (${when})`);
    check(r.thinking.includes('<b onmouseover'), `hostile reasoning shown as text (${when})`);
    check(r.markup === 0 && r.onAttrs === 0 && r.jsLinks === 0, `no markup from the model (${when})`);
    check(r.pwned === undefined, `no script ran (${when})`);
    check(r.code, `code block highlighted with a copy button (${when})`);
    check(r.tool === 'get_weather' && r.toolArgs.includes('"city": "<svg onload=alert(1)>"'),
      `tool call shown as a block (${when})`);
    await page.reload({ waitUntil: 'load' });
    await page.waitForSelector('#messages .msg.assistant');
  }
  check(problems.length === 0, 'no page errors: ' + problems.join(' | '));
  await context.close();
}

// With --api-key the page loads, asks for the key, and uses it.
async function keyFlow(browser) {
  const server = await startServer(['--api-key', 'sekret']);
  try {
    const context = await browser.createBrowserContext();
    const page = await context.newPage();
    const res = await page.goto(server.base + '/', { waitUntil: 'load' });
    check(res.status() === 200, 'page loads without the key');
    await page.waitForFunction(() => document.getElementById('key-dialog').open);
    await page.type('#key-input', 'wrong');
    await page.click('#key-save');
    await page.waitForFunction(() => document.getElementById('key-dialog').open &&
      !document.getElementById('key-error').hidden);
    check(true, 'a wrong key is refused');
    await page.$eval('#key-input', (e) => { e.value = ''; });
    await page.type('#key-input', 'sekret');
    await page.click('#key-save');
    await page.waitForFunction(() => document.getElementById('model-name').textContent === 'qwen35-tiny-kjv');
    await setSettings(page, { max_tokens: 8 });
    await typeAndSend(page, 'Hello');
    await waitIdle(page);
    const v = await conversationView(page);
    check(v.messages.length === 2 && /prompt tokens/.test(v.messages[1].stats), 'chat with the key');
    await context.close();
  } finally {
    check(await stopServer(server) === 0, 'key server exits 0');
  }
}

// Images on the page: attach (the file picker), the thumbnail before sending and in the
// history, the request's image_url part, an answer, the image kept across a reload; and the
// text-only model's refusal shown as the answer's error.
async function imageFlow(browser, textServer) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qwen35-vlm-'));
  const synth = require('child_process').spawnSync(binary,
    ['synth', '--preset', 'tiny', '--quiet', '--out', path.join(dir, 'm')]);
  check(synth.status === 0, 'synth writes a tiny image-text checkpoint');
  const vlm = await startLive(binary, ['-m', path.join(dir, 'm'), '--parallel', '1', '-t', '2']);
  try {
    const page = await browser.newPage();
    const problems = [];
    page.on('pageerror', (e) => problems.push('page error: ' + e.message));
    await page.setViewport({ width: 1280, height: 800 });
    await page.goto(vlm.base + '/', { waitUntil: 'load' });
    const sent = [];
    await page.setRequestInterception(true);
    page.on('request', (req) => {
      if (req.method() === 'POST' && req.url().endsWith('/v1/chat/completions')) sent.push(JSON.parse(req.postData()));
      req.continue();
    });
    await setSettings(page, { max_tokens: 8 });
    await (await page.$('#file')).uploadFile(IMAGE);
    await page.waitForSelector('#attachments .thumb img');
    check(!(await page.$eval('#attachments', (e) => e.hidden)), 'an attached image shows in the composer');
    await typeAndSend(page, 'What is in the image?');
    await waitIdle(page);
    const body = sent[sent.length - 1];
    const parts = body && body.messages[body.messages.length - 1].content;
    check(Array.isArray(parts) && parts[0].type === 'image_url' &&
      /^data:image\/jpeg;base64,/.test(parts[0].image_url.url) && parts[1].text === 'What is in the image?',
      'the message goes out as an image_url part and a text part');
    let view = await conversationView(page);
    check(view.messages.length === 2 && !/error/i.test(view.messages[1].stats), 'two messages after sending');
    const error = await page.$eval('.msg.assistant .error', (e) => e.textContent);
    check(error === '', 'the image-text model answers without an error: ' + error);
    check(await page.$$eval('.msg.user .thumb img', (a) => a.length) === 1, 'the thumbnail is in the history');
    check(await page.$eval('#attachments', (e) => e.hidden), 'the composer is empty again');
    await screenshots(page, 'image');
    await page.reload({ waitUntil: 'load' });
    await page.waitForSelector('.msg.user .thumb img');
    check(true, 'the image is kept across a reload (localStorage)');
    // The text-only model refuses the image with a message the page shows.
    const text = await browser.newPage();
    await text.goto(textServer.base + '/', { waitUntil: 'load' });
    await (await text.$('#new-chat')).click();
    await (await text.$('#file')).uploadFile(IMAGE);
    await text.waitForSelector('#attachments .thumb img');
    await typeAndSend(text, 'What is this?');
    await waitIdle(text);
    const refusal = await text.$eval('.msg.assistant .error', (e) => e.textContent);
    check(/vision|image/i.test(refusal), 'a text-only model\'s refusal is shown: ' + refusal);
    check(problems.length === 0, 'no page errors: ' + problems.join('; '));
    await text.close();
    await page.close();
  } finally {
    check(await stopServer(vlm) === 0, 'the image-text server exits 0 on SIGTERM');
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

// A Qwen3 checkpoint (`synth --preset qwen3-tiny`, Qwen3's own chat template) answers through
// the page as the Qwen3.5 ones do.
async function qwen3Flow(browser) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qwen35-q3-'));
  const synth = require('child_process').spawnSync(binary,
    ['synth', '--preset', 'qwen3-tiny', '--quiet', '--out', path.join(dir, 'm')]);
  check(synth.status === 0, 'synth writes a tiny Qwen3 checkpoint');
  const q3 = await startLive(binary, ['-m', path.join(dir, 'm'), '--parallel', '1', '-t', '2']);
  try {
    const page = await browser.newPage();
    const problems = [];
    page.on('pageerror', (e) => problems.push('page error: ' + e.message));
    await page.goto(q3.base + '/', { waitUntil: 'load' });
    await setSettings(page, { max_tokens: 8 });
    await typeAndSend(page, 'Hello');
    await waitIdle(page);
    const view = await conversationView(page);
    check(view.messages.length === 2 && view.messages[1].role === 'assistant' &&
      !/error/i.test(view.messages[1].stats), 'the Qwen3 model answers through the page');
    const error = await page.$eval('.msg.assistant .error', (e) => e.textContent);
    check(error === '', 'the Qwen3 answer has no error: ' + error);
    check(problems.length === 0, 'no page errors on Qwen3: ' + problems.join('; '));
    await page.close();
  } finally {
    check(await stopServer(q3) === 0, 'the Qwen3 server exits 0 on SIGTERM');
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

async function main() {
  fs.mkdirSync(shots, { recursive: true });
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'qwen35-chromium-'));
  const server = await startServer([]);
  const t0 = Date.now();
  // Flags for a closed network and a root user: no sandbox, no background fetches that would
  // stall on the missing network.
  const browser = await puppeteer.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    userDataDir: profile,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  try {
    await chatFlow(browser, server);
    await hostileFlow(browser, server);
    await keyFlow(browser);
    await imageFlow(browser, server);
    await qwen3Flow(browser);
  } finally {
    await browser.close();
    check(await stopServer(server) === 0, 'server exits 0 on SIGTERM');
    fs.rmSync(profile, { recursive: true, force: true });
  }
  console.log(`browser checks took ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  finish('web page test: all checks passed; screenshots in ' + shots);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
