#!/usr/bin/env python3
"""`qwen35 serve` on a model split over two MPI ranks (docs/design.md "Past one machine"):
concurrent == solo over HTTP (requests batched together in the engine's steps, cut into two
micro-batches, give each the text it gets alone), the split server's answers equal one process's
(`qwen35 run`, greedy), and drafted == plain (the MTP head on the last rank, the server's default,
batched with plain requests; prompt lookup: verified rows, commits that keep fewer, on every rank);
resumed == fresh: with the prefix cache on, a prompt extended, a branch from it and n=2 forks of
one prompt get, bit for bit (text and logprobs), what a one-process server without the cache
computes from scratch, and the split server did resume; with MTP drafting on both, the split
server drafts and accepts as many tokens as the one process (the head's cache and hidden row,
resumed and forked on the last rank, give a fresh computation's drafts: counts show a wrong
fork's row), and a split server without drafting gives the same answers; seeded sampling whose
rows come back as their top k logits gives one process's tokens, and greedy decoding brings no
whole row back; each rank's resident weights (read from /proc) are within 10 % of its planned
share; resumed == fresh also after a restart from --cache-dir (each rank its own files; a
damaged part drops its snapshot on every rank; another split skips the files with a warning).
On a Vulkan device (lavapipe; skipped where there is none), `serve --device vulkan` under -np 2:
concurrent == solo == one process on the device.
Then rank 1 is stopped, and (under mpirun's orte_enable_recovery) killed, while a request
runs: rank 0 answers it with an HTTP error naming rank 1, /health and /ready answer 503 naming it
until rank 0 is gone, and every rank is gone within 10 s; also when rank 0's engine thread is stuck
inside a step then (the HTTP side answers). Bounded: every wait has a deadline.

Usage: tests/dist/pipeline_serve_test.py build/qwen35 MODEL_DIR
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

BIN, MODEL = os.path.realpath(sys.argv[1]), sys.argv[2]
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
# Steps cut into two micro-batches however few their rows (dist/pipeline.h): the concurrent
# requests' steps, the forks'.
MICRO = ["--pipeline-microbatches", "2", "--pipeline-microbatch-rows", "1"]
PROMPTS = ["In the beginning", "And the LORD said", "Blessed are the", "And it came to pass"]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def complete(port, prompt, n=24, timeout=60, spec=None):
    b = {"prompt": prompt, "max_tokens": n, "temperature": 0}
    if spec:
        b["speculative"] = spec
    body = json.dumps(b).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)["choices"][0]["text"]


def post(port, body, timeout=60):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)["choices"]


def spec_counts(port):
    return metric(port, "qwen35_spec_drafted_tokens_total"), metric(port, "qwen35_spec_accepted_tokens_total")


def metric(port, name):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        m = re.search(rf"^{name} (\S+)", r.read().decode(), re.M)
    return float(m.group(1)) if m else None


def start_server(log, delay=None, np=2, extra=(), mca=(), ctx=256, env_extra=None):
    env = dict(ENV, **(env_extra or {}))
    hook = []
    if delay:  # rank 0 waits between steps (the test hook), so a request is mid-stream for long
        env["QWEN35_PIPELINE_TEST_DELAY"] = str(delay)
        hook = ["-x", "QWEN35_PIPELINE_TEST_DELAY"]
    mpi = ["mpirun", "-np", str(np), "--mca", "btl", "self,tcp"] + list(mca) + hook if np > 1 else []
    p = subprocess.Popen(mpi + [BIN, "serve", "-m", MODEL, "--port", "0", "--parallel", "4", "--ctx", str(ctx), "-t", "1"] +
                         list(extra),
                         stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    deadline = time.time() + 60
    while time.time() < deadline:
        text = open(log.name).read()
        m = re.search(r"listening on http://[^:]+:(\d+)", text)
        if m and "ready" in text:
            return p, int(m.group(1))
        if p.poll() is not None:
            break
        time.sleep(0.1)
    print(open(log.name).read(), file=sys.stderr)
    raise SystemExit("FAIL: the split server did not become ready")


def get(port, path):
    """(status, body) of GET path, or None when nothing answers (the server is gone)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return None


