#!/usr/bin/env python3
"""resumed == fresh for coding agents' multi-turn sessions (issue 46).

  tests/agents/resume_test.py QWEN35 [MODEL_DIR]

Three sessions in the shapes the agents send (recorded from their proxy logs by
tests/agents/agents_test.py, cut down to a few hundred tokens): Claude Code's (Messages), Codex's
(Responses) and Qwen Code's / OpenCode's (chat). Each turn resends the whole conversation: system
prompt or developer instructions, tools, the user's turn, the agent's tool call, the tool's
result, the answer, the next user turn. Every turn is replayed greedy against a warm server,
where turns 2 and 3 resume from the prefix cache (checked: their cached-token counts are
positive), and against a server without a prefix cache, where every prompt is computed from its
first token (as on a fresh server). Each turn's output (text, reasoning, tool calls, token ids
where the API returns them, output token count) must be the same bit for bit.
"""
import copy
import http.client
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODEL = 'qwen35-tiny-kjv'
CAP = 24  # output tokens per turn: the replay is about the prompts

# Shared text: an agent's long system prompt and its environment block, in brief.
SYSTEM = ('You are an interactive coding agent that helps users with software engineering tasks. '
          'Use the tools available to you to read files and run commands. Be concise: answer in '
          'fewer than four lines unless asked for detail. Never guess file contents; read them. '
          'When a tool fails, say what failed and try another way. ' * 3)
ENV = ('<environment_context>\n  <cwd>/work/project</cwd>\n  <shell>bash</shell>\n'
       '  <current_date>2026-12-07</current_date>\n</environment_context>')
NOTES = 'In the beginning was the Word, and the Word was with God, and the Word was God.'
PROPS = {'file_path': {'type': 'string', 'description': 'The absolute path to the file to read'},
         'offset': {'type': 'integer', 'description': 'The line to start reading from'},
         'limit': {'type': 'integer', 'description': 'The number of lines to read'}}
READ_SCHEMA = {'type': 'object', 'properties': PROPS, 'required': ['file_path'],
               'additionalProperties': False}
GLOB_SCHEMA = {'type': 'object', 'properties': {'pattern': {'type': 'string'},
                                                'path': {'type': 'string'}},
               'required': ['pattern']}
CMD_SCHEMA = {'type': 'object', 'properties': {'cmd': {'type': 'string',
                                                       'description': 'Shell command to execute.'},
                                               'workdir': {'type': 'string'}},
              'required': ['cmd'], 'additionalProperties': False}


def messages_session():
    """Claude Code: system blocks, Read/Glob tools, a later system message, tool_use and
    tool_result blocks."""
    base = {'model': MODEL, 'max_tokens': CAP, 'temperature': 0,
            'system': [{'type': 'text', 'text': "You are Claude Code, Anthropic's official CLI."},
                       {'type': 'text', 'text': SYSTEM + '\n' + ENV}],
            'tools': [{'name': 'Read', 'description': 'Reads a file.', 'input_schema': READ_SCHEMA},
                      {'name': 'Glob', 'description': 'Finds files by pattern.',
                       'input_schema': GLOB_SCHEMA}]}
    # Claude Code sends a system message after the user's turn for a model it does not know.
    msgs = [{'role': 'user', 'content': [{'type': 'text', 'text': 'What is in notes.txt?'}]},
            {'role': 'system', 'content': 'The model is not a Claude model: keep tool use simple.'}]
    turns = [dict(base, messages=copy.deepcopy(msgs))]
    msgs += [{'role': 'assistant', 'content': [
                {'type': 'tool_use', 'id': 'toolu_01', 'name': 'Read',
                 'input': {'file_path': '/work/project/notes.txt'}}]},
             {'role': 'user', 'content': [
                 {'type': 'tool_result', 'tool_use_id': 'toolu_01', 'content': NOTES}]}]
    turns.append(dict(base, messages=copy.deepcopy(msgs)))
    msgs += [{'role': 'assistant', 'content': [{'type': 'text', 'text': 'It holds one verse.'}]},
             {'role': 'user', 'content': [{'type': 'text', 'text': 'Say it again, shorter.'}]}]
    turns.append(dict(base, messages=copy.deepcopy(msgs)))
    return turns


def responses_session():
    """Codex: developer instructions as input items, function, namespace and web_search tools,
    function_call and function_call_output."""
    base = {'model': MODEL, 'max_output_tokens': CAP, 'temperature': 0, 'store': False,
            'tool_choice': 'auto', 'parallel_tool_calls': True,
            'tools': [{'type': 'function', 'name': 'exec_command', 'strict': False,
                       'description': 'Runs a command in a PTY.', 'parameters': CMD_SCHEMA},
                      {'type': 'function', 'name': 'view_image', 'strict': False,
                       'description': 'View a local image file.',
                       'parameters': {'type': 'object', 'properties': {'path': {'type': 'string'}},
                                      'required': ['path'], 'additionalProperties': False}},
                      # Codex's default tool list also holds a namespace and web search.
                      {'type': 'namespace', 'name': 'multi_agent_v1',
                       'description': 'Tools for sub-agents.',
                       'tools': [{'type': 'function', 'name': 'close_agent', 'strict': False,
                                  'description': 'Close an agent.',
                                  'parameters': {'type': 'object',
                                                 'properties': {'target': {'type': 'string'}},
                                                 'required': ['target'],
                                                 'additionalProperties': False}}]},
                      {'type': 'web_search', 'external_web_access': False}]}
    items = [{'type': 'message', 'role': 'developer',
              'content': [{'type': 'input_text', 'text': SYSTEM}]},
             {'type': 'message', 'role': 'user', 'content': [{'type': 'input_text', 'text': ENV}]},
             {'type': 'message', 'role': 'user',
              'content': [{'type': 'input_text', 'text': 'What is in notes.txt?'}]}]
    turns = [dict(base, input=copy.deepcopy(items))]
    items += [{'type': 'function_call', 'call_id': 'call_01', 'name': 'exec_command',
               'arguments': '{"cmd":"cat notes.txt"}'},
              {'type': 'function_call_output', 'call_id': 'call_01', 'output': NOTES}]
    turns.append(dict(base, input=copy.deepcopy(items)))
    items += [{'type': 'message', 'role': 'assistant',
               'content': [{'type': 'output_text', 'text': 'It holds one verse.'}]},
              {'type': 'message', 'role': 'user',
               'content': [{'type': 'input_text', 'text': 'Say it again, shorter.'}]}]
    turns.append(dict(base, input=copy.deepcopy(items)))
    return turns


