#!/usr/bin/env python3
"""HAProxy and three `qwen35 serve` replicas on loopback (issue 37's acceptance).

  tests/cluster/cluster_test.py BUILD/qwen35 [MODEL_DIR] [--json OUT]

One thread per replica, the bundled model by default. Every wait is for a state (a replica's
/ready, HAProxy's view of its servers, a process's exit) under a hard deadline; the whole run is
bounded by ALARM_S. Phases:
  affinity    conversations through `balance hash` stay on one replica and turn 2 onward is
              resumed from the prefix cache (>= 90 % of turns); the same load through
              `balance roundrobin` resumes a smaller share of its prompt tokens
  exactness   an answer through HAProxy == the same request to each replica alone, bit for bit
  balance     a few heavy keys: hash-balance-factor spreads them, no replica over its bound
  per-client  idle and half-sent connections of one client do not lock out another
  failover    SIGKILL of a replica mid-load: nothing not yet started is lost, what was in flight
              there ends with an error (no hang), its conversations continue elsewhere, correct
  rolling     SIGTERM (--drain-s) and restart of each replica in turn under load: zero failed
              requests, and the restarted replicas resume from the cache they wrote
  supervisor  scripts/cluster's restart policy on a simulated clock (backoff, limit, logged)
  script      scripts/cluster itself (2 replicas, its docstring's `-- flags` form): SIGKILL of
              a replica under load; no request after it fails, the script restarts it
Exits 1 naming the first broken expectation; prints the measured figures (--json writes them).
"""
import http.client
import importlib.machinery
import importlib.util
import json
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_loader = importlib.machinery.SourceFileLoader("cluster", os.path.join(ROOT, "scripts", "cluster"))
_spec = importlib.util.spec_from_loader("cluster", _loader)
cluster = importlib.util.module_from_spec(_spec)
_loader.exec_module(cluster)

ALARM_S = 300          # the whole test, whatever happens
REQUEST_TIMEOUT = 30   # one request: an answer that takes longer is a hang
WORDS = ("light darkness waters firmament heaven earth seed fruit herb beast fowl whale river "
         "garden serpent tree knowledge life river gold onyx stone rib flesh bone dust field "
         "cattle morning evening day night sign season star lamp greater lesser").split()


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def call(port, body, headers=None, path="/v1/chat/completions", stream=False,
         source="127.0.0.1"):
    """One request. Returns a dict: status (0: no answer), replica, key, body (JSON or None),
    cached, prompt, ttft (s), total (s), error ("" when the answer was whole)."""
    out = {"status": 0, "replica": "", "key": "", "body": None, "cached": 0, "prompt": 0,
           "ttft": None, "total": None, "error": "", "t0": time.monotonic()}
    body = dict(body)
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT,
                                      source_address=(source, 0))
    try:
        conn.request("POST", path, json.dumps(body),
                     {"Content-Type": "application/json", **(headers or {})})
        r = conn.getresponse()
        out["status"] = r.status
        out["replica"] = r.getheader("X-Qwen35-Replica", "")
        out["key"] = r.getheader("X-Qwen35-Affinity-Key", "")
        if not stream:
            out["body"] = json.loads(r.read())
            out["ttft"] = time.monotonic() - out["t0"]
            usage = (out["body"] or {}).get("usage") or {}
        else:
            text, usage, done = [], {}, False
            while True:
                line = r.readline()
                if not line:
                    break
                line = line.decode().strip()
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    done = True
                    break
                ev = json.loads(line[6:])
                if out["ttft"] is None and ev.get("choices"):
                    out["ttft"] = time.monotonic() - out["t0"]
                for c in ev.get("choices") or []:
                    text.append((c.get("delta") or {}).get("content") or "")
                if ev.get("usage"):
                    usage = ev["usage"]
            if not done and r.status == 200:
                out["error"] = "the stream ended without [DONE]"
            out["body"] = {"text": "".join(text)}
        out["prompt"] = usage.get("prompt_tokens", 0)
        out["cached"] = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    except socket.timeout:
        out["error"] = "hang: no answer within %d s" % REQUEST_TIMEOUT
    except (OSError, http.client.HTTPException, ValueError) as e:
        out["error"] = "%s: %s" % (type(e).__name__, e)
    finally:
        conn.close()
    out["total"] = time.monotonic() - out["t0"]
    if not out["error"] and out["status"] != 200:
        out["error"] = "HTTP %d" % out["status"]
    return out


