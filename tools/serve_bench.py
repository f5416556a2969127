#!/usr/bin/env python3
"""Load generator and benchmark of ./run -m serve (issue 60), beside llama.cpp's llama-server.

N clients (threads, http.client), each sending its next request as soon as its last one ends,
all streaming ("stream": true, stream_options.include_usage) to POST /v1/completions with the
same fixed requests: 32 short story openings (PROMPTS, about 10 tokens each), request i asking
for PROMPTS[i % 32] with max_tokens 96 and temperature 0; max(32, 4 N) requests a row, so that
each client sends four or more. For each row:
  tok/s       the completion tokens of all requests over the row's wall time (first request sent
              to last answer ended). The counts are the servers' own (the usage chunk); for a
              server that sends none they are the content chunks counted, and the table says so.
  TTFT        time to first token: request sent to its first chunk with text; p50 and p99 over
              the row's requests.
  TBT         time between tokens: the gaps between a request's chunks with text, all requests
              pooled; p50 and p99.
  peak RSS    the server's VmHWM (/proc/PID/status) at the end of the row (each row starts a
              fresh server, so that this is the row's own).
  load gen. CPU  the CPU time this script took during the row, as a share of the machine: the
              clients run on the same 2 cores as the server.
  tokens/req  completion tokens per request (random weights stop at EOS now and then, and the
              two servers' weights differ by their rounding, so their answers do too).
The servers, started by this script on 2 threads, each with B slots (--slots, default 8):
  ours        ./run MODEL.bin -z tokenizer.bin -m serve -o 0 -b B -j 2 -t 0 (the port from the
              "127.0.0.1:PORT" line on its stderr; SIGTERM at the end must give exit status 0)
  llama       llama-server -m MODEL.gguf -np B -c CTX*B --port P -t 2 (ready when GET /health
              answers 200), CTX the model's context, so that both hold B full contexts
  llama-fa    the same with -fa (flash attention: faster here at few clients, about the same at
              8; tools/bench.py gives llama-batched-bench -fa too)
Each row is run in --rounds rounds (default 3), the servers taking turns, in an order that
reverses from row to row (the machine's speed drifts over minutes); the table gives the medians
of the rounds and the spread (lowest-highest) of tok/s, and the largest peak RSS.

Beside them, batch mode on the same 32 requests: ./run MODEL -m batch -f FILE -b B -j 2 -t 0
(FILE their JSON lines, {"prompt", "n": 96, "temperature": 0}), its stderr summary's tok/s
(generation over the time from its first step to its last, model loading left out), medians.

Then the shared-system-prompt target: every request's prompt starts with the same text of
about 1000 tokens (random words from a small list, seeded; fewer where the context is
shorter: at most CTX - 64), then "\n\n" and a story opening, on /v1/completions (the same
path for both servers, no chat template involved), max_tokens 16, one client, on a fresh
server: the TTFT of the first request, which computes the shared text, the median TTFT of the
15 following ones, which can take it from a cache, and their ratio; medians of the rounds.

Models: the random-weight shapes of tools/bench.py (models(): ../shared/tools/gen_model.c and
export.py's int8, in $BENCH_DIR, default /tmp/run-bench); for llama-server the same fp32
weights as Q8_0 GGUF, written by bench.py's gguf_model() (run in a python3 with numpy; this
script itself needs only Python's standard library).

usage: python3 tools/serve_bench.py [--quick] [--llama-server PATH] [--clients 1,4,8,16]
                                    [--shape stories110M|tinyllama] [--slots B] [--rounds N]
                                    [--servers ours,llama,llama-fa] [--kernels SET] [--run PATH]
                                    [--wait-quiet SECONDS] [--max-others PERCENT]
  --quick          one round, clients 1 and 8, 5 shared-prompt requests after the first
  --llama-server   the llama-server binary; default $LLAMA_CPP/build/bin/llama-server, else
                   llama-server on PATH; none: its columns are skipped (and say so)
  --servers        which servers to run, of ours, llama and llama-fa (default: all three)
  --kernels SET    ./run with RUN_KERNELS=SET (the table names the set either way)
  --wait-quiet S   before each row, wait at most S seconds (default 600) for the CPUs to be 90%
                   idle over 3 seconds; "others' load" is the largest share of the machine that
                   other processes took during a row's rounds
  --max-others P   a row during which they took more than P% (default 10) is run again, up to
                   3 times (then the last run is kept)
  --run PATH       another build of run.c instead of ./run (for the server and batch mode)
Prints a markdown table, naming the CPU (/proc/cpuinfo) and ./run's kernel set; progress on
stderr.
"""
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (tools/bench.py: the model shapes and files)