def failed_health(port, pid, deadline):
    """Once rank 0 has answered a request with the failure, /health and /ready never say 200
    again: each answer until rank 0 is gone (or the deadline) is a 503 naming rank 1. Returns how
    many answered (none when rank 0 was gone first: the job ends a grace after the failure)."""
    answered = 0
    while alive(pid) and time.time() < deadline:
        for path in ("/health", "/ready"):
            got = get(port, path)
            if got is None:
                continue
            answered += 1
            status, body = got
            check(status == 503 and "rank 1" in body, f"{path} during the failure: {status} {body}")
        time.sleep(0.05)
    return answered


def mapped_rss(pid, path):
    """Bytes of `path`'s mappings resident in process `pid` (the Rss of its areas in smaps)."""
    total, ours = 0, False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            m = re.match(r"^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$", line)
            if m:
                ours = m.group(1) == path
            elif ours and line.startswith("Rss:"):
                total += int(line.split()[1]) * 1024
    return total


def resident_weights(log, ranks):
    """Each rank's resident weights within 10 % of its planned share: the Rss of its mappings of
    the checkpoint, read here from /proc, plus the fp32 copies it made at load (as it reports
    them, with the plan, under --pipeline-plan), after the requests ran through its layers."""
    check(set(ranks) == {0, 1}, f"ranks found: {ranks}")
    text = open(log.name).read()
    weights = os.path.realpath(os.path.join(MODEL, "model.safetensors"))
    for r, pid in sorted(ranks.items()):
        m = re.search(rf"pipeline: rank {r} resident weights .*?\+ (\d+) bytes of copies .*?planned (\d+) bytes", text)
        check(m, f"rank {r} did not report its resident weights")
        if not m:
            continue
        copies, planned = int(m.group(1)), int(m.group(2))
        rss = mapped_rss(pid, weights)
        resident = rss + copies
        check(abs(resident - planned) <= 0.1 * planned, f"rank {r}: resident weights {resident} bytes "
              f"({rss} mapped + {copies} copies), planned {planned}: not within 10 %")
        print(f"pipeline_serve_test: rank {r} resident weights {resident} bytes ({rss} of the checkpoint mapped + "
              f"{copies} copies), planned {planned} ({100 * (resident - planned) / planned:+.1f} %)")


def top_k_return(log, p, ranks):
    """Greedy requests without log-probabilities need only the top logit of each row: the last
    rank returned no whole row (4 bytes per vocabulary entry) in any step, as rank 0 counts at
    its clean shutdown (SIGTERM)."""
    os.kill(ranks[0], signal.SIGTERM)
    p.wait(30)
    vocab = json.load(open(os.path.join(MODEL, "config.json")))["text_config"]["vocab_size"]
    m = re.search(r"pipeline: rank 0 sent (\d+) steps: .*?(\d+) bytes of logits back", open(log.name).read())
    check(m, "rank 0 did not report the bytes of its steps")
    if m:
        steps, back = int(m.group(1)), int(m.group(2))
        check(steps > 0 and back < steps * 4 * vocab, f"{back} bytes of logits in {steps} steps: whole rows came back")
        print(f"pipeline_serve_test: greedy under -np 2: {back} bytes of logits back in {steps} steps "
              f"(a whole row is {4 * vocab})")


def ranks_of(mpirun_pid):
    out = subprocess.run(["pgrep", "-P", str(mpirun_pid)], capture_output=True, text=True).stdout.split()
    ranks = {}
    for pid in out:
        try:
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        for e in env:
            if e.startswith(b"OMPI_COMM_WORLD_RANK="):
                ranks[int(e.split(b"=")[1])] = int(pid)
    return ranks


def alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie is gone for our purpose
        return open(f"/proc/{pid}/stat").read().split()[2] != "Z"
    except OSError:
        return False