class Conversation:
    """A chat whose first prompt is over 64 tokens of its own (no prefix shared with another)."""

    def __init__(self, name, seed):
        rng = random.Random(seed)
        opening = " ".join(rng.choice(WORDS) for _ in range(90))
        self.name = name
        self.messages = [{"role": "user", "content": "%s: %s" % (name, opening)}]
        self.turns = []

    def body(self, max_tokens=8):
        return {"messages": self.messages, "max_tokens": max_tokens, "temperature": 0}

    def turn(self, port, stream=False, key=True, max_tokens=8):
        headers = {"X-Session-Id": self.name} if key else {}
        r = call(port, self.body(max_tokens), headers, stream=stream)
        r["turn"] = len(self.turns) + 1
        self.turns.append(r)
        if not r["error"]:
            text = r["body"]["text"] if stream else r["body"]["choices"][0]["message"]["content"]
            self.messages.append({"role": "assistant", "content": text})
            self.messages.append({"role": "user", "content": "and then %d?" % len(self.turns)})
        return r


def run_threads(n, fn):
    ts = [threading.Thread(target=fn, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(REQUEST_TIMEOUT * 20)
        check(not t.is_alive(), "a load thread did not finish")


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * (len(xs) - 1) + 0.5))] if xs else 0.0


def conversations_load(port, prefix, n_conv, turns, threads, stream=True, settle=None):
    """n_conv conversations, `turns` turns each, `threads` at a time; returns them. `settle`:
    called before each request (a wait for a state)."""
    convs = [Conversation("%s-%d" % (prefix, i), hash((prefix, i)) & 0xffff) for i in range(n_conv)]

    def work(k):
        mine = convs[k::threads]
        for _ in range(turns):
            for c in mine:
                if settle:
                    settle()
                c.turn(port, stream=stream)
    run_threads(threads, work)
    return convs


def summarize(convs):
    later = [t for c in convs for t in c.turns if t["turn"] >= 2]
    per_turn = {}
    for c in convs:
        for t in c.turns:
            per_turn.setdefault(t["turn"], []).append(t["ttft"] or 0.0)
    return {
        "turns_cached_share": sum(1 for t in later if t["cached"] > 0) / max(1, len(later)),
        "tokens_cached_share": sum(t["cached"] for t in later) / max(1, sum(t["prompt"] for t in later)),
        "ttft_p50_by_turn": {k: round(pct(v, 0.5), 4) for k, v in sorted(per_turn.items())},
        "ttft_p99_by_turn": {k: round(pct(v, 0.99), 4) for k, v in sorted(per_turn.items())},
        "ttft_p50_later": round(pct([t["ttft"] or 0.0 for t in later], 0.5), 4),
        "replicas": sorted({t["replica"] for c in convs for t in c.turns}),
        "errors": [t["error"] for c in convs for t in c.turns if t["error"]],
    }


class Cluster:
    def __init__(self, binary, model, state, n=3):
        extra = ["--drain-s", "10", "--max-connections-per-client", "8", "--parallel", "2",
                 "--read-timeout", "10"]
        self.replicas = [cluster.Replica(binary, model, "r%d" % (i + 1), state, 1, extra)
                         for i in range(n)]
        self.state = state
        self.balancers = []

    def start(self):
        for r in self.replicas:
            r.start()
        for r in self.replicas:
            r.wait_ready()

    def balancer(self, balance):
        lb = cluster.Balancer(os.path.join(self.state), self.replicas, balance,
                              stats_socket=os.path.join(self.state, "lb-%s.sock" % balance))
        lb.start()
        self.balancers.append(lb)
        return lb

    def stop(self):
        for lb in self.balancers:
            lb.stop()
        for r in self.replicas:
            r.stop()


