"""A logging HTTP proxy between a coding agent and `qwen35 serve`, for tests/agents.

The agent and the server stay real; the proxy only records every request and answer, and, when
asked to, makes the first request that offers a named tool force that tool (again if the agent
gave up on that answer and retried) (tool_choice, and
`strict` on that tool so its arguments follow its schema). That is how a test gets a tool call
out of a 2.7M-parameter model that would otherwise never call one, and then watches the agent
run the tool and send the result back.

It speaks all three APIs the agents use: Anthropic Messages (/v1/messages), OpenAI chat
(/v1/chat/completions) and OpenAI Responses (/v1/responses). Answers are passed through as they
arrive (streams stay streams), re-chunked, so the agent sees the server's bytes unchanged.
"""
import http.client
import http.server
import json
import threading
import urllib.parse

# Hop-by-hop headers (RFC 9110 7.6.1) and the ones the proxy rewrites.
_SKIP_HEADERS = {'connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te',
                 'trailer', 'upgrade', 'content-length', 'host', 'accept-encoding'}
_ANSWER_LOG_BYTES = 4 << 20  # enough for a forced call's stream; longer answers are cut


def api_of(path):
    """'messages', 'chat' or 'responses' for an API path (query string ignored), else None."""
    p = urllib.parse.urlsplit(path).path.rstrip('/')
    if p.endswith('/messages'):
        return 'messages'
    if p.endswith('/chat/completions'):
        return 'chat'
    if p.endswith('/responses'):
        return 'responses'
    return None


def tool_names(api, body):
    """The function tools a request offers, by name (Responses namespaces flattened)."""
    names = []
    for t in body.get('tools') or []:
        if not isinstance(t, dict):
            continue
        if api == 'chat':
            names.append((t.get('function') or {}).get('name'))
        elif t.get('type') == 'namespace':
            names += [s.get('name') for s in t.get('tools') or [] if isinstance(s, dict)]
        else:
            names.append(t.get('name'))
    return [n for n in names if isinstance(n, str)]


FORCED_CAP = 256  # output tokens of a forced answer


def force_tool(api, body, name):
    """Makes `body` force a call of tool `name` (which it offers) and marks that tool strict."""
    if api == 'messages':
        body['tool_choice'] = {'type': 'tool', 'name': name}
    elif api == 'chat':
        body['tool_choice'] = {'type': 'function', 'function': {'name': name}}
    else:
        body['tool_choice'] = {'type': 'function', 'name': name}
    # The forced answer is short: a constrained answer is wrapped up within its cap (the thinking
    # closed and the arguments finished in time), and a 2.7M-parameter model left to an agent's
    # 32k cap would think, or fill a string, until the agent's own deadline.
    key = ('max_output_tokens' if api == 'responses' else
           'max_completion_tokens' if api == 'chat' and 'max_completion_tokens' in body else
           'max_tokens')
    body[key] = min(int(body.get(key) or FORCED_CAP), FORCED_CAP)
    for t in body.get('tools') or []:
        if api == 'chat' and (t.get('function') or {}).get('name') == name:
            t['function']['strict'] = True
        elif api != 'chat' and t.get('name') == name:
            t['strict'] = True


def _walk(x):
    if isinstance(x, dict):
        yield x
        for v in x.values():
            yield from _walk(v)
    elif isinstance(x, list):
        for v in x:
            yield from _walk(v)


def _answer_objects(raw):
    """The JSON objects of an answer: the body itself, or every `data:` event of a stream."""
    text = raw.decode('utf-8', 'replace')
    try:
        yield json.loads(text)
        return
    except ValueError:
        pass
    for line in text.splitlines():
        if line.startswith('data:'):
            try:
                yield json.loads(line[5:].strip())
            except ValueError:
                pass


def call_ids(raw, name):
    """The ids of the calls of tool `name` in an answer, in any of the three APIs' shapes."""
    ids = []
    for obj in _answer_objects(raw):
        for d in _walk(obj):
            fn = d.get('function') if isinstance(d.get('function'), dict) else {}
            if d.get('name') != name and fn.get('name') != name:
                continue
            cid = d.get('call_id') or d.get('id')  # Responses: call_id; Messages, chat: id
            if isinstance(cid, str) and cid not in ids:
                ids.append(cid)
    return ids


