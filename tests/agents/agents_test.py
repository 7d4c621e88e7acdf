#!/usr/bin/env python3
"""The real coding agents against `qwen35 serve` on the bundled model (issue 46).

  tests/agents/agents_test.py QWEN35 NODE_MODULES [--only NAME ...] [--keep DIR]

One server (`serve -c 131072`, flags a user would type: the agents' prompts are 10k-33k tokens)
for all agents. Each agent, at the version scripts/test pins, runs non-interactively twice, in a
fresh HOME and working directory, configured as the README says (tests/agents/agents.py):
  plain  one prompt; the agent exits 0 and every request it made was answered 200
  tool   the same through agent_proxy.py, which makes the agent's first request that offers its
         harmless tool (a todo/plan tool) force that tool; the agent runs it and its next
         request carries the result for that very call id (tool_result / role tool /
         function_call_output); the agent exits 0
First it checks that the README's "Coding agents" sections show exactly these settings.
Every agent run has its own deadline (AGENT_S) and the whole test one. On failure it
prints the agent's output tail and the requests the proxy saw, and exits 1.
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from agent_proxy import AgentProxy  # noqa: E402
from agents import AGENTS, agent_env, readme_sections  # noqa: E402

# One agent run's deadline (--agent-timeout, or QWEN35_AGENTS_TIMEOUT for slow machines): on 2
# quiet cores an agent's first prompt (15k-30k tokens) takes about a minute to prefill.
AGENT_S = float(os.environ.get('QWEN35_AGENTS_TIMEOUT', 300))
PROMPT = 'Say hello in five words.'
TOOL_PROMPT = 'Make a short plan for reading the file notes.txt, then say done.'


class Failure(Exception):
    pass


def start_server(binary, model, log_path):
    """`qwen35 serve` on a free port; returns (process, base URL) once /health answers."""
    log = open(log_path, 'w+')
    proc = subprocess.Popen([binary, 'serve', '-m', model, '-c', '131072', '--port', '0'],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            raise Failure('server exited: ' + log.read()[-2000:])
        log.seek(0)
        m = re.search(r'listening on http://127\.0\.0\.1:(\d+)', log.read())
        if m:
            base = 'http://127.0.0.1:' + m.group(1)
            try:
                if urllib.request.urlopen(base + '/health', timeout=5).status == 200:
                    return proc, base
            except OSError:
                pass
        time.sleep(0.1)
    raise Failure('server did not come up within 60 s')


def run_agent(agent, modules, work, base, prompt, out_path):
    """Runs the agent once in a fresh HOME under `work`; returns (exit code, output text)."""
    home = tempfile.mkdtemp(prefix='home-', dir=work)
    # The same working directory for both runs of an agent: it is part of the agent's system
    # prompt, so the second run resumes the first one's prompt from the prefix cache.
    proj = os.path.join(work, agent.name + '-project')
    os.makedirs(proj, exist_ok=True)
    with open(os.path.join(proj, 'notes.txt'), 'w') as f:
        f.write('In the beginning was the Word.\n')
    env = agent_env(agent, home, base)
    argv = [os.path.join(os.path.abspath(modules), '.bin', agent.bin)] + agent.argv(prompt)
    with open(out_path, 'w+') as out:
        proc = subprocess.Popen(argv, cwd=proj, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=AGENT_S)
        except subprocess.TimeoutExpired:
            code = 'timeout after %d s' % AGENT_S
        finally:  # also when the whole test's deadline interrupts the wait
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        out.seek(0)
        return code, out.read()


def describe(proxy):
    lines = []
    for ex in proxy.exchanges:
        b = ex['body'] if isinstance(ex['body'], dict) else {}
        lines.append('  %s %s -> %s%s tools=%d%s' % (
            ex['method'], ex['path'], ex['status'], ' FORCED' if ex['forced'] else '',
            len(b.get('tools') or []), ' error=' + ex['error'] if ex.get('error') else ''))
        if ex['status'] not in (200, None):
            lines.append('    answer: ' + ex['answer'][:600].decode('utf-8', 'replace'))
    return '\n'.join(lines)


def one(agent, modules, work, base, tool):
    """One run of `agent` through a fresh proxy; raises Failure with the evidence."""
    proxy = AgentProxy(base, force=agent.tool if tool else None)
    kind = 'tool' if tool else 'plain'
    out_path = os.path.join(work, '%s-%s.log' % (agent.name, kind))
    t0 = time.monotonic()
    try:
        code, out = run_agent(agent, modules, work, proxy.base, TOOL_PROMPT if tool else PROMPT,
                              out_path)
    finally:
        proxy.close()
    took = time.monotonic() - t0
    with open(out_path[:-4] + '.requests.jsonl', 'w') as f:  # kept with --keep
        for ex in proxy.exchanges:
            f.write(json.dumps({k: (v.decode('utf-8', 'replace') if isinstance(v, bytes) else v)
                                for k, v in ex.items()}) + '\n')
    api_calls = [ex for ex in proxy.exchanges if ex['api'] == agent.api]
    evidence = '\n'.join(['', '  output (last 1500 chars):', out[-1500:], '  requests:',
                          describe(proxy)])
    if code != 0:
        raise Failure('%s %s: exit %s%s' % (agent.name, kind, code, evidence))
    if not api_calls:
        raise Failure('%s %s: no %s request reached the server%s' % (agent.name, kind, agent.api,
                                                                      evidence))
    bad = [ex for ex in proxy.exchanges if ex['status'] != 200]
    if bad:
        raise Failure('%s %s: a request was not answered 200%s' % (agent.name, kind, evidence))
    if tool:
        ids, forced, answered = proxy.round_trip()
        if forced is None:
            raise Failure('%s tool: no request offered %s%s' % (agent.name, agent.tool, evidence))
        if not ids:
            raise Failure('%s tool: the forced answer holds no %s call%s' % (agent.name, agent.tool,
                                                                          evidence))
        if answered is None:
            raise Failure('%s tool: no later request carries the result of %s%s' % (
                agent.name, ids, evidence))
    print('ok: %s %s (exit 0, %d requests, %.1f s)' % (agent.name, kind, len(proxy.exchanges),
                                                         took), flush=True)
    return proxy


def main():
    global AGENT_S
    ap = argparse.ArgumentParser()
    ap.add_argument('binary')
    ap.add_argument('modules')
    ap.add_argument('--model', default=os.path.join(ROOT, 'models', 'qwen35-tiny-kjv'))
    ap.add_argument('--only', action='append', help='run only this agent (repeatable)')
    ap.add_argument('--keep', help='keep the agents\' logs and HOMEs in DIR')
    ap.add_argument('--agent-timeout', type=float, default=AGENT_S, help='seconds per agent run')
    ap.add_argument('--plain-only', action='store_true', help='no tool round trips')
    ap.add_argument('--server', help='use this running server (http://HOST:PORT) instead')
    a = ap.parse_args()
    AGENT_S = a.agent_timeout
    alarm_s = int(5 * AGENT_S)  # the whole test: 8 runs, most of them resumed from the cache
    signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(Failure(
        'the whole test passed its %d s deadline' % alarm_s)))
    signal.alarm(alarm_s)
    work = a.keep or tempfile.mkdtemp(prefix='qwen35-agents-')
    os.makedirs(work, exist_ok=True)
    agents = [g for g in AGENTS if not a.only or g.name in a.only]
    server = None
    try:
        # The README's sections show these very settings (with the server at :8080).
        with open(os.path.join(ROOT, 'README.md')) as f:
            sections = readme_sections(f.read())
        for g in agents:
            missing = g.readme(sections.get(g.package, ''))
            if missing:
                raise Failure('README, %s: lacks %s' % (g.package, '; '.join(missing)))
        print('ok: the README shows each agent\'s settings', flush=True)
        if a.server:
            base = a.server
        else:
            server, base = start_server(a.binary, a.model, os.path.join(work, 'server.log'))
        for g in agents:
            one(g, a.modules, work, base, tool=False)
            if not a.plain_only:
                one(g, a.modules, work, base, tool=True)
    except Failure as e:
        print('FAIL: ' + str(e), file=sys.stderr)
        return 1
    finally:
        signal.alarm(0)
        if server:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    print('agents test passed')
    return 0


if __name__ == '__main__':
    sys.exit(main())