def phase_affinity(cl, hash_lb, rr_lb, figures):
    # One at a time, the balance factor never bites: every conversation keeps its replica. (A
    # request is sent once HAProxy counts none in flight: it releases a finished one a moment
    # after the client has the answer, and one still counted would be load.)
    def idle():
        cluster.wait_for("HAProxy to count no request in flight",
                         lambda: all(v == "0" for v in hash_lb.server_field("scur").values()), 10)
    seq = conversations_load(hash_lb.port, "seq", 6, 3, 1, settle=idle)
    ss = summarize(seq)
    check(not ss["errors"], "affinity: failed requests: %s" % ss["errors"][:3])
    for c in seq:
        reps = {t["replica"] for t in c.turns}
        check(len(reps) == 1, "affinity: %s moved between replicas %s" % (c.name, sorted(reps)))
    check(ss["turns_cached_share"] >= 0.9,
          "affinity: only %.0f %% of turns 2+ were resumed from the cache" % (100 * ss["turns_cached_share"]))
    # Three at a time (one per replica on average): a conversation may spill to the next replica
    # when its own holds more than twice the average in flight (hash-balance-factor 200).
    # The spill rate depends on how the requests overlap (the machine's load): it is measured,
    # and the comparison with round-robin checked, not a threshold.
    a = conversations_load(hash_lb.port, "aff", 10, 4, 3)
    sa = summarize(a)
    check(not sa["errors"], "affinity: failed requests: %s" % sa["errors"][:3])
    sa["moved_conversations"] = sum(1 for c in a if len({t["replica"] for t in c.turns}) > 1)
    b = conversations_load(rr_lb.port, "rr", 10, 4, 3)
    sb = summarize(b)
    check(not sb["errors"], "roundrobin: failed requests: %s" % sb["errors"][:3])
    check(sb["tokens_cached_share"] < sa["tokens_cached_share"],
          "roundrobin resumed %.2f of prompt tokens, affinity %.2f" %
          (sb["tokens_cached_share"], sa["tokens_cached_share"]))
    figures["affinity_one_at_a_time"] = ss
    figures["affinity"], figures["roundrobin"] = sa, sb
    print("cluster_test: one at a time: every conversation on one replica, %.0f %% of turns 2+ "
          "cached" % (100 * ss["turns_cached_share"]), flush=True)
    print("cluster_test: three at a time: affinity: %.0f %% of turns 2+ cached (%.0f %% of their prompt tokens), "
          "TTFT p50 %.3f s; roundrobin: %.0f %% (%.0f %%), TTFT p50 %.3f s" %
          (100 * sa["turns_cached_share"], 100 * sa["tokens_cached_share"], sa["ttft_p50_later"],
           100 * sb["turns_cached_share"], 100 * sb["tokens_cached_share"], sb["ttft_p50_later"]),
          flush=True)
    return a


def answer_of(r):
    """What must be equal bit for bit: the choices (text, logprobs, finish) and usage counts."""
    b = r["body"]
    return json.dumps([b["choices"], b["usage"]["completion_tokens"], b["usage"]["prompt_tokens"]],
                      sort_keys=True)


def phase_exactness(cl, lb, convs):
    # A cold prompt and a conversation's next turn (resumed from the cache on its replica,
    # computed from token 0 on the others).
    for body in (Conversation("exact", 99).body(12), convs[0].body(12)):
        body = dict(body, logprobs=True, top_logprobs=3)
        via = call(lb.port, body, {"X-Session-Id": "exact"} if "exact" in json.dumps(body) else {"X-Session-Id": convs[0].name})
        check(not via["error"], "exactness: through HAProxy: %s" % via["error"])
        for r in cl.replicas:
            alone = call(r.port, body)
            check(not alone["error"], "exactness: %s alone: %s" % (r.rid, alone["error"]))
            check(answer_of(alone) == answer_of(via),
                  "exactness: %s alone differs from the answer through HAProxy (%s)" %
                  (r.rid, via["replica"]))
    print("cluster_test: exactness: through HAProxy == each replica alone, bit for bit", flush=True)


