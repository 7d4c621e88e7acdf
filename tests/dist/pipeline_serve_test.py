#!/usr/bin/env python3
"""`qwen35 serve` on a model split over two MPI ranks (docs/design.md "Past one machine"):
concurrent == solo over HTTP (requests batched together in the engine's steps give each the text
it gets alone), the split server's answers equal one process's (`qwen35 run`, greedy), and
drafted == plain (the MTP head on the last rank, the server's default, batched with plain
requests; prompt lookup: verified rows, commits that keep fewer, on every rank);
resumed == fresh: with the prefix cache on, a prompt extended, a branch from it and n=2 forks of
one prompt get, bit for bit (text and logprobs), what a one-process server without the cache
computes from scratch, and the split server did resume; with MTP drafting on both, the split
server drafts and accepts as many tokens as the one process (the head's cache and hidden row,
resumed and forked on the last rank, give a fresh computation's drafts: counts show a wrong
fork's row), and a split server without drafting gives the same answers; also after a restart
from --cache-dir (each rank its own files; a damaged part drops its snapshot on every rank;
another split skips the files with a warning). Then
rank 1 is stopped while a request runs: rank 0 answers it with an HTTP error naming the cause, and
every rank is gone within 10 s; and rank 1 is killed while a request runs: the client gets an error
(mpirun ends rank 0 at once, the connection closes), not a hang, and every rank is gone within
10 s. Bounded: every wait has a deadline.

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


def start_server(log, delay=None, np=2, extra=()):
    env = dict(ENV)
    hook = []
    if delay:  # rank 0 waits between steps (the test hook), so a request is mid-stream for long
        env["QWEN35_PIPELINE_TEST_DELAY"] = str(delay)
        hook = ["-x", "QWEN35_PIPELINE_TEST_DELAY"]
    mpi = ["mpirun", "-np", str(np), "--mca", "btl", "self,tcp"] + hook if np > 1 else []
    p = subprocess.Popen(mpi + [BIN, "serve", "-m", MODEL, "--port", "0", "--parallel", "4", "--ctx", "256", "-t", "1"] +
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
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except OSError:
        pass
    p.wait(10)


def stopped(failures):
    """Rank 1 stopped (SIGSTOP) mid-request: rank 0 answers the request with an HTTP error once
    the heartbeat finds rank 1 silent, then every rank is gone within 10 s."""
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    p, port = start_server(log, delay=0.2)
    try:
        ranks = ranks_of(p.pid)
        result = {}

        def request():
            try:
                result["text"] = complete(port, PROMPTS[0], n=200, timeout=30)
            except urllib.error.HTTPError as e:
                result["status"] = e.code
                result["body"] = e.read().decode(errors="replace")
            except Exception as e:  # noqa: BLE001
                result["error"] = repr(e)

        t = threading.Thread(target=request)
        t.start()
        time.sleep(1.5)
        os.kill(ranks[1], signal.SIGSTOP)
        t0 = time.time()
        t.join(10)
        check(not t.is_alive(), "the client hangs after rank 1 was stopped")
        check(result.get("status", 0) >= 500, f"no HTTP error for the request in flight: {result}")
        check("silent" in result.get("body", ""), f"the error does not say a rank is silent: {result}")
        while time.time() - t0 < 10 and alive(ranks[0]):
            time.sleep(0.1)
        check(not alive(ranks[0]), "rank 0 still alive 10 s after rank 1 stopped")
        print("pipeline_serve_test: a stopped rank: HTTP", result.get("status"), "for the request in flight, "
              "every rank gone within 10 s")
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
    for name, np, extra in (("fresh", 1, ["--no-prefix-cache"] + mtp), ("split", 2, mtp + ["--cache-dir", cache_dir]),
                            ("restarted", 2, mtp + ["--cache-dir", cache_dir]),
                            ("evicting", 2, ["--cache-mb", "0.4", "--cache-dir", cache_dir, "--pipeline-split", "4"])):
        if name == "restarted":
            check(sorted(os.listdir(cache_dir)) == ["np2-r0-L0-6", "np2-r1-L6-8"],
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
    for name in ("split", "restarted"):
        check(counts["fresh"][1] and counts[name] == counts["fresh"],
              f"MTP drafted/accepted: {name} {counts[name]}, one process without the cache {counts['fresh']}")
    print("pipeline_serve_test: resumed == fresh under -np 2 (extended, branch, n=2 forks; with evictions; "
          "restarted from --cache-dir with one rank's part damaged; another split skips the files; "
          "MTP drafted/accepted", counts["split"], "as one process)")


def main():
    # One process's greedy answers, the reference.
    plain = {}
    for pr in PROMPTS:
        r = subprocess.run([BIN, "run", "-m", MODEL, "-p", pr, "-n", "24", "--temperature", "0", "-q", "-t", "1"],
                           capture_output=True, text=True, timeout=60, env=ENV)
        check(r.returncode == 0, f"run -p {pr!r} failed: {r.stderr}")
        plain[pr] = r.stdout
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    p, port = start_server(log, extra=["--spec", "mtp"])  # the MTP head drafts unless told
    try:
        solo = {pr: complete(port, pr) for pr in PROMPTS}
        mtp = spec_counts(port)
        check(mtp[0] and mtp[1], f"the MTP head drafted/accepted {mtp} tokens")
        # Half of them plain, batched with the drafted half: each gets its solo (drafted) text.
        together = {}
        threads = [threading.Thread(target=lambda i=i, pr=pr: together.__setitem__(
                       pr, complete(port, pr, spec="off" if i % 2 else None)))
                   for i, pr in enumerate(PROMPTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
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
    finally:
        stop(p)
    resumed_fresh()
    stopped(failures)
    # Kill rank 1 while a request streams (rank 0 waits 0.2 s between steps).
    log2 = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    p, port = start_server(log2, delay=0.2)
    try:
        ranks = ranks_of(p.pid)
        check(set(ranks) == {0, 1}, f"ranks found: {ranks}")
        result = {}

        def long_request():
            try:
                result["text"] = complete(port, PROMPTS[0], n=200, timeout=30)
            except Exception as e:  # noqa: BLE001: any error is what the client must get
                result["error"] = repr(e)

        t = threading.Thread(target=long_request)
        t.start()
        time.sleep(1.5)
        os.kill(ranks[1], signal.SIGKILL)
        t0 = time.time()
        while time.time() - t0 < 10 and alive(ranks[0]):
            time.sleep(0.1)
        check(not alive(ranks[0]), "rank 0 still alive 10 s after rank 1 was killed")
        t.join(30)
        check(not t.is_alive(), "the client hangs after rank 1 was killed")
        check("error" in result or "text" in result, "no outcome for the client")
        check("error" in result, "the request finished although rank 1 was killed mid-stream")
        print("pipeline_serve_test: a killed rank ends the server within 10 s; the client got",
              result.get("error", "")[:80])
    finally:
        stop(p)
    if failures:
        print(open(log.name).read(), open(log2.name).read(), file=sys.stderr)
        raise SystemExit(f"pipeline_serve_test: {len(failures)} failures")
    print("pipeline_serve_test: all passed")


if __name__ == "__main__":
    main()