def result_ids(body):
    """The call ids a request sends results for (tool_result, role tool, function_call_output)."""
    ids = set()
    for d in _walk(body):
        if d.get('type') == 'tool_result' and isinstance(d.get('tool_use_id'), str):
            ids.add(d['tool_use_id'])
        elif d.get('role') == 'tool' and isinstance(d.get('tool_call_id'), str):
            ids.add(d['tool_call_id'])
        elif d.get('type') == 'function_call_output' and isinstance(d.get('call_id'), str):
            ids.add(d['call_id'])
    return ids


class AgentProxy:
    """Listens on 127.0.0.1 (a free port) and forwards to `upstream` (http://host:port).

    `force` names the tool to force, or None: every request that offers it is forced until an
    answer has held a call of it. `exchanges` lists every request in arrival
    order as dicts: method, path, api, body (parsed JSON or None), forced, status, answer (bytes).
    """

    def __init__(self, upstream, force=None, rewrite=None):
        u = urllib.parse.urlsplit(upstream)
        self.upstream = (u.hostname, u.port)
        self.force = force
        self.rewrite = rewrite  # (api, body) -> None, edits every JSON body (for experiments)
        self.forced = False
        self.exchanges = []
        self.lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = 'HTTP/1.1'

            def log_message(self, *args):
                pass

            def do_GET(self):
                proxy._handle(self)

            def do_POST(self):
                proxy._handle(self)

        self.server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.base = f'http://127.0.0.1:{self.port}'
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def _handle(self, h):
        if 'chunked' in (h.headers.get('Transfer-Encoding') or '').lower():
            raw = b''
            while True:
                n = int(h.rfile.readline().split(b';')[0].strip() or b'0', 16)
                if n == 0:
                    while h.rfile.readline() not in (b'\r\n', b'\n', b''):
                        pass
                    break
                raw += h.rfile.read(n)
                h.rfile.readline()
        else:
            n = int(h.headers.get('Content-Length') or 0)
            raw = h.rfile.read(n) if n else b''
        api = api_of(h.path)
        body = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
        forced = False
        if self.rewrite and api and isinstance(body, dict):
            self.rewrite(api, body)
            raw = json.dumps(body).encode()
        with self.lock:
            # Until an answer has held the call: an agent that gives up on a slow answer and
            # sends the request again gets it forced again.
            if (self.force and not self.forced and api and isinstance(body, dict) and
                    self.force in tool_names(api, body)):
                force_tool(api, body, self.force)
                forced = True
                raw = json.dumps(body).encode()
            ex = {'method': h.command, 'path': h.path, 'api': api, 'body': body,
                  'forced': forced, 'status': None, 'answer': b''}
            self.exchanges.append(ex)
        headers = {k: v for k, v in h.headers.items() if k.lower() not in _SKIP_HEADERS}
        headers['Content-Length'] = str(len(raw))
        conn = http.client.HTTPConnection(*self.upstream, timeout=600)
        try:
            conn.request(h.command, h.path, body=raw if h.command == 'POST' else None,
                         headers=headers)
            r = conn.getresponse()
            ex['status'] = r.status
            h.send_response(r.status, r.reason)
            for k, v in r.getheaders():
                if k.lower() not in _SKIP_HEADERS:
                    h.send_header(k, v)
            h.send_header('Transfer-Encoding', 'chunked')
            h.end_headers()
            while True:
                chunk = r.read1(65536)
                if not chunk:
                    break
                if len(ex['answer']) < _ANSWER_LOG_BYTES:
                    ex['answer'] += chunk
                h.wfile.write(b'%x\r\n%s\r\n' % (len(chunk), chunk))
                h.wfile.flush()
            if forced and call_ids(ex['answer'], self.force):
                with self.lock:  # before the agent can see the answer end and send the result
                    self.forced = True
            h.wfile.write(b'0\r\n\r\n')
            h.wfile.flush()
        except (OSError, http.client.HTTPException) as e:
            ex['error'] = repr(e)
            h.close_connection = True
        finally:
            conn.close()

    def round_trip(self):
        """(call ids of the forced answer, index of the forced exchange, index of the first
        later request that carries a result for one of those ids, or None)."""
        with self.lock:
            exs = list(self.exchanges)
        found = ([], None, None)
        for i, ex in enumerate(exs):
            if not ex['forced']:
                continue
            ids = call_ids(ex['answer'], self.force)
            if not ids:
                found = ([], i, None)  # a forced answer the agent did not wait for
                continue
            for j in range(i + 1, len(exs)):
                if exs[j]['body'] is not None and result_ids(exs[j]['body']) & set(ids):
                    return ids, i, j
            return ids, i, None
        return found