RUN, TOKENIZER, CACHE = bench.RUN, bench.TOKENIZER, bench.CACHE
THREADS = 2
MAX_TOKENS = 96
SHARED_TOKENS, SHARED_NEW, SHARED_FOLLOWING = 1000, 16, 15
RETRIES = 3  # a row during which other processes took more than --max-others is run again, this many times

PROMPTS = [
    "Once upon a time, a little fox", "One day, Lily went to the park", "Tom had a big red ball and",
    "In a small town, there was a", "The sun was shining and the birds", "Sam and his dog liked to play",
    "Once there was a girl named Sue", "A tiny bird sat on a tree", "Mom said, \"Let's bake a cake",
    "The old man had a magic hat", "Ben found a shiny rock in the", "It was a cold night, and the",
    "Lucy wanted to fly like a bird", "The cat and the mouse were friends", "One morning, Max woke up and saw",
    "There was a big tree near the", "Anna liked to draw pictures of the", "The boat went far out on the",
    "Tim was sad because his toy was", "A little bunny hopped into the garden", "The king had three sons who all",
    "Sara put on her red boots and", "Once upon a time, in a forest", "The dog barked at the big truck",
    "Jack and Jill went up the hill", "The stars came out and the moon", "Lily's brother had a new blue bike",
    "A friendly dragon lived in a cave", "The rain fell all day, so the", "Grandma told a story about a brave",
    "Two little ducks swam in the pond", "The teacher gave each child a small",
]

SHAPES = {"stories110M": bench.SHAPES[1], "tinyllama": bench.SHAPES[2]}


# ---------------------------------------------------------------------------
# The servers

class Server:
    """A server process started by this script: its pid, port and stderr (read by a thread,
    so that the pipe never fills)."""

    def __init__(self, name, cmd, port=None, env=None):
        self.name, self.cmd, self.port, self.log = name, cmd, port, []
        self.process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        self.pid = self.process.pid
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stderr(self):
        for raw in self.process.stderr:
            line = raw.decode("utf-8", "replace")
            self.log.append(line)
            m = re.search(r"127\.0\.0\.1:(\d+)", line)
            if self.port is None and m and int(m.group(1)) > 0:
                self.port = int(m.group(1))

    def wait_ready(self, health, timeout=300):
        """Waits for the port (ours: the listening line) and, with `health`, for GET /health 200."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                sys.exit(f"serve_bench: {self.name} exited ({self.process.returncode}) before it was ready: "
                         + "".join(self.log)[-1000:])
            if self.port is not None and (not health or get_status(self.port, "/health") == 200):
                return
            time.sleep(0.1)
        self.stop()
        sys.exit(f"serve_bench: {self.name} was not ready after {timeout} s: " + "".join(self.log)[-1000:])

    def peak_rss_mb(self):
        with open(f"/proc/{self.pid}/status") as f:
            kb = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
        return int(kb) / 1024

    def stop(self):
        """SIGTERM; returns the exit status (SIGKILL after 60 s: None)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return None


# ---------------------------------------------------------------------------
# The machine: on a shared one, other processes' load moves the figures by more than the servers
# differ, so each row waits until the CPUs are idle, and says how busy the others kept them.

def cpu_jiffies(pid=None):
    """Busy and total jiffies of the machine (/proc/stat), or a process's user + system ones."""
    if pid is not None:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        return int(fields[11]) + int(fields[12]), 0
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    return sum(values) - values[3] - values[4], sum(values)  # all but idle and iowait


def wait_quiet(limit):
    """Waits (at most `limit` seconds) until the CPUs are 90% idle over 3 seconds; returns the
    seconds waited, or None if they never were."""
    start = time.time()
    while True:
        busy0, total0 = cpu_jiffies()
        time.sleep(3)
        busy1, total1 = cpu_jiffies()
        if busy1 - busy0 <= 0.1 * max(1, total1 - total0):
            return time.time() - start
        if time.time() - start > limit:
            return None