def chat_session():
    """Qwen Code and OpenCode: system message, function tools, tool_calls and role tool."""
    base = {'model': MODEL, 'max_tokens': CAP, 'temperature': 0, 'return_token_ids': True,
            'tools': [{'type': 'function', 'function': {'name': 'read_file',
                                                        'description': 'Reads a file.',
                                                        'parameters': READ_SCHEMA}},
                      {'type': 'function', 'function': {'name': 'glob',
                                                        'description': 'Finds files.',
                                                        'parameters': GLOB_SCHEMA}}]}
    msgs = [{'role': 'system', 'content': SYSTEM},
            {'role': 'user', 'content': ENV + '\nWhat is in notes.txt?'}]
    turns = [dict(base, messages=copy.deepcopy(msgs))]
    msgs += [{'role': 'assistant', 'content': '', 'tool_calls': [
                {'id': 'call_01', 'type': 'function', 'function': {
                    'name': 'read_file', 'arguments': '{"file_path":"/work/project/notes.txt"}'}}]},
             {'role': 'tool', 'tool_call_id': 'call_01', 'content': NOTES}]
    turns.append(dict(base, messages=copy.deepcopy(msgs)))
    msgs += [{'role': 'assistant', 'content': 'It holds one verse.'},
             {'role': 'user', 'content': 'Say it again, shorter.'}]
    turns.append(dict(base, messages=copy.deepcopy(msgs)))
    return turns


SESSIONS = [('messages', '/v1/messages', messages_session()),
            ('responses', '/v1/responses', responses_session()),
            ('chat', '/v1/chat/completions', chat_session())]


def start(binary, model, *flags):
    proc = subprocess.Popen([binary, 'serve', '-m', model, '--port', '0', *flags],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log = ''
    while True:
        line = proc.stderr.readline()
        if not line:
            raise SystemExit('server exited: ' + log)
        log += line
        m = re.search(r'listening on http://127\.0\.0\.1:(\d+)', line)
        if m:
            port = int(m.group(1))
            break
    for _ in range(3000):
        try:
            c = http.client.HTTPConnection('127.0.0.1', port, timeout=10)
            c.request('GET', '/health')
            if c.getresponse().status == 200:
                return proc, port
        except OSError:
            pass
        time.sleep(0.02)
    raise SystemExit('server not healthy')


def post(port, path, body):
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=300)
    c.request('POST', path, json.dumps(body), {'Content-Type': 'application/json'})
    r = c.getresponse()
    data = json.loads(r.read())
    if r.status != 200:
        raise SystemExit('%s -> %d: %s' % (path, r.status, data))
    return data


def outcome(api, r):
    """(what the model produced, cached prompt tokens) of one answer."""
    if api == 'messages':
        return ({'content': r['content'], 'stop': r['stop_reason'],
                 'tokens': r['usage']['output_tokens']}, r['usage']['cache_read_input_tokens'])
    if api == 'responses':
        out = [{k: v for k, v in item.items() if k not in ('id', 'call_id')}
               for item in r['output']]
        return ({'output': out, 'status': r['status'], 'tokens': r['usage']['output_tokens']},
                r['usage']['input_tokens_details']['cached_tokens'])
    ch = r['choices'][0]
    msg = {k: v for k, v in ch['message'].items() if k != 'tool_calls'}
    calls = [c['function'] for c in ch['message'].get('tool_calls') or []]
    return ({'message': msg, 'calls': calls, 'finish': ch['finish_reason'],
             'ids': ch.get('token_ids'), 'tokens': r['usage']['completion_tokens']},
            r['usage']['prompt_tokens_details']['cached_tokens'])


def main():
    binary = sys.argv[1]
    model = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, 'models', MODEL)
    warm, warm_port = start(binary, model, '--parallel', '1')
    fresh, fresh_port = start(binary, model, '--parallel', '1', '--no-prefix-cache')
    failures = 0
    try:
        for api, path, turns in SESSIONS:
            for n, body in enumerate(turns, 1):
                got, cached = outcome(api, post(warm_port, path, body))
                want, cached_ref = outcome(api, post(fresh_port, path, body))
                ok = got == want and cached_ref == 0 and (n == 1 or cached > 0)
                if api == 'chat' and not got['ids']:
                    ok = False  # the chat answer must carry its token ids
                print('%s: %s turn %d: cached %d, %s' % ('ok' if ok else 'FAIL', api, n, cached,
                                                       'same output' if got == want else
                                                       'warm %s != fresh %s' % (got, want)))
                failures += not ok
    finally:
        for p in (warm, fresh):
            p.terminate()
            p.wait()
    if failures:
        print('%d turn(s) failed' % failures)
        return 1
    print('resumed == fresh for every turn')
    return 0


if __name__ == '__main__':
    sys.exit(main())
