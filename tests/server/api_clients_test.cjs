// The official clients of the two other APIs against a live `qwen35 serve` on the bundled
// trained model: the `openai` npm client's Responses API (client.responses, what Codex speaks)
// and `@anthropic-ai/sdk`'s Messages API (client.messages, what Claude Code speaks), streamed
// and not, with tools and thinking; greedy answers are compared with the chat endpoint's. And
// images through both clients on a random-weight VLM (images()).
//   node tests/server/api_clients_test.cjs QWEN35_BINARY NODE_MODULES_DIR
// Exit code 0 when every check passes.
'use strict';
const path = require('path');

const [binary, modules] = process.argv.slice(2);
const OpenAI = require(path.join(modules, 'openai'));
const Anthropic = require(path.join(modules, '@anthropic-ai/sdk')).default;
const { check, finish, startServer, stopServer } = require('./live_server.cjs');

const MODEL = path.join(__dirname, '..', '..', 'models', 'qwen35-tiny-kjv');
const NAME = 'qwen35-tiny-kjv';
const blank = (s) => !s || s.trim() === '';
const visible = (s) => (blank(s) ? '' : s);
const weather = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] };

async function chat(client, body) {
  const r = await client.chat.completions.create({ model: NAME, temperature: 0, ...body });
  const m = r.choices[0].message;
  return { text: visible(m.content), reasoning: visible(m.reasoning_content), usage: r.usage,
           finish: r.choices[0].finish_reason };
}

function responsesText(r) {
  let text = '', reasoning = '';
  for (const item of r.output) {
    if (item.type === 'message') for (const c of item.content) text += c.text;
    if (item.type === 'reasoning') for (const s of item.summary) reasoning += s.text;
  }
  return { text, reasoning };
}