class OthersLoad:
    """The CPU time that processes other than the server and this script took while a row ran,
    and the time this script took (the load generator), as shares of the machine (100% = every
    CPU busy)."""

    def __init__(self, pid):
        self.pid = pid
        self.start = self._sample()

    def _sample(self):
        times, (busy, total) = os.times(), cpu_jiffies()
        return busy, total, cpu_jiffies(self.pid)[0], (times.user + times.system) * os.sysconf("SC_CLK_TCK")

    def share(self):
        end = self._sample()
        busy, total, server, me = (e - s for e, s in zip(end, self.start))
        return max(0.0, busy - server - me) / max(1, total), me / max(1, total)


def get_status(port, path):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", path)
        status = c.getresponse().status
        c.close()
        return status
    except OSError:
        return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def starter(server_name, shape, llama, slots, kernels):
    """A function that starts that server ("ours" or a key of LLAMA_FLAGS) on the shape's model."""
    _, int8, gguf, context = models(shape)
    if server_name == "ours":
        return lambda: start_ours(int8, slots, kernels)
    return lambda: start_llama(llama, gguf, slots, context, LLAMA_FLAGS[server_name])


def start_ours(model, slots, kernels):
    cmd = [RUN, model, "-z", TOKENIZER, "-m", "serve", "-o", "0", "-b", str(slots), "-j", str(THREADS), "-t", "0"]
    server = Server("ours", cmd, env=dict(os.environ, RUN_KERNELS=kernels) if kernels else None)
    server.wait_ready(health=False)
    return server


# llama-server as the brief runs it, and with flash attention (-fa), its faster setting at few
# clients here (tools/bench.py's llama_cpp_bench() runs llama-batched-bench with it too)
LLAMA_FLAGS = {"llama": [], "llama-fa": ["-fa"]}


def start_llama(binary, gguf, slots, context, flags=()):
    port = free_port()
    cmd = [binary, "-m", gguf, "-np", str(slots), "-c", str(context * slots), "--port", str(port),
           "-t", str(THREADS)] + list(flags)
    server = Server("llama-server", cmd, port=port)
    server.wait_ready(health=True)
    return server


# ---------------------------------------------------------------------------
# The clients

