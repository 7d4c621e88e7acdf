// Structured outputs against an independent validator (issue 19): every schema of
// data/structured_schemas.json, with several seeds at temperature 1, thinking on and off, on the
// bundled trained model and on random-weight tiny Qwen3.5 and Qwen3 checkpoints (random weights
// try every path of the grammar; Qwen3's forced calls are its template's JSON form); each output must parse and validate with ajv (+ ajv-formats). Forced calls
// of strict tools are validated the same way against their function's parameters.
// With QWEN35_TEST_DEVICE set (a server on a Vulkan device, slow on lavapipe): the bundled model
// alone, every fifth schema and every third strict tool, once each (thinking on for every other
// one): what the device changes is the logits the grammar masks (whole rows come back for a
// grammar's rows), not the grammar, which the CPU runs cover whole.
//   node tests/server/structured_outputs_test.cjs QWEN35_BINARY NODE_MODULES_DIR
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');

const [binary, modules] = process.argv.slice(2);
const Ajv2020 = require(path.join(modules, 'ajv/dist/2020')).default;
const addFormats = require(path.join(modules, 'ajv-formats'));
const { check, finish, startServer, stopServer } = require('./live_server.cjs');

const corpus = JSON.parse(fs.readFileSync(path.join(__dirname, 'data', 'structured_schemas.json'), 'utf8'));
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
const SEEDS = [1, 2, 3];
const ON_DEVICE = !!process.env.QWEN35_TEST_DEVICE;
// The (thinking, seed) pairs of the i-th schema or tool: all of them on the CPU; on a device one,
// for every `stride`-th.
function variants(i, seeds, stride) {
  const all = [];
  for (const think of [false, true]) for (const seed of seeds) all.push([think, seed]);
  if (!ON_DEVICE) return all;
  return i % stride === 0 ? [all[(i / stride) % all.length]] : [];
}

async function post(base, route, body) {
  const r = await fetch(base + route, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: r.status, body: await r.json() };
}

// Runs `jobs` (functions returning promises) at most `width` at a time.
async function pool(jobs, width) {
  const out = new Array(jobs.length);
  let next = 0;
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < jobs.length) {
      const i = next++;
      out[i] = await jobs[i]();
    }
  }));
  return out;
}

function validates(schema, value) {
  const validate = ajv.compile(schema);
  return validate(value) ? null : ajv.errorsText(validate.errors);
}

async function schemaCases(base, label, maxTokens, seeds) {
  const jobs = [];
  corpus.forEach(({ name, schema }, i) => {
    for (const [think, seed] of variants(i, seeds, 5))
        jobs.push(async () => {
          const r = await post(base, '/v1/chat/completions', {
            messages: [{ role: 'user', content: 'Fill in the record.' }],
            response_format: { type: 'json_schema', json_schema: { name: 'r', schema, strict: true } },
            max_tokens: maxTokens, temperature: 1, seed, chat_template_kwargs: { enable_thinking: think } });
          const what = `${label} ${name} think=${think} seed=${seed}`;
          if (r.status !== 200) return `${what}: HTTP ${r.status} ${JSON.stringify(r.body)}`;
          const content = r.body.choices[0].message.content;
          let value;
          try {
            value = JSON.parse(content);
          } catch (e) {
            return `${what}: does not parse: ${JSON.stringify(content)}`;
          }
          const err = validates(schema, value);
          return err ? `${what}: ${err}: ${content}` : null;
        });
  });
  const errors = (await pool(jobs, 4)).filter((e) => e);
  for (const e of errors.slice(0, 10)) console.error(e);
  check(errors.length === 0, `${label}: ${jobs.length - errors.length}/${jobs.length} schema outputs parse and validate`);
}