async function responses(openai) {
  const input = 'Hello there';
  const want = await chat(openai, { messages: [{ role: 'user', content: input }], max_tokens: 32 });
  const r = await openai.responses.create({ model: NAME, input, max_output_tokens: 32, temperature: 0 });
  const got = responsesText(r);
  check(r.object === 'response' && r.id.startsWith('resp_'), 'responses.create: a response');
  check(got.text === want.text && got.reasoning === want.reasoning, 'responses.create == chat (greedy)');
  check(r.output_text === got.text, 'responses.create: output_text');
  check(r.usage.input_tokens === want.usage.prompt_tokens &&
        r.usage.output_tokens === want.usage.completion_tokens, 'responses usage == chat usage');
  check(r.status === (want.finish === 'length' ? 'incomplete' : 'completed'), 'responses status');

  // Streamed: the raw events, then the client's own accumulator (it checks their consistency).
  const events = [];
  const stream = await openai.responses.create({
    model: NAME, input, max_output_tokens: 32, temperature: 0, stream: true });
  for await (const e of stream) events.push(e);
  check(events[0].type === 'response.created' && events[1].type === 'response.in_progress',
        'responses stream: created, in_progress');
  check(events.every((e, i) => e.sequence_number === i), 'responses stream: sequence numbers');
  const last = events[events.length - 1];
  check(['response.completed', 'response.incomplete'].includes(last.type), 'responses stream: completed');
  const deltas = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
  check(deltas === want.text, 'responses stream text == chat');
  const helper = openai.responses.stream({ model: NAME, input, max_output_tokens: 32, temperature: 0 });
  const final = await helper.finalResponse();
  check(responsesText(final).text === want.text, 'responses.stream finalResponse == chat');

  // A function tool round trip: the call and its output as history, then the answer.
  const tools = [{ type: 'function', name: 'get_weather', description: 'weather', parameters: weather,
                   strict: false }];
  const first = await openai.responses.create({
    model: NAME, tools, input: 'Weather in Paris?', max_output_tokens: 16, temperature: 0 });
  check(first.status === 'completed' || first.status === 'incomplete', 'responses with tools');
  const history = [
    { role: 'user', content: 'Weather in Paris?' },
    { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
    { type: 'function_call_output', call_id: 'call_1', output: 'sunny' },
  ];
  const second = await openai.responses.create({
    model: NAME, tools, input: history, max_output_tokens: 16, temperature: 0 });
  const wantTool = await chat(openai, {
    max_tokens: 16, tools: [{ type: 'function', function: { name: 'get_weather', description: 'weather',
                                                            parameters: weather } }],
    messages: [{ role: 'user', content: 'Weather in Paris?' },
               { role: 'assistant', content: '', tool_calls: [{ id: 'call_1', type: 'function',
                 function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
               { role: 'tool', tool_call_id: 'call_1', content: 'sunny' }] });
  check(responsesText(second).text === wantTool.text, 'function_call_output round trip == chat');

  // A real round trip, once the chat path can force a call (constrained decoding): the model's
  // function_call item goes back with its output in the next request.
  const forced = { model: NAME, tools, input: 'Weather in Paris?', tool_choice: 'required',
                   reasoning: { effort: 'none' }, max_output_tokens: 160, temperature: 0 };
  let call = null;
  try {
    const fr = await openai.responses.create(forced);
    call = fr.output.find((o) => o.type === 'function_call');
  } catch (e) {
    if (!(e.status === 400 && /not supported/.test(e.message))) throw e;
    console.log('skip: forced tool calls (the chat path refuses them)');
  }
  if (call) {
    check(call.name === 'get_weather' && typeof JSON.parse(call.arguments) === 'object' &&
          call.call_id.startsWith('call_'), 'tool_choice required: a function_call item');
    const fs = await openai.responses.stream(forced).finalResponse();
    const scall = fs.output.find((o) => o.type === 'function_call');
    check(scall && scall.arguments === call.arguments, 'streamed function_call == whole');
    const next = await openai.responses.create({
      model: NAME, tools, max_output_tokens: 16, temperature: 0, reasoning: { effort: 'none' },
      input: [{ role: 'user', content: 'Weather in Paris?' }, call,
              { type: 'function_call_output', call_id: call.call_id, output: 'sunny' }] });
    check(next.status === 'completed' || next.status === 'incomplete', 'function_call_output answered');
  }

  try {
    await openai.responses.create({ model: NAME, input, previous_response_id: 'resp_x' });
    check(false, 'previous_response_id refused');
  } catch (e) {
    check(e.status === 400 && /previous_response_id/.test(e.message), 'previous_response_id refused');
  }
  // Built-in tools the server cannot run are left out of the prompt, and a warning names them.
  const searched = await openai.responses.create({ model: NAME, input, max_output_tokens: 4,
                                                   tools: [{ type: 'web_search_preview' }] });
  check(Array.isArray(searched.warnings) && /web_search_preview/.test(searched.warnings[0]),
        'built-in tools left out with a warning');
}

function messageText(m) {
  let text = '', thinking = '';
  const calls = [];
  for (const b of m.content) {
    if (b.type === 'text') text += b.text;
    if (b.type === 'thinking') thinking += b.thinking;
    if (b.type === 'tool_use') calls.push(b);
  }
  return { text, thinking, calls };
}

async function messages(openai, anthropic) {
  const msgs = [{ role: 'user', content: 'Hello there' }];
  const want = await chat(openai, { messages: msgs, max_tokens: 32,
                                    chat_template_kwargs: { enable_thinking: false } });
  const m = await anthropic.messages.create({ model: NAME, messages: msgs, max_tokens: 32, temperature: 0 });
  check(m.type === 'message' && m.role === 'assistant' && m.id.startsWith('msg_'), 'messages.create');
  check(messageText(m).text === want.text, 'messages.create == chat (greedy)');
  check(m.usage.input_tokens + m.usage.cache_read_input_tokens === want.usage.prompt_tokens &&
        m.usage.output_tokens === want.usage.completion_tokens, 'messages usage == chat usage');
  check(m.stop_reason === (want.finish === 'length' ? 'max_tokens' : 'end_turn'), 'messages stop_reason');

  // Thinking enabled, with a budget: the thinking block holds chat's reasoning.
  const wantThink = await chat(openai, { messages: msgs, max_tokens: 40, thinking_token_budget: 16,
                                         chat_template_kwargs: { enable_thinking: true } });
  const t = await anthropic.messages.create({ model: NAME, messages: msgs, max_tokens: 40, temperature: 0,
                                              thinking: { type: 'enabled', budget_tokens: 16 } });
  check(messageText(t).thinking === wantThink.reasoning && messageText(t).text === wantThink.text,
        'messages thinking == chat reasoning');

  // Streamed: raw events, then the SDK's MessageStream accumulator.
  const raw = await anthropic.messages.create({ model: NAME, messages: msgs, max_tokens: 32, temperature: 0,
                                                stream: true });
  const types = [];
  let text = '';
  for await (const e of raw) {
    types.push(e.type);
    if (e.type === 'content_block_delta' && e.delta.type === 'text_delta') text += e.delta.text;
  }
  check(types[0] === 'message_start' && types[types.length - 1] === 'message_stop' &&
        types[types.length - 2] === 'message_delta', 'messages stream: event order');
  check(text === want.text, 'messages stream text == chat');
  const s = anthropic.messages.stream({ model: NAME, messages: msgs, max_tokens: 40, temperature: 0,
                                        thinking: { type: 'enabled', budget_tokens: 16 } });
  const fm = await s.finalMessage();
  check(messageText(fm).thinking === wantThink.reasoning && messageText(fm).text === wantThink.text,
        'messages.stream finalMessage (thinking) == chat');

  // Tools: a request with tools, and a tool_use / tool_result round trip as history.
  const tools = [{ name: 'get_weather', description: 'weather', input_schema: weather }];
  const tr = await anthropic.messages.create({ model: NAME, tools, messages: msgs, max_tokens: 16, temperature: 0 });
  check(['end_turn', 'max_tokens', 'tool_use'].includes(tr.stop_reason), 'messages with tools');
  const round = await anthropic.messages.create({ model: NAME, tools, max_tokens: 16, temperature: 0, messages: [
    { role: 'user', content: 'Weather in Paris?' },
    { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'sunny' }] }] });
  const wantRound = await chat(openai, {
    max_tokens: 16, chat_template_kwargs: { enable_thinking: false },
    tools: [{ type: 'function', function: { name: 'get_weather', description: 'weather', parameters: weather } }],
    messages: [{ role: 'user', content: 'Weather in Paris?' },
               { role: 'assistant', content: '', tool_calls: [{ id: 'toolu_1', type: 'function',
                 function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
               { role: 'tool', tool_call_id: 'toolu_1', content: 'sunny' }] });
  check(messageText(round).text === wantRound.text, 'tool_result round trip == chat');

  // A real tool_use round trip when the chat path can force a call.
  let use = null;
  try {
    const fu = await anthropic.messages.create({ model: NAME, tools, tool_choice: { type: 'any' },
      messages: [{ role: 'user', content: 'Weather in Paris?' }], max_tokens: 160, temperature: 0 });
    check(fu.stop_reason === 'tool_use', 'tool_choice any: stop_reason tool_use');
    use = fu.content.find((b) => b.type === 'tool_use');
  } catch (e) {
    if (!(e.status === 400 && /not supported/.test(e.message))) throw e;
    console.log('skip: forced tool use (the chat path refuses it)');
  }
  if (use) {
    check(use.name === 'get_weather' && typeof use.input === 'object' && use.id.startsWith('toolu_'),
          'tool_choice any: a tool_use block');
    const sm = await anthropic.messages.stream({ model: NAME, tools, tool_choice: { type: 'any' },
      messages: [{ role: 'user', content: 'Weather in Paris?' }], max_tokens: 160, temperature: 0 }).finalMessage();
    const suse = sm.content.find((b) => b.type === 'tool_use');
    check(suse && JSON.stringify(suse.input) === JSON.stringify(use.input), 'streamed tool_use == whole');
    const after = await anthropic.messages.create({ model: NAME, tools, max_tokens: 16, temperature: 0,
      messages: [{ role: 'user', content: 'Weather in Paris?' }, { role: 'assistant', content: [use] },
                 { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'sunny' }] }] });
    check(after.type === 'message', 'tool_result answered');
  }

  const count = await anthropic.messages.countTokens({ model: NAME, messages: msgs });
  check(count.input_tokens === want.usage.prompt_tokens, 'count_tokens == prompt tokens');

  try {
    await anthropic.messages.create({ model: NAME, messages: [{ role: 'user', content: [{ type: 'image',
      source: { type: 'base64', media_type: 'image/png', data: 'AA==' } }] }], max_tokens: 4 });
    check(false, 'image blocks refused by a text-only model');
  } catch (e) {
    check(e.status === 400 && e.error && e.error.type === 'error' &&
          e.error.error.type === 'invalid_request_error' && /no vision tower/.test(e.error.error.message),
          'image blocks refused by a text-only model, Anthropic error format');
  }
}

// Images through both clients, on a random-weight VLM (`qwen35 synth --preset tiny` has a vision
// tower): chat image_url and Responses input_image (openai), an image block (@anthropic-ai/sdk).
// The fixture PNG is 24 x 16: smart_resize makes it 320 x 224 pixels, 20 x 14 patches and
// 10 x 7 = 70 image tokens, which each usage counts.
async function images() {
  const fs = require('fs');
  const os = require('os');
  const { execFileSync } = require('child_process');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qwen35-vlm-'));
  execFileSync(binary, ['synth', '--preset', 'tiny', '--quiet', '--out', path.join(dir, 'm')]);
  const server = await startServer(binary, ['-m', path.join(dir, 'm'), '--parallel', '2', '--ctx', '1024', '-t', '2']);
  const openai = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'none', maxRetries: 0 });
  const anthropic = new Anthropic({ baseURL: server.base, apiKey: 'none', maxRetries: 0 });
  const png = fs.readFileSync(path.join(__dirname, '..', 'fixtures', 'images', 'png_rgb.png')).toString('base64');
  const url = `data:image/png;base64,${png}`;
  const tokenize = async (body) => (await (await fetch(`${server.base}/tokenize`, {
    method: 'POST', body: JSON.stringify(body) })).json()).count;
  try {
    const content = [{ type: 'text', text: 'What is this?' }, { type: 'image_url', image_url: { url, detail: 'low' } }];
    const chat = await openai.chat.completions.create({
      model: 'm', messages: [{ role: 'user', content }], max_tokens: 6, temperature: 0 });
    check(chat.choices[0].finish_reason === 'length', 'image chat: an answer');
    check(chat.usage.prompt_tokens_details.image_tokens === 70, 'image chat: usage counts 70 image tokens');
    const count = await tokenize({ messages: [{ role: 'user', content }] });
    check(chat.usage.prompt_tokens === count, 'image chat: prompt_tokens == /tokenize');

    const r = await openai.responses.create({ model: 'm', max_output_tokens: 6, temperature: 0, input: [{
      role: 'user', content: [{ type: 'input_text', text: 'What is this?' }, { type: 'input_image', image_url: url, detail: 'auto' }] }] });
    check(r.status === 'incomplete' && r.output.length > 0, 'image responses: an answer');
    check(r.usage.input_tokens === count, 'image responses: input_tokens count the image');

    const blocks = [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: png } },
                    { type: 'text', text: 'What is this?' }];
    const msg = await anthropic.messages.create({ model: 'm', max_tokens: 6, temperature: 0,
                                                  messages: [{ role: 'user', content: blocks }] });
    check(msg.stop_reason === 'max_tokens' && msg.content.length > 0, 'image messages: an answer');
    const mcount = await tokenize({ chat_template_kwargs: { enable_thinking: false }, messages: [{ role: 'user',
      content: [{ type: 'image_url', image_url: { url } }, { type: 'text', text: 'What is this?' }] }] });
    check(msg.usage.input_tokens + (msg.usage.cache_read_input_tokens || 0) === mcount && mcount > 70,
          'image messages: input_tokens count the image');
    try {
      await openai.chat.completions.create({ model: 'm', max_tokens: 2, messages: [{ role: 'user', content: [
        { type: 'image_url', image_url: { url: 'https://example.com/cat.png' } }] }] });
      check(false, 'image chat: a remote URL is refused');
    } catch (e) {
      check(e.status === 400 && /fetches nothing/.test(e.message), 'image chat: a remote URL is refused');
    }
  } finally {
    check(await stopServer(server) === 0, 'image server: exit 0 on SIGTERM');
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

async function main() {
  await images();
  const server = await startServer(binary, ['-m', MODEL, '--parallel', '4', '--ctx', '2048', '-t', '2',
                                            '--api-key', 'sekret']);
  const openai = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'sekret', maxRetries: 0 });
  // The Anthropic client sends x-api-key (and anthropic-version).
  const anthropic = new Anthropic({ baseURL: server.base, apiKey: 'sekret', maxRetries: 0 });
  try {
    await responses(openai);
    await messages(openai, anthropic);
    const bad = new Anthropic({ baseURL: server.base, apiKey: 'wrong', maxRetries: 0 });
    try {
      await bad.messages.create({ model: NAME, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
      check(false, 'wrong x-api-key refused');
    } catch (e) {
      check(e.status === 401 && e.error.error.type === 'authentication_error', 'wrong x-api-key refused');
    }
  } finally {
    check(await stopServer(server) === 0, 'exit 0 on SIGTERM');
  }
  finish('api clients test: all checks passed');
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
