"""API server benchmark: `amber-engine serve` on the default model, measured by clients.

1. Throughput and latency: 1, 2 and 4 concurrent clients, each sending streaming chat completions
   one after another (distinct ~60-token prompts, 32 new tokens, greedy). Requests/s over the
   whole run; TTFT = request sent → first content chunk, p50 and p95 over all requests.
2. Restart resume: stored response chains of ~2,000 tokens are built on one server process, which
   is then stopped (SIGTERM); a fresh process continues each chain (`previous_response_id`, one new
   token). Against that, the same conversation sent to the fresh process as a stateless chat
   completion under a new cache salt: a full re-prefill. Both streamed; TTFT as the client sees it
   (request → first text delta), plus the server's own figures (`amber`: resume_ms, prefilled).
"""
from __future__ import annotations

import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.harness import common
from bench.harness.common import Section, table

CONCURRENCY = (1, 2, 4)
NEW_TOKENS = 32
CHAIN_TOKENS = 2000


class Server:
    def __init__(self, model_dir: Path, state: Path) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(common.REPO), os.environ.get("PYTHONPATH", "")]))
        self.proc = subprocess.Popen([sys.executable, "-m", "engine", "serve", "--model", str(model_dir), "--port", "0",
                                      "--provider", "cpu", "--state-dir", str(state)],
                                     cwd=common.REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True)
        line = self.proc.stdout.readline().strip()     # "amber-engine: serving http://127.0.0.1:PORT/v1"
        if "serving http://" not in line:
            self.proc.kill()
            raise RuntimeError(f"the server did not start: {line!r}")
        self.port = int(line.rsplit(":", 1)[1].split("/")[0])

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(120)


