// The official `openai` npm client against a live `qwen35 serve` on the bundled trained model:
// chat, streaming, completions, logprobs, stop, n, tools, reasoning, errors; then on a Qwen3
// checkpoint (`synth --preset qwen3-tiny`: Qwen3's chat template, Hermes-style JSON tool calls):
// chat, thinking off, streaming, forced tool calls whole and streamed, a call in the history.
//   node tests/server/openai_client_test.cjs QWEN35_BINARY NODE_MODULES_DIR
// Exit code 0 when every check passes.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');

const [binary, modules] = process.argv.slice(2);
const OpenAI = require(path.join(modules, 'openai'));
const { spawnSync } = require('child_process');
const { check, finish, startServer, stopServer } = require('./live_server.cjs');

// The client against a random-weight Qwen3 checkpoint: its text is noise, but every answer must
// come back in the client's types, and forced calls must be calls the client can read.
async function qwen3Checks(dir) {
  const synth = spawnSync(binary, ['synth', '--preset', 'qwen3-tiny', '--quiet', '--out', path.join(dir, 'q3')]);
  check(synth.status === 0, 'qwen3: synth a random qwen3-tiny checkpoint');
  const server = await startServer(binary, ['-m', path.join(dir, 'q3'), '--parallel', '2', '--ctx', '1024', '-t', '2']);
  const client = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'none', maxRetries: 0 });
  const messages = [{ role: 'user', content: 'Weather in Paris?' }];
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'weather',
    parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } },
      required: ['city'] } } }];
  try {
    const chat = await client.chat.completions.create({ model: 'q3', messages, max_tokens: 8, seed: 1 });
    check(chat.choices.length === 1 && chat.usage.completion_tokens <= 8, 'qwen3: chat');
    const off = await client.chat.completions.create({
      model: 'q3', messages, max_tokens: 8, seed: 1, chat_template_kwargs: { enable_thinking: false } });
    check(off.choices[0].message.reasoning_content === null, 'qwen3: no reasoning when thinking is off');
    let streamed = '';
    const stream = await client.chat.completions.create({ model: 'q3', messages, max_tokens: 8, seed: 1, stream: true });
    for await (const c of stream) for (const ch of c.choices) streamed += ch.delta.content || '';
    check(streamed === (chat.choices[0].message.content || ''), 'qwen3: stream == non-stream');

    const forced = { model: 'q3', messages, tools, tool_choice: 'required', max_tokens: 60, seed: 4 };
    const tc = await client.chat.completions.create(forced);
    const calls = tc.choices[0].message.tool_calls || [];
    let args = null;
    try { args = JSON.parse(calls[0].function.arguments); } catch (e) { /* checked below */ }
    check(tc.choices[0].finish_reason === 'tool_calls' && calls.length >= 1 &&
          calls.every((c) => c.type === 'function' && c.function.name === 'get_weather') &&
          args !== null && typeof args.city === 'string', 'qwen3: forced tool call');
    const parts = [];
    let finishReason = null;
    const cs = await client.chat.completions.create({ ...forced, stream: true });
    for await (const c of cs)
      for (const ch of c.choices) {
        for (const d of ch.delta.tool_calls || []) {
          parts[d.index] = parts[d.index] || { name: '', arguments: '' };
          parts[d.index].name += d.function.name || '';
          parts[d.index].arguments += d.function.arguments || '';
        }
        if (ch.finish_reason) finishReason = ch.finish_reason;
      }
    check(finishReason === 'tool_calls' &&
          JSON.stringify(parts) === JSON.stringify(calls.map((c) => ({ name: c.function.name, arguments: c.function.arguments }))),
          'qwen3: streamed forced tool call == non-streamed');
    const conv = await client.chat.completions.create({ model: 'q3', tools, max_tokens: 4, messages: [
      ...messages,
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
        function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: 'sunny' }] });
    check(conv.choices.length === 1, 'qwen3: tool call history');
  } finally {
    check(await stopServer(server) === 0, 'qwen3: exit 0 on SIGTERM');
  }
}