def phase_balance(cl, lb, figures):
    """Six clients on one heavy key: without the balance factor its replica would serve every
    request. HAProxy (bounded-load consistent hashing) lets a replica take a new request only
    while it serves fewer than its share of ceil((in flight + 1) x factor / 100) slots: with six
    in flight, factor 200 and three equal replicas, 4 of them, so the heavy key's replica serves
    about two thirds of the requests and the rest spill to the next replicas on the ring. HAProxy
    counts a request in flight until a moment after its client has the answer, so a seventh can
    be counted: the share is checked with that slack (at most 0.8, against 1.0 without)."""
    lb.command("clear counters")
    served = []
    lock = threading.Lock()

    def work(k):
        for i in range(6):
            key = "heavy"
            body = {"prompt": "In the beginning %s %d" % (key, i), "max_tokens": 48,
                    "ignore_eos": True, "temperature": 0}
            r = call(lb.port, body, {"X-Session-Id": key}, path="/v1/completions")
            with lock:
                served.append((key, r["replica"], r["error"]))
    run_threads(6, work)
    errors = [e for _, _, e in served if e]
    check(not errors, "balance: failed requests: %s" % errors[:3])
    heavy = {rep for k, rep, _ in served if k == "heavy"}
    share = {r.rid: sum(1 for _, rep, _ in served if rep == r.rid) / len(served) for r in cl.replicas}
    figures["balance"] = {"heavy_key_replicas": sorted(heavy), "share": share}
    print("cluster_test: balance: heavy key on %s, shares %s" %
          (sorted(heavy), {k: round(v, 2) for k, v in share.items()}), flush=True)
    smax = lb.server_field("smax")
    figures["balance"]["smax"] = smax
    print("cluster_test: balance: most requests in flight at once per replica %s" % smax, flush=True)
    check(len(heavy) >= 2, "balance: the heavy key never spilled from %s" % sorted(heavy))
    check(max(share.values()) <= 0.8,
          "balance: one replica took %.0f %% of the requests" % (100 * max(share.values())))


def phase_per_client(cl, lb):
    """Client A (127.0.0.2) holds 40 idle and 20 half-sent connections through HAProxy and fills
    its own cap (8) on a replica directly; client B (127.0.0.3) is still served, both ways."""
    held = []
    try:
        for i in range(60):
            s = socket.create_connection(("127.0.0.1", lb.port), timeout=5,
                                         source_address=("127.0.0.2", 0))
            if i >= 40:
                s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
            held.append(s)
        direct = cl.replicas[0]
        for i in range(8):
            held.append(socket.create_connection(("127.0.0.1", direct.port), timeout=5,
                                                  source_address=("127.0.0.2", 0)))
        r = call(lb.port, Conversation("client-b", 7).body(4), source="127.0.0.3")
        check(not r["error"], "per-client: client B through HAProxy: %s" % r["error"])
        r = call(direct.port, Conversation("client-b", 7).body(4), source="127.0.0.3")
        check(not r["error"], "per-client: client B directly: %s" % r["error"])
        # A's ninth direct connection is over its cap: refused with 503 at accept.
        extra = socket.create_connection(("127.0.0.1", direct.port), timeout=5,
                                         source_address=("127.0.0.2", 0))
        got = extra.recv(200)
        extra.close()
        check(got.startswith(b"HTTP/1.1 503"), "per-client: A's 9th connection got %r" % got[:40])
    finally:
        for s in held:
            s.close()
    print("cluster_test: per-client: client A's 68 connections leave client B served", flush=True)


def servers_up(lb, want):
    """HAProxy's own view (its stats socket): the servers in `want` are UP."""
    state = lb.server_states()
    return all(state.get(rid) == "UP" for rid in want)