def _post(port: int, path: str, body: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """(ms, reply) of one request on a new connection (idle kept-alive ones are closed by the server)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    reply = json.loads(conn.getresponse().read())
    conn.close()
    if reply.get("error"):
        raise RuntimeError(reply["error"]["message"])
    return (time.perf_counter() - t0) * 1000, reply


def _stream_chat(conn: http.client.HTTPConnection, model: str, text: str) -> tuple[float, float, int]:
    """(TTFT ms, total ms, completion tokens) of one streamed chat completion."""
    body = {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": NEW_TOKENS,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    ttft, tokens = None, 0
    while True:
        line = resp.readline()
        if not line:
            break
        if not line.startswith(b"data: "):
            continue
        data = line[6:].strip()
        if data == b"[DONE]":
            break
        chunk = json.loads(data)
        if chunk.get("choices") and chunk["choices"][0]["delta"].get("content") and ttft is None:
            ttft = (time.perf_counter() - t0) * 1000
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
    resp.read()
    total = (time.perf_counter() - t0) * 1000
    return (ttft if ttft is not None else total), total, tokens


def _stream_first(port: int, path: str, body: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """(ms to the first text delta, the last event carrying `amber`) of one streamed request. The
    first delta is sent as soon as the first token is sampled, before the engine's after-turn work
    (publishing the KV to the shared cache, queueing the save) that a non-streamed reply waits for."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    conn.request("POST", path, json.dumps({**body, "stream": True}), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    first, last = None, {}
    for line in resp:
        if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
            continue
        event = json.loads(line[6:])
        delta = event.get("delta") if event.get("type") == "response.output_text.delta" else (
            event["choices"][0]["delta"].get("content") if event.get("choices") else None)
        if delta and first is None:
            first = (time.perf_counter() - t0) * 1000
        amber = event.get("amber") or (event.get("response") or {}).get("amber")
        if amber:
            last = amber
        if event.get("error"):
            raise RuntimeError(str(event["error"]))
    conn.close()
    return (first if first is not None else (time.perf_counter() - t0) * 1000), last


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def _concurrency(port: int, model: str, clients: int, per_client: int, seed: int) -> dict[str, Any]:
    results: list[tuple[float, float, int]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(clients + 1)

    def client(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        barrier.wait()
        for j in range(per_client):
            r = _stream_chat(conn, model, common.pseudo_text(45, seed * 1000 + i * 100 + j))
            with lock:
                results.append(r)
        conn.close()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    ttfts = [r[0] for r in results]
    return {"clients": clients, "requests": len(results), "seconds": elapsed, "requests_per_s": len(results) / elapsed,
            "tokens_per_s": sum(r[2] for r in results) / elapsed, "ttft_p50_ms": _pct(ttfts, 0.5),
            "ttft_p95_ms": _pct(ttfts, 0.95), "ttft_ms": sorted(ttfts)}


def run(quick: bool = False) -> dict[str, Any]:
    from bench.suites.engine import model_dir
    mdir = model_dir()
    model = mdir.name
    per_client = 2 if quick else 6
    chains = 1 if quick else 3
    out: dict[str, Any] = {"model": model, "new_tokens": NEW_TOKENS, "per_client": per_client, "concurrency": []}
    with tempfile.TemporaryDirectory(prefix="amber-bench-server-") as tmp:
        state = Path(tmp) / "state"
        server = Server(mdir, state)
        try:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
            _stream_chat(conn, model, "Warm up.")
            conn.close()
            for c in CONCURRENCY:
                res = _concurrency(server.port, model, c, per_client, seed=c)
                out["concurrency"].append(res)
                print(f"server: {c} client(s): {res['requests_per_s']:.2f} req/s, {res['tokens_per_s']:.1f} tok/s, "
                      f"TTFT p50 {res['ttft_p50_ms']:.0f} ms, p95 {res['ttft_p95_ms']:.0f} ms", flush=True)
            # Stored chains of ~2,000 tokens (one long first turn, then the reply).
            built = []
            for i in range(chains):
                words = common.pseudo_text(1600, 9000 + i)
                _, r1 = _post(server.port, "/v1/responses", {"model": model, "input": words, "max_output_tokens": 16,
                                                      "temperature": 0})
                built.append((r1, words))
            out["chain_tokens"] = [r["amber"]["prompt_tokens"] + r["amber"]["generated_tokens"] for r, _ in built]
        finally:
            server.stop()
        server = Server(mdir, state)
        try:
            _post(server.port, "/v1/chat/completions",
                  {"model": model, "messages": [{"role": "user", "content": "Warm up."}], "max_tokens": 1})
            resumed, reprefill = [], []
            # All resumes first: a re-prefill's blocks are written to the disk tier afterwards (the
            # writer thread), which would compete with a resume measured right after it.
            for i, (r1, _words) in enumerate(built):
                ms, amber = _stream_first(server.port, "/v1/responses", {
                    "model": model, "input": "Go on.", "previous_response_id": r1["id"], "max_output_tokens": 2,
                    "temperature": 0})
                resumed.append({**{k: amber[k] for k in ("resume", "resume_ms", "reused_tokens", "prefilled_tokens")},
                                "server_ttft_ms": amber["ttft_ms"], "ttft_ms": ms})   # ttft_ms: the client's
                print(f"server: chain {i}: resumed {ms:.0f} ms (resume {amber['resume']}, KV load "
                      f"{amber['resume_ms']:.0f} ms, {amber['prefilled_tokens']} prefilled)", flush=True)
            for i, (r1, words) in enumerate(built):
                text = r1["output"][0]["content"][0]["text"]
                msgs = [{"role": "user", "content": words}, {"role": "assistant", "content": text},
                        {"role": "user", "content": "Go on."}]
                ms, amber = _stream_first(server.port, "/v1/chat/completions", {
                    "model": model, "messages": msgs, "max_tokens": 2, "temperature": 0, "cache_salt": f"fresh-{i}",
                    "stream_options": {"include_usage": True}})
                reprefill.append({"ttft_ms": ms, "prefilled_tokens": amber["prefilled_tokens"],
                                  "server_ttft_ms": amber["ttft_ms"]})
                print(f"server: chain {i}: re-prefill {ms:.0f} ms ({amber['prefilled_tokens']} prefilled)", flush=True)
        finally:
            server.stop()
    med = lambda rows, k: statistics.median(r[k] for r in rows)   # noqa: E731
    out["resume"] = {"runs": resumed, "reprefill": reprefill, "resumed_ttft_ms": med(resumed, "ttft_ms"),
                     "resume_ms": med(resumed, "resume_ms"), "reprefill_ttft_ms": med(reprefill, "ttft_ms"),
                     "speedup": med(reprefill, "ttft_ms") / med(resumed, "ttft_ms")}
    return out


def section(res: dict[str, Any]) -> Section:
    rows = [[str(r["clients"]), str(r["requests"]), f"{r['requests_per_s']:.2f}", f"{r['tokens_per_s']:.1f}",
             f"{r['ttft_p50_ms']:.0f} ms", f"{r['ttft_p95_ms']:.0f} ms"] for r in res["concurrency"]]
    rs = res["resume"]
    body = [
        f"`amber-engine serve` on {res['model']} (CPU), measured by HTTP clients on the same machine. Each client "
        f"sends {res['per_client']} streaming chat completions one after another (distinct ~60-token prompts, "
        f"{res['new_tokens']} new tokens, greedy); TTFT is request → first content chunk. One engine thread "
        "interleaves the active generations token by token (fair service), so more clients share the same "
        "compute: throughput stays about level while TTFT grows with the queue.",
        "",
        table(["Clients", "Requests", "Requests/s", "Tokens/s", "TTFT p50", "TTFT p95"], rows),
        "",
        f"Stored response chains of {', '.join(str(t) for t in res['chain_tokens'])} tokens, continued after a "
        "server restart (`previous_response_id`, streamed; TTFT = request → first text delta) against the same "
        "conversation re-prefilled by the fresh process (a stateless chat completion under a new cache salt). "
        "All resumes are measured before the re-prefills (whose blocks the writer thread then writes to "
        "the disk tier); the state files are in the page cache (written moments before: a warm resume; "
        f"the sessions section has cold figures). Medians of {len(rs['runs'])}.",
        "",
        table(["", "TTFT (client)", "KV load (resume_ms)", "Prefilled tokens"], [
            ["Resumed chain", f"{rs['resumed_ttft_ms']:.0f} ms", f"{rs['resume_ms']:.0f} ms",
             ", ".join(str(r["prefilled_tokens"]) for r in rs["runs"])],
            ["Re-prefill", f"{rs['reprefill_ttft_ms']:.0f} ms", "—",
             ", ".join(str(r["prefilled_tokens"]) for r in rs["reprefill"])],
            ["Speed-up", f"{rs['speedup']:.1f}×", "", ""]]),
        "",
        common.facts_line(common.machine_facts()),
    ]
    return Section("server", "API server", "\n".join(body), common.ORDER.get("server", 60))