async function main() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qwen35-openai-'));
  // The bundled trained model, so that what the client reads is text (served under the name 'm').
  fs.cpSync(path.join(__dirname, '..', '..', 'models', 'qwen35-tiny-kjv'), path.join(dir, 'm'), { recursive: true });
  const server = await startServer(binary, ['-m', path.join(dir, 'm'), '--parallel', '4', '--ctx', '2048', '-t', '2']);
  const { port } = server;
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'none', maxRetries: 0 });
  const messages = [{ role: 'user', content: 'Hello there' }];
  try {
    const models = await client.models.list();
    check(models.data.length === 1 && models.data[0].id === 'm', 'models.list');

    const chat = await client.chat.completions.create({ model: 'm', messages, max_tokens: 10, seed: 1 });
    check(chat.choices.length === 1 && typeof chat.choices[0].message.role === 'string', 'chat');
    check(chat.usage.completion_tokens <= 10 && chat.usage.prompt_tokens > 0, 'chat usage');

    // Thinking on: the generation prompt opens <think>, so the text goes to reasoning_content
    // until the model closes it (a random model rarely does); content stays a string.
    const think = await client.chat.completions.create({ model: 'm', messages, max_tokens: 8, seed: 2 });
    const m = think.choices[0].message;
    check(typeof m.reasoning_content === 'string' || m.reasoning_content === null, 'reasoning field');
    const nothink = await client.chat.completions.create({
      model: 'm', messages, max_tokens: 8, seed: 2, chat_template_kwargs: { enable_thinking: false } });
    check(nothink.choices[0].message.reasoning_content === null, 'no reasoning when thinking is off');

    let streamed = '', reasoning = '', chunks = 0, usage = null, finish = null;
    const stream = await client.chat.completions.create({
      model: 'm', messages, max_tokens: 12, seed: 3, stream: true, stream_options: { include_usage: true } });
    for await (const c of stream) {
      chunks++;
      if (c.usage) usage = c.usage;
      for (const ch of c.choices) {
        streamed += ch.delta.content || '';
        reasoning += ch.delta.reasoning_content || '';
        if (ch.finish_reason) finish = ch.finish_reason;
      }
    }
    check(chunks > 2 && usage && usage.completion_tokens <= 12 && finish, 'chat streaming + usage');
    const same = await client.chat.completions.create({ model: 'm', messages, max_tokens: 12, seed: 3 });
    check((same.choices[0].message.content || '') === streamed &&
          (same.choices[0].message.reasoning_content || '') === reasoning, 'stream == non-stream');

    const lp = await client.chat.completions.create({
      model: 'm', messages, max_tokens: 5, logprobs: true, top_logprobs: 3, temperature: 0 });
    const content = lp.choices[0].logprobs.content;
    check(content.length === lp.usage.completion_tokens && content.every((e) => e.top_logprobs.length === 3),
          'chat logprobs');

    const cmp = await client.completions.create({
      model: 'm', prompt: 'Once upon', max_tokens: 8, temperature: 0, logprobs: 2, n: 2, ignore_eos: true });
    check(cmp.choices.length === 2 && cmp.choices[0].text === cmp.choices[1].text, 'completions n=2 greedy');
    check(cmp.choices[0].logprobs.tokens.length === 8 && cmp.choices[0].finish_reason === 'length',
          'completions logprobs + length');
    const stopText = cmp.choices[0].text.slice(3, 5);
    if (stopText.length === 2) {
      const cut = await client.completions.create({
        model: 'm', prompt: 'Once upon', max_tokens: 8, temperature: 0, stop: [stopText], ignore_eos: true });
      check(cut.choices[0].finish_reason === 'stop' &&
            cut.choices[0].text === cmp.choices[0].text.slice(0, cmp.choices[0].text.indexOf(stopText)), 'stop');
    }
    let ctext = '';
    const cstream = await client.completions.create({
      model: 'm', prompt: 'Once upon', max_tokens: 8, temperature: 0, stream: true, ignore_eos: true });
    for await (const c of cstream) ctext += c.choices.length ? c.choices[0].text : '';
    check(ctext === cmp.choices[0].text, 'completions streaming');

    // Tools: the request renders with the tool list; whatever the random model says parses.
    const tools = [{ type: 'function', function: { name: 'get_weather', description: 'weather',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
    const tc = await client.chat.completions.create({ model: 'm', messages, tools, max_tokens: 8 });
    check(['stop', 'length', 'tool_calls'].includes(tc.choices[0].finish_reason), 'tools request');
    // A conversation holding an assistant tool call and the tool's answer renders and runs.
    const conv = await client.chat.completions.create({ model: 'm', tools, max_tokens: 4, messages: [
      { role: 'user', content: 'weather in Paris?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
        function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: 'sunny' }] });
    check(conv.choices.length === 1, 'tool call history');

    for (const [what, body] of [
      ['negative max_tokens', { model: 'm', messages, max_tokens: -1 }],
      ['temperature < 0', { model: 'm', messages, temperature: -1 }],
      ['unknown role', { model: 'm', messages: [{ role: 'wizard', content: 'x' }] }],
      ['empty messages', { model: 'm', messages: [] }],
    ]) {
      try {
        await client.chat.completions.create(body);
        check(false, 'error: ' + what);
      } catch (e) {
        check(e.status === 400 && typeof e.message === 'string' && e.message.length > 0, 'error: ' + what);
      }
    }
    try {
      await client.chat.completions.create({ model: 'gpt-nope', messages });
      check(false, 'error: unknown model');
    } catch (e) {
      // OpenAI answers a model it does not have with 404 model_not_found; the client maps it.
      check(e.status === 404, 'error: unknown model is a 404');
    }
    const health = await fetch(`http://127.0.0.1:${port}/health`);
    check(health.status === 200, 'healthy after errors');
  } finally {
    check(await stopServer(server) === 0, 'exit 0 on SIGTERM');
  }
  try {
    await qwen3Checks(dir);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  finish('openai client test: all checks passed');
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
