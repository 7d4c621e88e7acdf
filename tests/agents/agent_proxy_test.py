#!/usr/bin/env python3
"""The agents stage's proxy (agent_proxy.py) against a live `qwen35 serve`, without the agents.

  tests/agents/agent_proxy_test.py QWEN35 [MODEL_DIR]

For each API (Messages, chat, Responses), streamed and not: a request offering two tools passes
through the proxy, which must force the named one only on the first such request; the answer
must come back to the client byte for byte as the server sent it (re-chunked), hold a call of
that tool, and the proxy must find its id; a follow-up request carrying that call's result (in
the API's own shape) must be recognised as the round trip. A request without that tool, and the
second request, go through untouched.
"""
import http.client
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from agent_proxy import AgentProxy, call_ids  # noqa: E402
from resume_test import MODEL, ROOT, start  # noqa: E402

SCHEMA = {'type': 'object', 'properties': {'path': {'type': 'string', 'maxLength': 12}},
          'required': ['path'], 'additionalProperties': False}


def post(port, path, body):
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=120)
    c.request('POST', path, json.dumps(body), {'Content-Type': 'application/json'})
    r = c.getresponse()
    return r.status, r.read()


def requests(api, stream):
    """(path, first request, follow-up maker(call id) -> request) of one API."""
    user = 'Look at the notes.'
    if api == 'messages':
        tools = [{'name': 'ls', 'description': 'lists', 'input_schema': SCHEMA},
                 {'name': 'read', 'description': 'reads', 'input_schema': SCHEMA}]
        first = {'model': MODEL, 'max_tokens': 48, 'temperature': 0, 'stream': stream,
                 'tools': tools, 'messages': [{'role': 'user', 'content': user}]}

        def follow(cid):
            return dict(first, messages=first['messages'] + [
                {'role': 'assistant', 'content': [{'type': 'tool_use', 'id': cid, 'name': 'read',
                                                   'input': {'path': 'a'}}]},
                {'role': 'user', 'content': [{'type': 'tool_result', 'tool_use_id': cid,
                                              'content': 'verse'}]}])
        return '/v1/messages?beta=true', first, follow
    if api == 'chat':
        tools = [{'type': 'function', 'function': {'name': n, 'description': n,
                                                   'parameters': SCHEMA}}
                 for n in ('ls', 'read')]
        first = {'model': MODEL, 'max_tokens': 48, 'temperature': 0, 'stream': stream,
                 'tools': tools, 'messages': [{'role': 'user', 'content': user}]}

        def follow(cid):
            return dict(first, messages=first['messages'] + [
                {'role': 'assistant', 'content': '', 'tool_calls': [
                    {'id': cid, 'type': 'function',
                     'function': {'name': 'read', 'arguments': '{"path":"a"}'}}]},
                {'role': 'tool', 'tool_call_id': cid, 'content': 'verse'}])
        return '/v1/chat/completions', first, follow
    tools = [{'type': 'function', 'name': n, 'description': n, 'parameters': SCHEMA,
              'strict': False} for n in ('ls', 'read')]
    first = {'model': MODEL, 'max_output_tokens': 48, 'temperature': 0, 'stream': stream,
             'tools': tools, 'input': user}

    def follow(cid):
        return dict(first, input=[
            {'role': 'user', 'content': user},
            {'type': 'function_call', 'call_id': cid, 'name': 'read', 'arguments': '{"path":"a"}'},
            {'type': 'function_call_output', 'call_id': cid, 'output': 'verse'}])
    return '/v1/responses', first, follow


def main():
    binary = sys.argv[1]
    model = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, 'models', MODEL)
    server, port = start(binary, model)
    failures = 0

    def check(cond, what):
        nonlocal failures
        failures += not cond
        print(('ok: ' if cond else 'FAIL: ') + what)

    try:
        for api in ('messages', 'chat', 'responses'):
            for stream in (False, True):
                what = '%s%s' % (api, ' streamed' if stream else '')
                proxy = AgentProxy('http://127.0.0.1:%d' % port, force='read')
                try:
                    path, first, follow = requests(api, stream)
                    plain = dict(first, tools=first['tools'][:1])  # no 'read': left alone
                    pport = proxy.port
                    s0, _ = post(pport, path, plain)
                    s1, a1 = post(pport, path, first)
                    ids = call_ids(a1, 'read')
                    check(s0 == 200 and s1 == 200, what + ': answered 200')
                    ex = proxy.exchanges
                    check(not ex[0]['forced'] and ex[1]['forced'], what + ': forced once, there')
                    check(ex[1]['answer'] == a1, what + ': the answer passes unchanged')
                    check(len(ids) == 1, what + ': the forced answer holds one call: %s' % ids)
                    s2, _ = post(pport, path, follow(ids[0] if ids else 'none'))
                    check(s2 == 200 and not ex[2]['forced'], what + ': the follow-up left alone')
                    got_ids, i, j = proxy.round_trip()
                    check(i == 1 and j == 2, what + ': round trip found (%s, %s)' % (i, j))
                finally:
                    proxy.close()
    finally:
        server.terminate()
        server.wait()
    if failures:
        print('%d check(s) failed' % failures)
        return 1
    print('agent proxy test passed')
    return 0


if __name__ == '__main__':
    sys.exit(main())