def phase_failover(cl, lb, figures):
    victim = cl.replicas[1]
    convs = [Conversation("fo-%d" % i, 500 + i) for i in range(8)]
    results, lock, kill_at = [], threading.Lock(), []
    done_before = threading.Event()

    def work(k):
        mine = convs[k::4]
        for _ in range(8):
            for c in mine:
                r = c.turn(lb.port, stream=(k % 2 == 0), max_tokens=32)
                with lock:
                    results.append((c.name, r))
                    if len(results) >= 10:
                        done_before.set()
    killer = threading.Thread(target=lambda: (done_before.wait(60), kill_at.append(time.monotonic()),
                                              victim.proc.send_signal(signal.SIGKILL)))
    killer.start()
    run_threads(4, work)
    killer.join(70)
    check(kill_at, "failover: the kill never happened")
    t_kill = kill_at[0]
    failed = [(n, r) for n, r in results if r["error"]]
    for n, r in failed:
        check("hang" not in r["error"], "failover: %s hung: %s" % (n, r["error"]))
        check(r["t0"] <= t_kill,
              "failover: a request started %.2f s after the kill failed: %s" % (r["t0"] - t_kill, r["error"]))
    after = [(n, r) for n, r in results if r["t0"] > t_kill]
    check(after, "failover: no request ran after the kill")
    check(all(r["replica"] != victim.rid for _, r in after),
          "failover: a request was answered by the killed replica")
    moved = {n for n, r in results if r["replica"] == victim.rid and r["t0"] < t_kill}
    check(moved, "failover: the killed replica held no conversation")
    # A moved conversation's next answer, recomputed elsewhere, equals a survivor's answer alone.
    c = next(c for c in convs if c.name in moved)
    via = call(lb.port, dict(c.body(12), logprobs=True), {"X-Session-Id": c.name})
    alone = call(cl.replicas[0].port, dict(c.body(12), logprobs=True))
    check(not via["error"] and not alone["error"], "failover: %s / %s" % (via["error"], alone["error"]))
    check(answer_of(via) == answer_of(alone), "failover: a moved conversation's answer differs")
    figures["failover"] = {"requests": len(results), "failed_in_flight": len(failed),
                           "moved_conversations": len(moved)}
    print("cluster_test: failover: %d requests, %d in flight on the killed replica failed visibly, "
          "%d conversations moved" % (len(results), len(failed), len(moved)), flush=True)
    victim.start()
    victim.wait_ready()
    cluster.wait_for("HAProxy to see every replica up", lambda: servers_up(lb, [r.rid for r in cl.replicas]), 30)


def phase_rolling(cl, lb, figures):
    convs = [Conversation("roll-%d" % i, 900 + i) for i in range(9)]
    for c in convs:  # each conversation's first turn, on its replica, before any restart
        r = c.turn(lb.port)
        check(not r["error"], "rolling: warm-up: %s" % r["error"])
    stop, results, lock = threading.Event(), [], threading.Lock()

    def work(k):
        mine = convs[k::3]
        while not stop.is_set():
            for c in mine:
                r = c.turn(lb.port, stream=(k == 0), max_tokens=6)
                with lock:
                    results.append(r)
                if len(c.turns) > 40:  # bounded history
                    c.messages = c.messages[:1]
    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    try:
        for rep in cl.replicas:
            rep.signal(signal.SIGTERM)
            check(rep.wait_exit(20) == 0, "rolling: %s did not exit 0 after SIGTERM" % rep.rid)
            check("saved " in rep.log().split("--- start")[-1], "rolling: %s saved no cache" % rep.rid)
            rep.start()
            rep.wait_ready()
            cluster.wait_for("HAProxy to see %s up" % rep.rid, lambda: servers_up(lb, [rep.rid]), 30)
    finally:
        stop.set()
        for t in threads:
            t.join(REQUEST_TIMEOUT * 3)
    failed = [r["error"] for r in results if r["error"]]
    check(not failed, "rolling: %d of %d requests failed: %s" % (len(failed), len(results), failed[:3]))
    for rep in cl.replicas:
        last = rep.log().split("--- start")[-1]
        check("loaded " in last and "loaded 0 " not in last,
              "rolling: %s loaded no cache at restart: %s" % (rep.rid, last[:400]))
    # The first turn after the restarts resumes from the cache the replicas wrote and read back.
    resumed = [c.turn(lb.port) for c in convs]
    check(all(not r["error"] for r in resumed), "rolling: after the restarts: %s" % [r["error"] for r in resumed])
    share = sum(1 for r in resumed if r["cached"] > 0) / len(resumed)
    figures["rolling"] = {"requests": len(results), "failed": 0, "resumed_cached_share": share}
    print("cluster_test: rolling restart: %d requests, none failed; %.0f %% of the first turns "
          "after it resumed from the persisted cache" % (len(results), 100 * share), flush=True)
    check(share >= 0.9, "rolling: only %.0f %% resumed from the cache after the restart" % (100 * share))