def stream_request(port, prompt, max_tokens):
    """One streamed completion. Returns a dict: ttft (s), gaps (s, between chunks with text),
    chunks (with text), usage (the usage object, or None), error (None, or what went wrong)."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    result = {"ttft": None, "gaps": [], "chunks": 0, "usage": None, "finish_reason": None, "error": None}
    start = time.perf_counter()
    last = None
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            result["error"] = f"HTTP {r.status}: {r.read()[:300].decode('utf-8', 'replace')}"
            c.close()
            return result
        done = False
        for line in r:
            now = time.perf_counter()
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                done = True
                break
            chunk = json.loads(data)
            if chunk.get("usage"):
                result["usage"] = chunk["usage"]
            for choice in chunk.get("choices") or ():
                if choice.get("text"):
                    if last is None:
                        result["ttft"] = now - start
                    else:
                        result["gaps"].append(now - last)
                    last = now
                    result["chunks"] += 1
                if choice.get("finish_reason"):
                    result["finish_reason"] = choice["finish_reason"]
        c.close()
        if not done:
            result["error"] = "the stream ended without data: [DONE]"
        elif result["finish_reason"] is None:
            result["error"] = "no chunk had a finish_reason"
    except (OSError, http.client.HTTPException, ValueError) as e:
        result["error"] = f"{type(e).__name__}: {e}"
    return result


def run_clients(port, clients, requests, max_tokens=MAX_TOKENS):
    """`clients` threads share the requests 0..requests-1 (request i: PROMPTS[i % 32]), each
    taking the next as its last ends. Returns (wall seconds, results in request order)."""
    results = [None] * requests
    next_request = iter(range(requests))
    lock = threading.Lock()

    def client():
        while True:
            with lock:
                i = next(next_request, None)
            if i is None:
                return
            results[i] = stream_request(port, PROMPTS[i % len(PROMPTS)], max_tokens)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start, results


def percentile(values, p):
    """Nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, -(-len(ordered) * p // 100) - 1)]


def summarize(seconds, results):
    """A row's figures from run_clients()."""
    errors = [r["error"] for r in results if r["error"]]
    ok = [r for r in results if not r["error"]]
    with_usage = all(r["usage"] for r in ok)
    tokens = [r["usage"]["completion_tokens"] if with_usage else r["chunks"] for r in ok]
    # a token is at most one chunk with text (a piece of a UTF-8 character may wait for the rest)
    usage_notes = [f"usage says {r['usage']['completion_tokens']} completion tokens, but {r['chunks']} chunks had text"
                   for r in ok if r["usage"] and r["usage"]["completion_tokens"] < r["chunks"]]
    return {
        "tok/s": sum(tokens) / seconds,
        "ttft50": percentile([r["ttft"] for r in ok if r["ttft"] is not None], 50),
        "ttft99": percentile([r["ttft"] for r in ok if r["ttft"] is not None], 99),
        "tbt50": percentile([g for r in ok for g in r["gaps"]], 50),
        "tbt99": percentile([g for r in ok for g in r["gaps"]], 99),
        "tokens/req": sum(tokens) / max(1, len(ok)),
        "usage": "usage" if with_usage else "chunks counted",
        "prompt_tokens": {r_i: r["usage"]["prompt_tokens"] for r_i, r in enumerate(results)
                          if not r["error"] and r["usage"]},
        "errors": errors,
        "notes": usage_notes,
    }


# ---------------------------------------------------------------------------
# The benchmark

def models(shape):
    """The int8 file (ours) and the Q8_0 GGUF of the same fp32 weights (llama-server)."""
    name, args, _ = SHAPES[shape]
    fp32, int8 = bench.models(name, args)
    gguf = os.path.join(CACHE, name + "_q8_0.gguf")
    if not os.path.exists(gguf):  # bench.gguf_model() needs numpy (and sentencepiece): another python3
        code = (f"import sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); import bench; "
                f"bench.gguf_model({name!r}, {fp32!r})")
        subprocess.run([bench.python_with_numpy(), "-c", code], check=True)
    return name, int8, gguf, int(args.split()[6])


def kernel_set(kernels, model):
    """./run's kernel set: the one named, or the last (fastest) of those the CPU has, from
    the message of a RUN_KERNELS it does not know."""
    if kernels:
        return kernels
    p = subprocess.run([RUN, model, "-z", TOKENIZER, "-n", "2", "-i", "x"], capture_output=True, text=True,
                       env=dict(os.environ, RUN_KERNELS="?"))
    m = re.search(r"it has: ([\w, ]+)", p.stderr)
    return m.group(1).split(", ")[-1] if m else "unknown"


def load_rows(shape, servers, llama, clients_list, slots, rounds, kernels, quiet_limit, max_others, notes):
    """The clients table: {(server, clients): [summaries, one a round]}."""
    name = models(shape)[0]
    starts = {server_name: starter(server_name, shape, llama, slots, kernels) for server_name in servers}
    rows = {}
    for round in range(rounds):
        for clients in clients_list:
            order = servers if (round + clients_list.index(clients)) % 2 == 0 else servers[::-1]
            for server_name in order:
                for attempt in range(RETRIES + 1):
                    if wait_quiet(quiet_limit) is None:
                        print(f"  ({server_name} {clients} clients: the CPUs were not idle after {quiet_limit:.0f} s "
                              "of waiting; run anyway)", file=sys.stderr)
                    server = starts[server_name]()
                    try:
                        stream_request(server.port, "Once upon a time", 4)  # warm-up, not counted
                        requests = max(len(PROMPTS), 4 * clients)
                        others = OthersLoad(server.pid)
                        summary = summarize(*run_clients(server.port, clients, requests))
                        summary["others"], summary["client"] = others.share()
                        summary["rss"] = server.peak_rss_mb()
                    finally:
                        status = server.stop()
                    if server_name == "ours" and status != 0:
                        notes.append(f"ours: exit status {status} after SIGTERM ({clients} clients, round "
                                     f"{round + 1}); stderr: " + "".join(server.log)[-300:].strip())
                    if summary["others"] <= max_others:
                        break
                    print(f"  ({server_name} {clients} clients: others took {100 * summary['others']:.0f}% of the "
                          f"machine; {'again' if attempt < RETRIES else 'kept'})", file=sys.stderr)
                for e in sorted(set(summary["errors"]))[:3]:
                    notes.append(f"{server_name}, {clients} clients: {len(summary['errors'])} failed requests, e.g. {e}")
                for n in sorted(set(summary["notes"]))[:3]:
                    notes.append(f"{server_name}, {clients} clients: {n}")
                rows.setdefault((server_name, clients), []).append(summary)
                print(f"  {name} {server_name} {clients} clients, round {round + 1}: {summary['tok/s']:.1f} tok/s, "
                      f"TTFT p50 {ms(summary['ttft50'])} ms, TBT p50 {ms(summary['tbt50'])} ms, "
                      f"{summary['rss']:.0f} MB, others' load {100 * summary['others']:.0f}%, load generator "
                      f"{100 * summary['client']:.0f}%", file=sys.stderr)
    # the same prompt should be as many tokens for both (BOS and the same Llama 2 vocabulary)
    for other in [server_name for server_name in servers if server_name != "ours"][:1] if "ours" in servers else ():
        ours = {k: v for s in rows[("ours", clients_list[0])] for k, v in s["prompt_tokens"].items()}
        theirs = {k: v for s in rows[(other, clients_list[0])] for k, v in s["prompt_tokens"].items()}
        differ = [i for i in ours if i in theirs and ours[i] != theirs[i]]
        if differ:
            i = differ[0]
            notes.append(f"prompt_tokens differ from llama-server's on {len(differ)} prompts, e.g. "
                         f"{PROMPTS[i % len(PROMPTS)]!r}: ours {ours[i]}, llama-server {theirs[i]}")
    return name, rows


def batch_rows(shape, slots, rounds, kernels, quiet_limit):
    """Batch mode's tok/s on the same 32 requests, one a round."""
    name, int8, _, _ = models(shape)
    path = os.path.join(tempfile.mkdtemp(prefix="serve_bench"), "prompts.jsonl")
    with open(path, "w") as f:
        for prompt in PROMPTS:
            f.write(json.dumps({"prompt": prompt, "n": MAX_TOKENS, "temperature": 0}) + "\n")
    cmd = [RUN, int8, "-z", TOKENIZER, "-m", "batch", "-f", path, "-b", str(slots), "-j", str(THREADS), "-t", "0"]
    rates = []
    for _ in range(rounds):
        wait_quiet(quiet_limit)
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                           env=dict(os.environ, RUN_KERNELS=kernels) if kernels else None)
        m = re.search(r"generated in [\d.]+ s, ([\d.]+) tok/s", p.stderr)
        if p.returncode != 0 or not m:
            sys.exit(f"serve_bench: {' '.join(cmd)} failed: {p.stderr.strip()[-500:]}")
        rates.append(float(m.group(1)))
        print(f"  {name} batch mode -b {slots}: {rates[-1]:.1f} tok/s", file=sys.stderr)
    shutil.rmtree(os.path.dirname(path))
    return cmd, rates


