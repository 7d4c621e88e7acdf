// Shared by the Node.js tests that drive a live `qwen35 serve` (openai_client_test.cjs,
// web_page_test.cjs): a check counter, and starting and stopping the server.
'use strict';
const { spawn } = require('child_process');

let failures = 0;
// Records one check; the test ends with finish().
function check(cond, what) {
  if (!cond) {
    failures++;
    console.error('FAIL: ' + what);
  } else {
    console.log('ok: ' + what);
  }
}

// Exits 1 when a check failed, else prints `passed`.
function finish(passed) {
  if (failures) {
    console.error(failures + ' check(s) failed');
    process.exit(1);
  }
  console.log(passed);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// `binary serve --port 0 ARGS...`; resolves once /health answers 200 (the model is loaded), with
// the process, the port and the base URL. QWEN35_TEST_DEVICE=vulkan serves on that device (the
// tests' Vulkan runs in scripts/test).
async function startServer(binary, args) {
  const device = process.env.QWEN35_TEST_DEVICE;
  if (device && !args.includes('--device')) args = [...args, '--device', device];
  const proc = spawn(binary, ['serve', '--port', '0', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const port = await new Promise((resolve, reject) => {
    proc.stderr.on('data', (d) => {
      log += d.toString();
      const m = log.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) resolve(Number(m[1]));
    });
    proc.on('exit', (c) => reject(new Error('server exited ' + c + ': ' + log)));
  });
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 6000; i++) {
    try {
      if ((await fetch(base + '/health')).status === 200) break;
    } catch (e) { /* not yet */ }
    await sleep(20);
  }
  return { proc, port, base };
}

// SIGTERM; resolves with the exit code.
function stopServer(s) {
  s.proc.kill('SIGTERM');
  return new Promise((r) => s.proc.on('exit', r));
}

module.exports = { check, finish, sleep, startServer, stopServer };
