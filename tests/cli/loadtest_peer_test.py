#!/usr/bin/env python3
"""`qwen35 loadtest --url` against an independent OpenAI-style stream (issue 51).

  tests/cli/loadtest_peer_test.py BUILD/qwen35

A tiny server here (Python stdlib, no qwen35 code) streams as llama-server, vLLM and SGLang do:
chunked SSE of text chunks without token_ids, the finish chunk, and `usage` in a last chunk
only when the request asks with stream_options.include_usage. Variants:
  usage      one token per text chunk, usage at the end without prompt_tokens_details (as vLLM
             sends it unless started with --enable-prompt-tokens-details)
  packed     two tokens per text chunk, usage at the end: usage's count, not the chunk count
  chunks     no usage at all: one token per non-empty chunk, said to be so
  cached     usage with prompt_tokens_details.cached_tokens, as llama-server sends it (the
             cache figures are reported)
  silent     200 and [DONE] but no text (usage: 0 completion tokens): loadtest fails loudly
             instead of reporting 0 tok/s
/tokenize answers only {"content"} with {"tokens": [...]} (llama-server's shape). Every figure
checked is counted from what this server sent (requests x tokens per request), not timed.
"""
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REQUESTS, MAX_TOKENS = 6, 5


class Peer(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    variant = "usage"
    asked_usage = []  # stream_options.include_usage of every streamed request

    def log_message(self, *_):
        pass

    def _json(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _chunk(self, obj):
        data = ("data: %s\n\n" % (obj if isinstance(obj, str) else json.dumps(obj))).encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        if self.path == "/tokenize":
            if "content" not in body:
                return self._json(400, {"error": {"message": "'content' is required"}})
            return self._json(200, {"tokens": list(range(len(body["content"].split())))})
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            return self._json(404, {"error": {"message": "no route"}})
        chat = self.path.endswith("chat/completions")
        Peer.asked_usage.append(bool((body.get("stream_options") or {}).get("include_usage")))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        n, v = int(body.get("max_tokens", 16)), Peer.variant
        per_chunk = 2 if v == "packed" else 1
        obj = "chat.completion.chunk" if chat else "text_completion"

        def choice(i, text, finish=None):
            if chat:
                return {"index": i, "delta": {"content": text}, "finish_reason": finish}
            return {"index": i, "text": text, "finish_reason": finish}
        choices = int(body.get("n", 1))
        if chat:  # the role-only first delta, as OpenAI and llama-server send it
            self._chunk({"object": obj, "choices": [{"index": i, "delta": {"role": "assistant"}}
                                                    for i in range(choices)]})
        for k in range(0, n, per_chunk):
            text = "" if v == "silent" else " word" * min(per_chunk, n - k)
            self._chunk({"object": obj, "choices": [choice(i, text) for i in range(choices)]})
        self._chunk({"object": obj, "choices": [choice(i, "", "length") for i in range(choices)]})
        if v != "chunks" and Peer.asked_usage[-1]:
            prompt = len(json.dumps(body.get("messages") or body.get("prompt")).split())
            made = 0 if v == "silent" else n * choices
            usage = {"prompt_tokens": prompt, "completion_tokens": made, "total_tokens": prompt + made}
            if v == "cached":
                usage["prompt_tokens_details"] = {"cached_tokens": prompt // 2}
            self._chunk({"object": obj, "choices": [], "usage": usage})
        self._chunk("[DONE]")
        self.wfile.write(b"0\r\n\r\n")


def loadtest(binary, port, *args):
    r = subprocess.run([binary, "loadtest", "--url", "http://127.0.0.1:%d" % port, "--json"] +
                       list(args), capture_output=True, text=True, timeout=120)
    lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
    return r.returncode, (json.loads(lines[-1]) if lines else {}), r.stderr


def check(cond, what):
    if not cond:
        print("loadtest_peer_test: FAILED: %s" % what, file=sys.stderr)
        sys.exit(1)


def main():
    binary = sys.argv[1]
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Peer)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]
    base = ("-c", "2", "-n", str(REQUESTS), "--max-tokens", str(MAX_TOKENS))
    want = REQUESTS * MAX_TOKENS

    for variant, source in (("usage", "usage.completion_tokens"),
                            ("packed", "usage.completion_tokens"),
                            ("chunks", "non-empty chunks")):
        Peer.variant, Peer.asked_usage = variant, []
        rc, j, err = loadtest(binary, port, *base)
        check(rc == 0, "%s: exit %d: %s %s" % (variant, rc, j, err))
        check(Peer.asked_usage and all(Peer.asked_usage),
              "%s: a request did not ask for stream_options.include_usage" % variant)
        check(j["ok"] == REQUESTS and j["errors"] == 0, "%s: %s" % (variant, j))
        check(j["generated_tokens"] == want,
              "%s: %d generated tokens, the server sent %d" % (variant, j["generated_tokens"], want))
        check(j["token_source"] == source, "%s: token_source %r" % (variant, j["token_source"]))
        check(j["ttft_p50_ms"] > 0 and j["tokens_per_s"] > 0, "%s: no TTFT or rate: %s" % (variant, j))
        print("loadtest_peer_test: %s: %d tokens from %s, TTFT p50 %.2f ms" %
              (variant, j["generated_tokens"], j["token_source"], j["ttft_p50_ms"]), flush=True)

    Peer.variant = "silent"
    rc, j, err = loadtest(binary, port, *base)
    check(rc != 0, "silent: a run that generated nothing exited 0: %s" % j)
    check("no generated token" in j.get("error", "") and "no generated token" in err,
          "silent: no reason given: %s / %s" % (j, err))
    print("loadtest_peer_test: silent: exit %d, %s" % (rc, err.strip()), flush=True)

    mt = ("--multi-turn", "--conversations", "2", "--turns", "2", "-c", "2", "--system-tokens", "20",
          "--max-tokens", str(MAX_TOKENS))
    Peer.variant = "usage"
    rc, j, err = loadtest(binary, port, *mt)
    check(rc == 0, "multi-turn: exit %d: %s %s" % (rc, j, err))
    check(j["cached_tokens_reported"] is False and j["later_turns_cached_share"] is None and
          all(t["cached_share"] is None for t in j["turns"]),
          "multi-turn: cache figures reported for a server that gives none: %s" % j)
    check(j["generated_tokens"] == 4 * MAX_TOKENS and j["token_source"] == "usage.completion_tokens",
          "multi-turn: %s" % j)
    check(all(t["ttft_p50_ms"] > 0 for t in j["turns"]), "multi-turn: no TTFT: %s" % j)
    Peer.variant = "cached"
    rc, j, err = loadtest(binary, port, *mt)
    check(rc == 0 and j["cached_tokens_reported"] is True and j["later_turns_cached_share"] == 1.0,
          "multi-turn (cached): %s %s" % (j, err))
    Peer.variant = "silent"
    rc, j, err = loadtest(binary, port, *mt)
    check(rc != 0 and "no generated" in err, "multi-turn (silent): exit %d: %s" % (rc, err))
    print("loadtest_peer_test: multi-turn: cache figures 'not reported' without cached_tokens",
          flush=True)

    fs = ("--few-shot", "--requests", "3", "--prefix-tokens", "20", "--fork-requests", "1",
          "--fork-n", "2", "--max-tokens", str(MAX_TOKENS))
    Peer.variant = "chunks"
    rc, j, err = loadtest(binary, port, *fs)
    check(rc == 0, "few-shot: exit %d: %s %s" % (rc, j, err))
    check(j["branches"]["cached_share"] is None and j["branches"]["prompt_rows_received"] == -1,
          "few-shot: %s" % j)
    check(j["branches"]["generated_tokens"] == 3 * MAX_TOKENS and
          j["forks"]["generated_tokens"] == 2 * MAX_TOKENS, "few-shot: %s" % j)
    check(j["branches"]["token_source"] == "non-empty chunks" and j["branches"]["ttft_p50_ms"] > 0,
          "few-shot: %s" % j)
    Peer.variant = "silent"
    rc, j, err = loadtest(binary, port, *fs)
    check(rc != 0 and "no generated" in err, "few-shot (silent): exit %d: %s" % (rc, err))
    print("loadtest_peer_test: few-shot: counted from chunks, cache figures not reported", flush=True)
    srv.shutdown()
    print("loadtest_peer_test: passed", flush=True)


if __name__ == "__main__":
    main()