def shared_text(int8, limit):
    """Random words (seeded) of at most `limit` tokens with BOS, as ./run -m tokenize counts them."""
    rng = random.Random(60)
    words = ("the a cat dog sat on mat ran far away house tree big small red blue green happy sad day night sun "
             "moon star sky water fire earth wind").split()
    count = limit
    while True:
        text = " ".join(rng.choice(words) for _ in range(count)).capitalize() + "."
        rng = random.Random(60)
        tokens = len(subprocess.run([RUN, int8, "-z", TOKENIZER, "-m", "tokenize", "-i", text],
                                    capture_output=True, text=True, check=True).stdout.split())
        if tokens <= limit:
            return text, tokens
        count -= tokens - limit


def shared_prompt_rows(shape, servers, llama, slots, following, rounds, kernels, quiet_limit, max_others):
    """{server: (first TTFTs, medians of the following TTFTs, prompt tokens)}, one of each a
    round, each round on fresh servers (which goes first alternating)."""
    name, int8, _, context = models(shape)
    text, tokens = shared_text(int8, min(SHARED_TOKENS, context - 64))
    starts = {server_name: starter(server_name, shape, llama, slots, kernels) for server_name in servers}
    out = {server_name: ([], [], None) for server_name in servers}
    for round in range(rounds):
        for server_name in servers if round % 2 == 0 else servers[::-1]:
            for attempt in range(RETRIES + 1):
                wait_quiet(quiet_limit)
                server = starts[server_name]()
                try:
                    others = OthersLoad(server.pid)
                    results = [stream_request(server.port, text + "\n\n" + PROMPTS[i], SHARED_NEW)
                               for i in range(following + 1)]
                    share = others.share()[0]
                finally:
                    server.stop()
                if share <= max_others:
                    break
                print(f"  ({server_name} shared prompt: others took {100 * share:.0f}% of the machine; "
                      f"{'again' if attempt < RETRIES else 'kept'})", file=sys.stderr)
            bad = [r["error"] for r in results if r["error"] or r["ttft"] is None]
            if bad:
                sys.exit(f"serve_bench: {server_name}, shared prompt: {bad[0] or 'no text'}")
            firsts, followings, _ = out[server_name]
            firsts.append(results[0]["ttft"])
            followings.append(statistics.median(r["ttft"] for r in results[1:]))
            out[server_name] = (firsts, followings, results[0]["usage"] and results[0]["usage"]["prompt_tokens"])
            print(f"  {name} {server_name} shared prompt, round {round + 1}: first {ms(firsts[-1])} ms, "
                  f"following {ms(followings[-1])} ms", file=sys.stderr)
    return tokens, out


