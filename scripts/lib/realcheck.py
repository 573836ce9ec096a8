"""What the checks against real servers share (scripts/check-*.sh): HTTP calls, Prometheus
counters, SSE events, a pass/fail tally, lingo's view of a fleet, and the fault scenario every
real server goes through. Standard library only; every call is bounded by a timeout."""
import http.client
import json
import time
import urllib.error
import urllib.parse
import urllib.request


def call(base, path, body=None, headers=None):
    """(status, headers, text) of a GET (no body) or a JSON POST, whatever the status."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def metric(base, name, **labels):
    """The sum of a counter's or gauge's series at base's /metrics, those with these labels."""
    text = call(base, "/metrics")[2]
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def sse(text):
    """A stream's events, parsed, with the literal "[DONE]" kept as a string."""
    out = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        data = [l[5:].lstrip() for l in block.splitlines() if l.startswith("data:")]
        if data:
            d = "\n".join(data)
            out.append(d if d == "[DONE]" else json.loads(d))
    return out


class Checks:
    """Prints each check as it is made and keeps the tally."""

    def __init__(self):
        self.passed, self.failed = 0, []

    def __call__(self, what, ok, detail=""):
        print(("ok   " if ok else "FAIL ") + what + ("" if ok else f": {detail}"), flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed.append(what)

    def exit(self, title="checks"):
        print(f"{self.passed} {title} passed, {len(self.failed)} failed"
              + (": " + ", ".join(self.failed) if self.failed else ""))
        raise SystemExit(1 if self.failed else 0)


def fleet(px):
    """The endpoints of lingo's first pool, as /fleet lists them."""
    return json.loads(call(px, "/fleet")[2])["pools"][0]["endpoints"]


def until(seconds, done):
    """Polls done() every 0.1 s for at most seconds; its last answer."""
    end = time.time() + seconds
    while not done() and time.time() < end:
        time.sleep(0.1)
    return done()


def abandon(base, path, body, events=3):
    """Sends a streaming request, reads `events` events, and closes the connection."""
    url = urllib.parse.urlparse(base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    seen = 0
    while seen < events:
        line = resp.fp.readline()
        if not line:
            break
        seen += line.startswith(b"data:")
    conn.sock.close()
    conn.close()


def long_stream(model):
    """A streamed completion of 900 tokens, far longer than any check waits for."""
    return {"model": model, "prompt": "Once upon a time", "max_tokens": 900,
            "ignore_eos": True, "stream": True}


def fault_checks(check, up, px, tx, model, server, idle, generated, abandoned):
    """Client keys, a first-token timer that fires and clients that leave mid-stream, against
    a real server: each must stop it generating (`idle()` true again soon, long before the 900
    tokens asked are done) and be counted exactly once by lingo. `px` is lingo in front of it,
    `tx` lingo with `--timeout-first-token 1ms` and the key `sk-check-key`; `generated` the
    server's own generated-token counter; `abandoned` the (path, body) of each stream to leave."""
    long = long_stream(model)
    key = {"Authorization": "Bearer sk-check-key"}
    status, _, body = call(tx, "/v1/completions", {**long, "stream": False, "max_tokens": 4})
    check("no key: 401 in OpenAI's shape", status == 401 and "error" in json.loads(body), body)
    status, _, body = call(tx, "/v1/messages", {"model": model, "max_tokens": 4,
                           "messages": [{"role": "user", "content": "hi"}]}, {"x-api-key": "wrong"})
    check("wrong key: 401 in Anthropic's shape",
          status == 401 and json.loads(body)["error"]["type"] == "authentication_error", body)

    # A first token later than timeouts.first_token (1 ms): a 504 before anything was sent, or
    # the in-band error after; either way the server stops and lingo counts one timeout.
    # The server may notice the closed connection only after its prompt processing, so idle
    # is given as long as the abandoned streams below; what tells a stop from a finish is
    # how few of the 900 tokens it generated.
    before = metric(tx, "lingo_requests_total")
    spent = metric(up, generated)
    status, _, body = call(tx, "/v1/completions", long, key)
    check(f"first_token timer fires against {server}", status == 504 or '"error"' in body,
          f"{status} {body[:300]}")
    check(f"{server} stopped generating after the timeout", until(10, idle))
    spent = metric(up, generated) - spent
    check(f"after the timeout {server} generated {spent:g} of the 900 tokens asked (< 450)",
          spent < 450)
    check("the timeout is counted once",
          metric(tx, "lingo_requests_total") - before == 1
          and metric(tx, "lingo_requests_total", outcome="timeout") == 1
          and metric(tx, "lingo_errors_total", kind="timeout_first_token") == 1)

    # A client that leaves after three events: lingo closes the upstream connection.
    for path, body in abandoned:
        spent = metric(up, generated)
        before = metric(px, "lingo_requests_total", outcome="cancelled")
        abandon(px, path, body or long)
        check(f"{path} abandoned mid-stream: {server} stopped generating", until(10, idle))
        cancelled = lambda: metric(px, "lingo_requests_total", outcome="cancelled") - before
        check(f"{path}: the abandoned stream is counted once, cancelled",
              until(10, lambda: cancelled() >= 1) and cancelled() == 1)
        check(f"{path}: in-flight back to 0", metric(px, "lingo_requests_in_flight") == 0)
        spent = metric(up, generated) - spent
        check(f"{path}: {server} generated {spent:g} of the 900 tokens asked (< 450)", spent < 450)


# Readers of each client dialect's answer: (the completion tokens the client was told, or None
# where the dialect tells none, and the text), streamed or whole.
def read_sglang(body, stream):
    last = [e for e in sse(body) if e != "[DONE]"][-1] if stream else json.loads(body)
    return last["meta_info"]["completion_tokens"], last["text"]


def read_openai(body, stream, chat):
    if not stream:
        v = json.loads(body)
        c = v["choices"][0]
        return v["usage"]["completion_tokens"], c["message"]["content"] if chat else c["text"]
    n, text = None, ""
    for e in sse(body):
        if e == "[DONE]":
            continue
        for c in e.get("choices", []):
            text += (c.get("delta", {}).get("content") or "") if chat else c.get("text", "")
        if e.get("usage"):
            n = e["usage"]["completion_tokens"]
    return n, text


def read_llamacpp(body, stream):
    if not stream:
        v = json.loads(body)
        return v["tokens_predicted"], v["content"]
    events = sse(body)
    assert "[DONE]" not in events, "native stream sends no [DONE]"
    return events[-1]["tokens_predicted"], "".join(e["content"] for e in events)


def read_ollama(body, stream):
    objs = [json.loads(l) for l in body.splitlines() if l.strip()]
    text = "".join(o.get("response") or (o.get("message") or {}).get("content", "") for o in objs)
    return objs[-1].get("eval_count", 0), text


def read_tgi(body, stream):
    if not stream:
        v = json.loads(body)
        v = v[0] if isinstance(v, list) else v
        return v["details"]["generated_tokens"], v["generated_text"]
    last = sse(body)[-1]
    return last["details"]["generated_tokens"], last["generated_text"]


def read_anthropic(body, stream):
    if not stream:
        v = json.loads(body)
        return v["usage"]["output_tokens"], "".join(b.get("text", "") for b in v["content"])
    n, text = None, ""
    for e in sse(body):
        if e.get("type") == "content_block_delta":
            text += e["delta"].get("text", "")
        if e.get("type") == "message_delta":
            n = e["usage"]["output_tokens"]
    return n, text


def read_vllm_legacy(body, stream):
    """The prompt included; no counts in vLLM's legacy answer."""
    if not stream:
        return None, json.loads(body)["text"][0]
    lines = [json.loads(l) for l in body.replace("\0", "\n").splitlines() if l.strip()]
    return None, lines[-1]["text"][0]


def failover_checks(check, px, index, pid, restart, request, name):
    """The endpoint at `index` of lingo's pool at `px` (a server of process `pid`) dies: every
    `request(i)` (a status) still succeeds on the rest, the failures are failed over, it is
    ejected while /health stays 200; `restart` (an argv) brings it back on its port, and a
    probe makes it healthy and it takes requests again."""
    import os
    import signal
    import subprocess
    os.kill(pid, signal.SIGKILL)
    ok = sum(request(i) == 200 for i in range(8))
    check(f"with {name} killed, all 8 requests succeed", ok == 8, ok)
    # A refused connect, or a reset on a kept-alive connection the server died holding (which
    # of the two depends on whether lingo's pool saw the close before it reused it).
    retries = sum(metric(px, "lingo_endpoint_retries_total", reason=r) for r in ("connect", "reset"))
    check("the failures were failed over (connect or reset)", retries >= 1, retries)
    state = [e["state"] for e in fleet(px)]
    check(f"{name} is out, the rest healthy",
          state[index] != "healthy" and all(s == "healthy" for i, s in enumerate(state) if i != index),
          state)
    check("/health stays 200 (the pool has a healthy endpoint)", call(px, "/health")[0] == 200)
    proc = subprocess.Popen(restart, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        back = until(120, lambda: fleet(px)[index]["state"] == "healthy")
        check(f"{name} restarted: healthy again", back, fleet(px)[index])
        before = fleet(px)[index]["requests"]
        for i in range(6):
            request(100 + i)
        check("and takes requests", fleet(px)[index]["requests"] > before, fleet(px)[index])
    finally:
        proc.kill()