// Forced calls of functions whose parameters are corpus object schemas.
async function toolCases(base, label, maxTokens) {
  // The first 8, and Claude Code's Read with its bounds (issue 46). Strict: only a strict tool's
  // arguments are held to its schema.
  const objects = corpus.filter((c) => c.schema.type === 'object' && c.schema.properties).slice(0, 8)
    .concat(corpus.filter((c) => c.name === 'read_tool'));
  const tools = objects.map((c) => ({ type: 'function', function: { name: 'fn_' + c.name, parameters: c.schema, strict: true } }));
  const jobs = [];
  tools.forEach((t, i) => {
    for (const [think, seed] of variants(i, SEEDS, 3))
        jobs.push(async () => {
          const r = await post(base, '/v1/chat/completions', {
            messages: [{ role: 'user', content: 'Call the tool.' }], tools: [t],
            tool_choice: { type: 'function', function: { name: t.function.name } },
            max_tokens: maxTokens, temperature: 1, seed, chat_template_kwargs: { enable_thinking: think } });
          const what = `${label} ${t.function.name} think=${think} seed=${seed}`;
          if (r.status !== 200) return `${what}: HTTP ${r.status} ${JSON.stringify(r.body)}`;
          const calls = r.body.choices[0].message.tool_calls || [];
          if (calls.length !== 1 || calls[0].function.name !== t.function.name)
            return `${what}: calls ${JSON.stringify(calls)} content ${JSON.stringify(r.body.choices[0].message.content)}`;
          const err = validates(t.function.parameters, JSON.parse(calls[0].function.arguments));
          return err ? `${what}: ${err}: ${calls[0].function.arguments}` : null;
        });
  });
  const errors = (await pool(jobs, 4)).filter((e) => e);
  for (const e of errors.slice(0, 10)) console.error(e);
  check(errors.length === 0, `${label}: ${jobs.length - errors.length}/${jobs.length} forced tool calls validate`);
}

async function main() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qwen35-structured-'));
  const synth = spawnSync(binary, ['synth', '--preset', 'tiny', '--quiet', '--seed', '7', '--out', path.join(dir, 'random')]);
  check(synth.status === 0, 'synth a random tiny checkpoint');
  // A Qwen3 checkpoint: Qwen3's template, whose forced calls are Hermes-style JSON.
  const synth3 = spawnSync(binary, ['synth', '--preset', 'qwen3-tiny', '--quiet', '--seed', '7', '--out', path.join(dir, 'qwen3')]);
  check(synth3.status === 0, 'synth a random qwen3-tiny checkpoint');
  // Random weights rarely end a thinking block or a value by themselves: their outputs run to
  // the budget, where the grammar closes them, so they get a smaller one.
  // (The schemas' grammars do not depend on the family: Qwen3 runs them with one seed.)
  const models = [[path.join(__dirname, '..', '..', 'models', 'qwen35-tiny-kjv'), 'bundled', 160, SEEDS],
                  [path.join(dir, 'random'), 'random', 136, SEEDS],
                  [path.join(dir, 'qwen3'), 'qwen3', 136, [1]]].slice(0, ON_DEVICE ? 1 : 3);
  for (const [model, label, maxTokens, seeds] of models) {
    const t0 = Date.now();
    const server = await startServer(binary, ['-m', model, '--parallel', '4', '--ctx', '1024', '-t', '2']);
    try {
      await schemaCases(server.base, label, maxTokens, seeds);
      await toolCases(server.base, label, maxTokens + 64);
      const obj = await post(server.base, '/v1/completions', { prompt: 'JSON:', max_tokens: 80, temperature: 1, seed: 1, response_format: { type: 'json_object' } });
      let parsed = null;
      try { parsed = JSON.parse(obj.body.choices[0].text); } catch (e) { /* checked below */ }
      check(obj.status === 200 && parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed), `${label}: completions json_object`);
    } finally {
      await stopServer(server);
    }
    console.log(`${label}: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  }
  fs.rmSync(dir, { recursive: true, force: true });
  finish('structured outputs test passed');
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