def ms(seconds):
    return "-" if seconds is None else f"{1000 * seconds:.1f}"


def main():
    args = sys.argv[1:]
    if "-h" in args or "--help" in args:
        print(__doc__)
        return
    known = {"--quick"}
    valued = {"--shape", "--clients", "--slots", "--rounds", "--kernels", "--run", "--servers", "--wait-quiet",
              "--max-others", "--llama-server"}
    i = 0
    while i < len(args):
        if args[i] in valued:
            i += 2
        elif args[i] in known:
            i += 1
        else:
            sys.exit(f"serve_bench: unknown argument {args[i]} (--help lists them)")

    def option(flag, default):
        if flag not in args:
            return default
        i = args.index(flag)
        if i + 1 >= len(args):
            sys.exit(f"serve_bench: {flag} needs a value")
        return args[i + 1]

    quick = "--quick" in args
    shape = option("--shape", "stories110M")
    if shape not in SHAPES:
        sys.exit(f"serve_bench: --shape {shape}: stories110M or tinyllama")
    clients_list = [int(c) for c in option("--clients", "1,8" if quick else "1,4,8,16").split(",")]
    slots = int(option("--slots", "8"))
    rounds = int(option("--rounds", "1" if quick else "3"))
    kernels = option("--kernels", None)
    global RUN
    RUN = option("--run", RUN)
    servers = option("--servers", "ours,llama,llama-fa").split(",")
    if any(server_name != "ours" and server_name not in LLAMA_FLAGS for server_name in servers):
        sys.exit(f"serve_bench: --servers {','.join(servers)}: ours, llama, llama-fa")
    quiet_limit = float(option("--wait-quiet", "600"))
    max_others = float(option("--max-others", "10")) / 100
    folder = os.environ.get("LLAMA_CPP")
    llama = option("--llama-server", os.path.join(folder, "build", "bin", "llama-server") if folder
                   else shutil.which("llama-server"))
    notes = []
    if not (llama and os.path.exists(llama)) and any(server_name in LLAMA_FLAGS for server_name in servers):
        notes.append(f"llama-server skipped: {llama or 'not found'} (--llama-server PATH or LLAMA_CPP=folder)")
        servers = [server_name for server_name in servers if server_name not in LLAMA_FLAGS]
    usage = subprocess.run([RUN, "-h"], capture_output=True, text=True)
    if "ours" in servers and "port" not in (usage.stdout + usage.stderr).lower():
        notes.append(f"ours skipped: {RUN} -h mentions no port (no -m serve in this build)")
        servers.remove("ours")
    if not servers:
        sys.exit("serve_bench: no server to run: " + "; ".join(notes))
    llama_version = ""
    if any(server_name in LLAMA_FLAGS for server_name in servers):
        version = subprocess.run([llama, "--version"], capture_output=True, text=True)
        m = re.search(r"version: (\d+ \(\w+\))", version.stdout + version.stderr)
        llama_version = f"llama-server {m.group(1) if m else '(version unknown)'}"

    name, rows = load_rows(shape, servers, llama, clients_list, slots, rounds, kernels, quiet_limit,
                             max_others, notes)
    batch = batch_rows(shape, slots, rounds, kernels, quiet_limit) if "ours" in servers else None
    shared_tokens, shared = shared_prompt_rows(shape, servers, llama, slots, 5 if quick else SHARED_FOLLOWING,
                                               rounds, kernels, quiet_limit, max_others)

    label = {"ours": f"./run -m serve -b {slots}", "llama": f"llama-server -np {slots}",
             "llama-fa": f"llama-server -np {slots} -fa"}
    print(f"## {name}: ./run -m serve beside llama-server\n")
    print(f"CPU: {bench.cpu_name()}; {THREADS} threads each; ./run kernel set {kernel_set(kernels, models(shape)[1])}"
          + (f"; {llama_version}" if llama_version else "") + ".")
    print(f"Weights: ./run {os.path.basename(models(shape)[1])} (int8, groups of 64), llama-server "
          f"{os.path.basename(models(shape)[2])} (Q8_0, groups of 32), from the same fp32 file.")
    print(f"Requests: {len(PROMPTS)} story openings, max_tokens {MAX_TOKENS}, temperature 0, streamed; "
          f"max(32, 4 x clients) a row; {rounds} round(s), medians (tok/s: lowest-highest).\n")
    print("| server | clients | tok/s | tok/s spread | TTFT p50 ms | TTFT p99 ms | TBT p50 ms | TBT p99 ms "
          "| peak RSS MB | tokens/req | counted by | others' load | load gen. CPU |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|")
    for clients in clients_list:
        for server_name in servers:
            runs = rows[(server_name, clients)]

            def med(key):
                values = [r[key] for r in runs if r[key] is not None]
                return statistics.median(values) if values else None

            rates = [r["tok/s"] for r in runs]
            print(f"| {label[server_name]} | {clients} | {med('tok/s'):.1f} | {min(rates):.1f}-{max(rates):.1f} "
                  f"| {ms(med('ttft50'))} | {ms(med('ttft99'))} | {ms(med('tbt50'))} | {ms(med('tbt99'))} "
                  f"| {max(r['rss'] for r in runs):.0f} | {med('tokens/req'):.1f} | {runs[0]['usage']} "
                  f"| {100 * max(r['others'] for r in runs):.0f}% | {100 * med('client'):.0f}% |")
    print()
    for other in [server_name for server_name in servers if server_name != "ours"] if "ours" in servers else ():
        ratios = [statistics.median(o["tok/s"] / t["tok/s"] for o, t in zip(rows[("ours", c)], rows[(other, c)]))
                  for c in clients_list]
        print(f"ours / {label[other]}, tok/s (median of the rounds' ratios): "
              + ", ".join(f"{c} clients {r:.2f}" for c, r in zip(clients_list, ratios)))
    if batch:
        cmd, rates = batch
        shown = " ".join(os.path.basename(a) if a.startswith("/") else a for a in cmd)
        print(f"\nBatch mode on the same {len(PROMPTS)} requests: `{shown}`: {statistics.median(rates):.1f} tok/s "
              f"(median of {len(rates)}; {min(rates):.1f}-{max(rates):.1f})")
    print(f"\n## {name}: a shared prompt of {shared_tokens} tokens (BOS included), then an opening; "
          f"max_tokens {SHARED_NEW}, one client\n")
    print("| server | prompt tokens | first TTFT ms | following TTFT ms | first / following |")
    print("|---|---:|---:|---:|---:|")
    for server_name, (firsts, followings, prompt_tokens) in shared.items():
        ratio = statistics.median(f / g for f, g in zip(firsts, followings))
        print(f"| {label[server_name]} | {prompt_tokens or '-'} | {ms(statistics.median(firsts))} "
              f"| {ms(statistics.median(followings))} | {ratio:.1f} |")
    print(f"\n(medians of {rounds} round(s) on fresh servers; following: the median of each round's "
          f"{5 if quick else SHARED_FOLLOWING} requests after the first)")
    if notes:
        print("\nNotes:")
        for n in notes:
            print(f"- {n}")


if __name__ == "__main__":
    main()