def stop(p):
    """SIGKILL to mpirun's process group and to its ranks, which Open MPI may have put in groups of
    their own; returns once every rank is gone (an orphaned rank would still hold its
    --cache-dir lock when the next server starts on that folder)."""
    ranks = list(ranks_of(p.pid).values()) if p.poll() is None else []
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except OSError:
        pass
    for pid in ranks:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    p.wait(10)
    deadline = time.time() + 10
    while any(alive(pid) for pid in ranks) and time.time() < deadline:
        time.sleep(0.05)


def rank_fails(sig, stuck=False):
    """Rank 1 stopped (SIGSTOP), or killed (SIGKILL, with mpirun's orte_enable_recovery so that
    mpirun leaves the survivors to the heartbeat instead of ending them at once), while a request
    runs: rank 0 answers it with an HTTP error naming rank 1 once the heartbeat finds it silent,
    /health and /ready fail from then on, and every rank is gone within 10 s. `stuck`: rank 0's
    engine thread is held inside its step (the delay hook, 60 s) when the rank goes, as a step
    stuck inside MPI would be: the HTTP side must answer without it."""
    what = ("stopped" if sig == signal.SIGSTOP else "killed") + (" (the engine stuck in a step)" if stuck else "")
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    mca = ["--mca", "orte_enable_recovery", "1"] if sig == signal.SIGKILL else []
    p, port = start_server(log, delay=60 if stuck else 0.2, mca=mca)
    try:
        ranks = ranks_of(p.pid)
        check(set(ranks) == {0, 1}, f"ranks found: {ranks}")
        result = {}

        def request():
            try:
                result["text"] = complete(port, PROMPTS[0], n=200, timeout=30)
            except urllib.error.HTTPError as e:
                result["status"] = e.code
                result["body"] = e.read().decode(errors="replace")
            except Exception as e:  # noqa: BLE001
                result["error"] = repr(e)

        streamed = {}

        def stream():  # the same for an event stream: an error event, then the stream's end
            body = json.dumps({"prompt": PROMPTS[1], "max_tokens": 200, "temperature": 0, "stream": True}).encode()
            req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                         {"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=30) as r:
                    streamed["text"] = r.read().decode(errors="replace")
            except Exception as e:  # noqa: BLE001
                streamed["error"] = repr(e)

        threads = [threading.Thread(target=request)] + ([threading.Thread(target=stream)] if stuck else [])
        for t in threads:
            t.start()
        time.sleep(1.5)
        os.kill(ranks[1], sig)
        t0 = time.time()
        for t in threads:
            t.join(max(0.1, t0 + 10 - time.time()))
            check(not t.is_alive(), f"the client hangs after rank 1 was {what}")
        if stuck:
            events = [ln[6:] for ln in streamed.get("text", "").splitlines() if ln.startswith("data: ")]
            errors = [e for e in events if e != "[DONE]" and "error" in json.loads(e)]
            check(len(errors) == 1 and "rank 1" in errors[0] and "silent" in errors[0],
                  f"the event stream in flight has no error event naming rank 1: {streamed}")
        check(result.get("status", 0) >= 500, f"no HTTP error for the request in flight: {result}")
        check("rank 1" in result.get("body", "") and "silent" in result.get("body", ""),
              f"the error does not say rank 1 is silent: {result}")
        answered = failed_health(port, ranks[0], t0 + 10)
        check(not alive(ranks[0]), f"rank 0 still alive 10 s after rank 1 was {what}")
        try:  # a job that lost a rank fails: also under orte_enable_recovery, where mpirun alone exits 0
            code = p.wait(10)
        except subprocess.TimeoutExpired:
            code = None
        check(code not in (0, None), f"mpirun exited {code} after rank 1 was {what}")
        print(f"pipeline_serve_test: a {what} rank: HTTP", result.get("status"), "for the request in flight,",
              answered, "answers of /health and /ready after it, all 503 naming rank 1; every rank gone within 10 s")
    finally:
        stop(p)
        if failures:
            print(open(log.name).read(), file=sys.stderr)


# A prompt of 180 tokens: its prefill copies the state at grid line 64 (a provisional snapshot)
# and snapshots its last line, 128. The extension and the forks resume at 128, the branch
# (parting near token 90) at 64, which makes the provisional snapshot an ordinary one.
BASE = ("In the beginning God created the heaven and the earth. And the earth was without form, and void; "
        "and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters. "
        "And God said, Let there be light: and there was light. And God saw the light, that it was good: and "
        "God divided the light from the darkness. And God called the light Day, and the darkness he called Night. "
        "And the evening and the morning were the first day. And God said, Let there be a firmament in the midst "
        "of the waters, and let it divide the waters from the waters. And God made the firmament, and divided the "
        "waters which were under the firmament from the waters which were above the firmament: and it was so. And "
        "God called the firmament Heaven.")
# Requests whose sampling reads only the top k logits of a row (greedy; the model's default
# top-k 20 with top-p; top-k 5 at temperature 1): the split returns those alone, and the tokens
# must be one process's.
SAMPLED_REQUESTS = [
    {"prompt": PROMPTS[1], "max_tokens": 24, "seed": 11},
    {"prompt": PROMPTS[2], "max_tokens": 24, "temperature": 1.0, "top_k": 5, "top_p": 1.0, "seed": 5},
    {"prompt": PROMPTS[3], "max_tokens": 24, "temperature": 0},
]
CACHE_REQUESTS = [
    {"prompt": BASE, "max_tokens": 8},
    {"prompt": BASE + " And the evening and the morning were the first day.", "max_tokens": 8},  # extended
    {"prompt": BASE[:400] + " And the LORD spake unto Moses, saying,", "max_tokens": 8},        # a branch
    {"prompt": BASE + " And God said,", "max_tokens": 8, "n": 2, "temperature": 0.9, "seed": 7},  # forks
]


def post_full(port, body, timeout=60):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


def stop_gracefully(p, log):
    """SIGTERM to rank 0: it ends, saving --cache-dir (the other ranks their parts), and ends the
    other ranks; mpirun then exits."""
    os.kill(ranks_of(p.pid)[0], signal.SIGTERM)
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        check(False, "the split server did not end within 30 s of SIGTERM")
    text = open(log.name).read()
    m = re.search(r"saved (\d+) prefix-cache snapshots", text)
    check(m and int(m.group(1)) >= 2, f"the split server saved no snapshots: {text[-500:]}")


def corrupt_part(cache_dir, rank_folder):
    """Flips a byte in the KV rows of rank 1's smallest file (the shallowest snapshot), so that its
    checksum fails: rank 0 must drop that snapshot on every rank."""
    folder = os.path.join(cache_dir, rank_folder)
    files = sorted(os.listdir(folder), key=lambda f: os.path.getsize(os.path.join(folder, f)))
    path = os.path.join(folder, files[0])
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x55]))
    return path