class _FakeProc:
    def __init__(self):
        self.code = None

    def poll(self):
        return self.code


class _FakeReplica:
    """What the Supervisor reads of a replica, without a process: start() counts."""

    def __init__(self, rid):
        self.rid, self.port, self.starts, self.started_at = rid, 1, 1, 0.0
        self.log_path, self.proc = rid + ".log", _FakeProc()

    def start(self):
        self.starts += 1
        self.proc = _FakeProc()


def phase_supervisor_logic():
    """The restart policy on a simulated clock: each quick death doubles the backoff, a replica
    that ran past QUICK_S starts again from the first backoff, and after max_restarts quick
    deaths in a row it is given up on (logged); the cluster ends only when all are."""
    lines = []
    a, b = _FakeReplica("a"), _FakeReplica("b")
    sup = cluster.Supervisor([a, b], backoff_s=1.0, max_restarts=3, log=lines.append)
    now, waits = 0.0, []
    for _ in range(3):  # a dies at once after each start
        a.proc.code = -9
        sup.poll(now)
        waits.append(sup.due["a"] - now)
        check(a.starts == 1 + len(waits) - 1, "supervisor: restarted before its backoff")
        now = sup.due["a"]
        sup.poll(now)
        a.started_at = now
    check(waits == [1.0, 2.0, 4.0], "supervisor: backoffs %s, not doubling from 1 s" % waits)
    a.proc.code = 1
    sup.poll(now + 1)  # the fourth quick death in a row: given up
    check("a" in sup.given_up and "giving up on it" in lines[-1], "supervisor: %s" % lines[-1:])
    check(not sup.all_given_up(), "supervisor: b still runs")
    b.proc.code = 0  # b ran past QUICK_S: its backoff starts from 1 s again
    sup.poll(cluster.Supervisor.QUICK_S + 5)
    check(sup.due["b"] - (cluster.Supervisor.QUICK_S + 5) == 1.0 and sup.quick["b"] == 0,
          "supervisor: a death after a long run kept the quick count")
    check(any("a exited with signal 9; restarting it in 1 s" in l for l in lines),
          "supervisor: the exit was not logged: %s" % lines)
    print("cluster_test: supervisor: backoffs 1, 2, 4 s, given up after 3 quick restarts", flush=True)


