#!/usr/bin/env python3
"""Text latency and server memory under concurrent image requests (issue 47's acceptance).

Starts `qwen35 serve` on MODEL, measures a short text chat request alone (median of 5), then
again while C clients keep sending chat requests of 8 PNG images each (made here with zlib: 8
gradients of SIZE x SIZE pixels; the image cache is off, so each request decodes all 8), and reports the text latencies, the image requests' statuses
and the server's peak RSS (VmHWM) against what its flags allow. Standard library only.

  tools/bench/image_admission.py build/qwen35 models/qwen35-tiny-kjv-vision \
      --clients 4 --size 1400 --ctx 65536 -- --image-mem-mb 1024
"""
import argparse, base64, json, os, re, statistics, struct, subprocess, sys, threading, time, urllib.request, zlib


def png(size, seed):
    rows = bytearray()
    base = bytes(((x + seed) & 255) for x in range(size * 3))
    for y in range(size):
        rows.append(0)
        rows.extend(base[y % 7:] + base[:y % 7])
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(bytes(rows), 9)) + chunk(b"IEND", b""))


def post(port, body, timeout=600, path="/v1/chat/completions"):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        e.read()
        status = e.code
    return status, time.monotonic() - t0


def text_body():
    return {"messages": [{"role": "user", "content": "Tell me a fortune."}], "max_tokens": 4, "temperature": 0}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary"), ap.add_argument("model")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--images", type=int, default=8)
    ap.add_argument("--size", type=int, default=1400)
    ap.add_argument("--ctx", type=int, default=65536)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--image-path", default="/v1/chat/completions",
                    help="where the image requests go: /tokenize decodes their images on the image lane "
                         "and stops there (the engine does not run their towers and prefills)")
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    a = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    a.flags = extra
    imgs = [base64.b64encode(png(a.size, s)).decode() for s in range(a.images)]
    # No image cache: every request decodes its 8 images again (the worst case for the lane).
    cmd = [a.binary, "serve", "-m", a.model, "--port", "0", "--ctx", str(a.ctx), "--parallel", "4", "-t", "2",
           "--image-cache-mb", "0"] + a.flags
    srv = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    port, log = None, []
    for line in srv.stderr:
        log.append(line)
        m = re.search(r"listening on http://127.0.0.1:(\d+)", line)
        if m:
            port = int(m.group(1))
        if "ready (" in line:
            break
    threading.Thread(target=lambda: [log.append(l) for l in srv.stderr], daemon=True).start()
    try:
        solo = sorted(post(port, text_body())[1] for _ in range(5))
        stop = threading.Event()
        statuses = []

        def client(k):
            while not stop.is_set():
                content = [{"type": "text", "text": "Describe these."}] + [
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64," + imgs[i]}}
                    for i in range(a.images)]
                s, dt = post(port, {"messages": [{"role": "user", "content": content}], "max_tokens": 4, "temperature": 0},
                             path=a.image_path)
                statuses.append(s)
                if s == 429:
                    time.sleep(1)  # as Retry-After says

        threads = [threading.Thread(target=client, args=(k,)) for k in range(a.clients)]
        for t in threads:
            t.start()
        time.sleep(2)  # the image requests are in flight
        loaded, loaded_at = [], []
        t0 = time.monotonic()
        t_end = t0 + a.seconds
        while time.monotonic() < t_end:
            loaded_at.append(time.monotonic() - t0)
            loaded.append(post(port, text_body())[1])
            time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join()
        hwm = 0
        with open(f"/proc/{srv.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    hwm = int(line.split()[1]) // 1024
        med = statistics.median(solo)
        out = {"solo_text_ms": round(med * 1000, 1),
               "loaded_text_ms_median": round(statistics.median(loaded) * 1000, 1),
               "loaded_text_ms_max": round(max(loaded) * 1000, 1),
               "loaded_text_ms_p90": round(sorted(loaded)[int(0.9 * (len(loaded) - 1))] * 1000, 1),
               "max_over_solo": round(max(loaded) / med, 1),
               "slowest_text_ms_at_s": [(round(dt * 1000), round(at, 1)) for dt, at in
                                        sorted(zip(loaded, loaded_at), reverse=True)[:5]],
               "text_requests": len(loaded),
               "image_requests": {str(s): statuses.count(s) for s in sorted(set(statuses))},
               "peak_rss_mib": hwm,
               "startup": [l.strip() for l in log if "images:" in l or "KV pool" in l]}
        print(json.dumps(out, indent=1))
    finally:
        srv.terminate()
        srv.wait(timeout=60)


if __name__ == "__main__":
    main()