def resumed_fresh():
    """The same requests, in order, on one process without the prefix cache and on the split
    server with it, at the default bound and at one so small that entries are evicted (a
    provisional snapshot dropped, leaves removed, the branch and the forks resumed from what is
    left): every choice's text and logprobs equal, and the split servers did resume. The first
    three draft with the MTP head (the split ones on their last rank): as many drafted and
    accepted. --cache-dir under the split: the split server saves its snapshots at exit
    (SIGTERM), each rank its part in a folder of its own; restarted on the same folder with rank
    1's part of one snapshot damaged, it drops that snapshot (one warning), resumes the first
    request from the files and answers (and drafts) as the fresh server does. The evicting server
    runs on the same folder under another split: it skips the files with a warning and still
    answers alike."""
    answers, counts = {}, {}
    mtp = ["--spec", "mtp"]
    cache_dir = tempfile.mkdtemp(prefix="q35-split-cache-")
    for name, np, extra in (("fresh", 1, ["--no-prefix-cache"] + mtp), ("split", 2, mtp + MICRO + ["--cache-dir", cache_dir]),
                            ("restarted", 2, mtp + ["--cache-dir", cache_dir]),
                            ("evicting", 2, ["--cache-mb", "0.4", "--cache-dir", cache_dir, "--pipeline-split", "4"])):
        if name == "restarted":
            # Each rank's folder, and each rank's lock file (cli/cache_lock.h), released at exit.
            check(sorted(os.listdir(cache_dir)) == [".qwen35-serve-rank0.lock", ".qwen35-serve-rank1.lock",
                                                    "np2-r0-L0-6", "np2-r1-L6-8"],
                  f"the ranks' folders: {os.listdir(cache_dir)}")
            damaged = corrupt_part(cache_dir, "np2-r1-L6-8")
        log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
        p, port = start_server(log, np=np, extra=extra)
        graceful = False
        try:
            full = [post_full(port, dict({"temperature": 0, "logprobs": 1}, **r)) for r in CACHE_REQUESTS]
            answers[name] = [f["choices"] for f in full]
            counts[name] = spec_counts(port)
            cached = full[0]["usage"]["prompt_tokens_details"]["cached_tokens"]
            answers[name + " sampled"] = [post(port, r) for r in SAMPLED_REQUESTS]
            hits = metric(port, "qwen35_prefix_cache_hits_total")
            text = open(log.name).read()
            if name == "split":
                check(hits == 3, f"the split server resumed {hits} requests from the prefix cache, not 3")
                promoted = metric(port, "qwen35_prefix_cache_promoted_total")
                check(promoted and promoted >= 1, "the branch resumed from no provisional snapshot")
                stop_gracefully(p, log)
                graceful = True
            if name == "restarted":
                check(cached == 128, f"the restarted server resumed the first prompt at {cached}, not 128")
                check(re.search(r"loaded 1 prefix-cache snapshots", text), "the restart did not load 1 snapshot")
                check(text.count("dropped on every rank") == 1 and damaged in text and "checksum" in text,
                      f"no warning for rank 1's damaged part {damaged}")
            if name == "evicting":
                evicted = metric(port, "qwen35_prefix_cache_evictions_total")
                check(hits and evicted, f"the small cache resumed {hits} and evicted {evicted} entries")
                check(cached == 0, f"another split resumed the first prompt at {cached} from the files")
                check(text.count("of another split or world size; skipped") == 2,
                      "no warning for the two folders of the other split")
        except Exception:
            print(open(log.name).read(), file=sys.stderr)
            raise
        finally:
            if not graceful:
                stop(p)
    for name in ("split", "restarted", "evicting"):
        for i, r in enumerate(CACHE_REQUESTS):
            check(answers["fresh"][i] == answers[name][i], f"resumed != fresh ({name}) for request {i} "
                  f"({r['prompt'][-30:]!r}): {answers[name][i]} vs {answers['fresh'][i]}")
    check(answers["split"][3][0]["text"] != answers["split"][3][1]["text"], "the two forks sampled the same text")
    for i, r in enumerate(SAMPLED_REQUESTS):
        check(answers["fresh sampled"][i] == answers["split sampled"][i], f"top-k return: split != one process "
              f"for {r}: {answers['split sampled'][i]} vs {answers['fresh sampled'][i]}")
    print("pipeline_serve_test: sampled (greedy, top-k 20 with top-p, top-k 5; seeded) under -np 2 == one process")
    for name in ("split", "restarted"):
        check(counts["fresh"][1] and counts[name] == counts["fresh"],
              f"MTP drafted/accepted: {name} {counts[name]}, one process without the cache {counts['fresh']}")
    print("pipeline_serve_test: resumed == fresh under -np 2 (extended, branch, n=2 forks; with evictions; "
          "restarted from --cache-dir with one rank's part damaged; another split skips the files; "
          "MTP drafted/accepted", counts["split"], "as one process)")