def phase_script(binary, model, state):
    """scripts/cluster itself, started as its docstring says (flags for the replicas after --):
    SIGKILL of a replica under it. Requests keep being answered (none started after the kill
    fails), the script restarts the replica (a new pid, /ready, HAProxy sees it UP again, it
    answers), logs the death and the restart, and exits 0 on SIGTERM."""
    sdir = os.path.join(state, "script")
    err_path = os.path.join(state, "script.err")
    err = open(err_path, "w")
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "scripts", "cluster"), "2", "-m", model,
                             "--port", "0", "--binary", binary, "--dir", sdir,
                             "--restart-backoff-s", "0.2", "--",
                             "--parallel", "2", "--drain-s", "5"],
                            stdout=subprocess.PIPE, stderr=err, text=True,
                            preexec_fn=cluster._die_with_parent)
    err.close()
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()

    def log():
        with open(err_path, errors="replace") as f:
            return f.read()
    try:
        def up_line():
            if proc.poll() is not None:
                raise Failure("script: exited %s: %s" % (proc.returncode, log()[-1500:]))
            return any("behind HAProxy at" in l for l in lines)
        cluster.wait_for("scripts/cluster to start", up_line, 90)
        line = next(l for l in lines if "behind HAProxy at" in l)
        port = int(line.rsplit(":", 1)[1])
        ports = {rid: int(p) for rid, p in re.findall(r"(r\d) http://127\.0\.0\.1:(\d+)", line)}
        sock = os.path.join(sdir, "haproxy.sock")
        both = lambda: all(v == "UP" for v in cluster.server_field(sock, "status").values())
        cluster.wait_for("HAProxy to see both replicas up", both, 30)
        with open(os.path.join(sdir, "r2.pid")) as f:
            old_pid = int(f.read())
        stop, results = threading.Event(), []

        def load():
            i = 0
            while not stop.is_set():
                body = {"prompt": "In the beginning %d" % i, "max_tokens": 4, "temperature": 0}
                results.append(call(port, body, {"X-Session-Id": "sup-%d" % (i % 8)},
                                    path="/v1/completions"))
                i += 1
        t = threading.Thread(target=load)
        t.start()
        try:
            cluster.wait_for("requests before the kill", lambda: len(results) >= 4, 30)
            t_kill = time.monotonic()
            os.kill(old_pid, signal.SIGKILL)

            def new_pid():
                with open(os.path.join(sdir, "r2.pid")) as f:
                    return int(f.read() or 0)
            cluster.wait_for("the script to restart r2", lambda: new_pid() not in (0, old_pid), 30)
            cluster.wait_for("r2 ready again", lambda: cluster.http_status(
                "http://127.0.0.1:%d/ready" % ports["r2"]) == 200, 60)
            cluster.wait_for("HAProxy to see r2 up again", both, 30)
            n = len(results)
            cluster.wait_for("requests after the restart", lambda: len(results) >= n + 4, 60)
        finally:
            stop.set()
            t.join(REQUEST_TIMEOUT * 2)
        after = [r for r in results if r["t0"] > t_kill]
        failed = [r["error"] for r in after if r["error"]]
        check(after and not failed, "script: %d of %d requests after the kill failed: %s" %
              (len(failed), len(after), failed[:3]))
        direct = call(ports["r2"], {"prompt": "In the beginning", "max_tokens": 2}, path="/v1/completions")
        check(not direct["error"], "script: the restarted r2: %s" % direct["error"])
        check(proc.poll() is None, "script: exited after a replica's death")
        text = log()
        check("r2 exited with signal 9; restarting it in" in text and "restarting r2 on port %d" %
              ports["r2"] in text, "script: the death and restart were not logged: %s" % text[-800:])
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
        check(code == 0, "script: exit %d after SIGTERM" % code)
        print("cluster_test: scripts/cluster: r2 killed and restarted under load, %d requests after "
              "the kill, none failed" % len(after), flush=True)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def on_alarm(sig, _frame):
    raise Failure("the test ran past %d s" % ALARM_S if sig == signal.SIGALRM else "terminated")


def main():
    args = sys.argv[1:]
    out_json = None
    if "--json" in args:
        i = args.index("--json")
        out_json = args[i + 1]
        del args[i:i + 2]
    if not args:
        sys.exit(__doc__)
    binary = os.path.abspath(args[0])
    model = os.path.abspath(args[1]) if len(args) > 1 else os.path.join(ROOT, "models", "qwen35-tiny-kjv")
    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGTERM, on_alarm)
    signal.alarm(ALARM_S)
    t0 = time.monotonic()
    figures = {}
    with tempfile.TemporaryDirectory(prefix="qwen35-cluster-test-") as state:
        cl = Cluster(binary, model, state)
        try:
            cl.start()
            hash_lb, rr_lb = cl.balancer("hash"), cl.balancer("roundrobin")
            convs = phase_affinity(cl, hash_lb, rr_lb, figures)
            phase_exactness(cl, hash_lb, convs)
            phase_balance(cl, hash_lb, figures)
            phase_per_client(cl, hash_lb)
            phase_failover(cl, hash_lb, figures)
            phase_rolling(cl, hash_lb, figures)
            cl.stop()
            phase_supervisor_logic()
            phase_script(binary, model, state)
        except (Failure, RuntimeError, OSError) as e:
            print("cluster_test: FAILED: %s" % e, file=sys.stderr)
            for r in cl.replicas:
                if os.path.exists(r.log_path):
                    print("--- %s log (tail)\n%s" % (r.rid, r.log()[-1500:]), file=sys.stderr)
            sys.exit(1)
        finally:
            signal.alarm(0)
            cl.stop()
    figures["seconds"] = round(time.monotonic() - t0, 1)
    if out_json:
        with open(out_json, "w") as f:
            json.dump(figures, f, indent=1)
    print("cluster_test: all phases passed in %.0f s" % figures["seconds"], flush=True)


if __name__ == "__main__":
    main()