API_CTX = 640  # the tool case's prompt (the template's tool preamble) is 442 tokens
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
# One request of each API and feature that has its own path through the engine: structured outputs
# (a grammar), a forced tool call, streaming, the Responses and the Messages APIs, a seeded sample.
API_CASES = [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Name a man of the book."}],
                              "max_tokens": 40, "temperature": 0,
                              "response_format": {"type": "json_schema",
                                                  "json_schema": {"name": "p", "schema": SCHEMA}}}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Weather in Jerusalem?"}],
                              "max_tokens": 40, "temperature": 0, "tools": [WEATHER],
                              "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "And the LORD said"}],
                              "max_tokens": 16, "temperature": 0, "stream": True}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Blessed are"}],
                              "max_tokens": 16, "temperature": 0.8, "seed": 7}),
    ("/v1/responses", {"input": "In the beginning", "max_output_tokens": 16, "temperature": 0}),
    ("/v1/messages", {"model": "qwen35-tiny-kjv", "max_tokens": 16, "temperature": 0,
                      "messages": [{"role": "user", "content": "And it came to pass"}]}),
]


def api_answer(port, path, body):
    """What a client reads of an answer: the message texts, tool calls and structured output,
    without ids and times (a stream's data events' deltas in order)."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=90) as r:
        raw = r.read().decode()
    if body.get("stream"):
        return [json.loads(l[6:])["choices"][0]["delta"] for l in raw.splitlines()
                if l.startswith("data: {")]
    a = json.loads(raw)
    if "choices" in a:
        for c in a["choices"]:
            for call in c["message"].get("tool_calls") or []:
                call.pop("id")  # a fresh name per answer
        return [c["message"] for c in a["choices"]]
    if "output" in a:
        return [o.get("content") for o in a["output"]]
    return a["content"]


def apis_as_one_process(split_port):
    """Every API case under -np 2 answers as one process does, the structured one in its schema."""
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    p, port = start_server(log, np=1, ctx=API_CTX)
    try:
        for path, body in API_CASES:
            want, got = api_answer(port, path, body), api_answer(split_port, path, body)
            check(got == want, f"{path} {json.dumps(body)[:60]}... under -np 2: {got!r} vs {want!r}")
        person = json.loads(api_answer(split_port, *API_CASES[0])[0]["content"])
        check(set(person) == {"name", "age"} and isinstance(person["age"], int),
              f"structured output outside its schema: {person!r}")
        call = api_answer(split_port, *API_CASES[1])[0].get("tool_calls") or [{}]
        check(call[0].get("function", {}).get("name") == "get_weather", f"no forced tool call: {call!r}")
    finally:
        stop(p)
    print("pipeline_serve_test: structured outputs, a forced tool call, streaming, a seeded sample, the Responses "
          "and Messages APIs under -np 2 == one process")


def at_once(calls, join_timeout):
    """Runs every (key, fn) of `calls` at once, a thread each: {key: fn()}, without the keys of
    calls not done within join_timeout."""
    out = {}
    threads = [threading.Thread(target=lambda k=k, f=f: out.__setitem__(k, f())) for k, f in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(join_timeout)
    return out


def on_vulkan():
    """`serve --device vulkan` under -np 2 on lavapipe (each rank on device r mod count, the one
    device here): concurrent == solo == one process on the device (`run --device vulkan`), with
    MTP drafting on the last rank. Skipped, saying so, without the backend or a Vulkan driver."""
    import glob
    icd = os.environ.get("VK_DRIVER_FILES") or next(iter(sorted(glob.glob("/usr/share/vulkan/icd.d/lvp_icd*.json"))), "")
    env = dict(ENV, VK_DRIVER_FILES=icd)
    probe = subprocess.run([BIN, "devices"], capture_output=True, text=True, timeout=60, env=env)
    if not icd or "usable: yes" not in probe.stdout:
        print("pipeline_serve_test: skipped the Vulkan case (no usable Vulkan device:",
              (probe.stdout + probe.stderr).strip().splitlines()[-1:], ")")
        return
    prompts = PROMPTS[:2]
    one = {}
    for pr in prompts:
        r = subprocess.run([BIN, "run", "-m", MODEL, "-p", pr, "-n", "12", "--temperature", "0", "-q", "-t", "1",
                            "--device", "vulkan"], capture_output=True, text=True, timeout=120, env=env)
        check(r.returncode == 0, f"run --device vulkan -p {pr!r} failed: {r.stderr}")
        one[pr] = r.stdout
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    p, port = start_server(log, extra=["--device", "vulkan", "--spec", "mtp"] + MICRO,
                           mca=["-x", "VK_DRIVER_FILES"], env_extra={"VK_DRIVER_FILES": icd})
    try:
        solo = {pr: complete(port, pr, n=12, timeout=120) for pr in prompts}
        together = at_once([(pr, lambda pr=pr: complete(port, pr, n=12, timeout=120)) for pr in prompts], 150)
        for pr in prompts:
            check(together.get(pr) == solo[pr], f"vulkan -np 2: concurrent != solo for {pr!r}")
            check(solo[pr] and one[pr].startswith(solo[pr]),
                  f"vulkan -np 2: split serve != one process on the device for {pr!r}: {solo[pr]!r} vs {one[pr]!r}")
        check(spec_counts(port)[0], "vulkan -np 2: the MTP head drafted nothing")
        print("pipeline_serve_test: serve --device vulkan under -np 2: concurrent == solo == one process on the device")
    finally:
        stop(p)


def main():
    # One process's greedy answers, the reference.
    plain = {}
    for pr in PROMPTS:
        r = subprocess.run([BIN, "run", "-m", MODEL, "-p", pr, "-n", "24", "--temperature", "0", "-q", "-t", "1"],
                           capture_output=True, text=True, timeout=60, env=ENV)
        check(r.returncode == 0, f"run -p {pr!r} failed: {r.stderr}")
        plain[pr] = r.stdout
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    # The MTP head drafts unless told; each rank reports its resident weights (--pipeline-plan).
    p, port = start_server(log, extra=["--spec", "mtp", "--pipeline-plan"] + MICRO, ctx=API_CTX)
    try:
        solo = {pr: complete(port, pr) for pr in PROMPTS}
        mtp = spec_counts(port)
        check(mtp[0] and mtp[1], f"the MTP head drafted/accepted {mtp} tokens")
        # Half of them plain, batched with the drafted half: each gets its solo (drafted) text.
        together = at_once([(pr, lambda i=i, pr=pr: complete(port, pr, spec="off" if i % 2 else None))
                            for i, pr in enumerate(PROMPTS)], 90)
        for pr in PROMPTS:
            check(together.get(pr) == solo[pr], f"concurrent != solo for {pr!r}: {together.get(pr)!r} vs {solo[pr]!r}")
            check(plain[pr].startswith(solo[pr]) and solo[pr], f"split serve != one process for {pr!r}: "
                  f"{solo[pr]!r} vs {plain[pr]!r}")
        print("pipeline_serve_test: concurrent == solo == one process under -np 2; MTP drafted == plain (drafted",
              mtp[0], "accepted", mtp[1], ")")
        # Prompt lookup drafts: verified rows and commits that keep fewer reach rank 1 too.
        before = spec_counts(port)
        for pr in PROMPTS:
            drafted = complete(port, pr + pr, spec="lookup")
            check(drafted == complete(port, pr + pr, spec="off"), f"drafted != plain for {pr + pr!r}")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            metrics = r.read().decode()
        m = re.search(r"^qwen35_spec_drafted_tokens_total (\S+)", metrics, re.M)
        check(m and float(m.group(1)) > before[0], "no token was drafted by lookup")
        a = re.search(r"^qwen35_spec_accepted_tokens_total (\S+)", metrics, re.M)
        print("pipeline_serve_test: drafted == plain under -np 2 (drafted", m and m.group(1), "accepted",
              a and a.group(1), ")")
        apis_as_one_process(port)
        ranks = ranks_of(p.pid)
        resident_weights(log, ranks)
        top_k_return(log, p, ranks)
    finally:
        stop(p)
    resumed_fresh()
    on_vulkan()
    rank_fails(signal.SIGSTOP)
    rank_fails(signal.SIGKILL)
    rank_fails(signal.SIGKILL, stuck=True)
    if failures:
        raise SystemExit(f"pipeline_serve_test: {len(failures)} failures")
    print("pipeline_serve_test: all passed")


if __name__ == "__main__":
    main()
