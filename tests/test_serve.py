#!/usr/bin/env python3
"""tests/test_serve.py: the tests of `./run MODEL -m serve`, the OpenAI-style HTTP server.

usage: python3 tests/test_serve.py [--quick]     (from the repository's folder, as test_all runs it)

Every answer is checked against ./run run alone as a separate process, never against the
server's own output: a completion against `RUN MODEL -z TOK -n <prompt ids + max_tokens - 1>
-i PROMPT -t T -p P -s SEED` (its stdout without the prompt's text and the last newline; the
prompt's ids from `RUN MODEL -z TOK -m tokenize -i PROMPT`), a chat of one system and one user
turn against `RUN MODEL -z TOK -m chat -y SYSTEM -i USER -a MAX -n 0 -t T -p P -s SEED` (stdin
closed; the text between "Assistant: " and the "\\nUser: " prompt). Whole texts, byte for byte,
where bytes can be text: a byte of ./run's output that is not UTF-8 may come back as \\udcXX in
JSON (Python's surrogateescape, as batch mode writes it) or as U+FFFD, each where Python's UTF-8
decoder puts one (the Unicode Standard's maximal subparts); nothing else. A multi-turn chat,
which no ./run mode takes as text, is compared with the same request on a fresh server that runs
one request at a time.

What it checks (issue 60):
 1. batch invariance under load: a random mix (fixed seed) of 64 requests (--quick: 24),
    completions and chats, greedy and seeded sampling, streamed and not, shared long prefixes,
    stop strings, small max_tokens, from 16 concurrent clients in a random order, on a server
    with -b 4: text, finish_reason and usage; /metrics agrees afterwards; the same mix again on
    a KV pool too small for all at once (-b 8 -x 640); requests kept alive and pipelined on one
    connection; the command line's -n -t -p -s as the defaults of a request;
 2. a 3-turn chat on the loaded server equals a fresh single-request server's answer;
 3. the stream format (role first, chat.completion.chunk, finish_reason after the last content,
    the usage chunk, data: [DONE], every chunk whole UTF-8);
 4. bad requests, each a status and {"error": {"message", "type", "param", "code"}}, all of them
    sent while a long request streams (whose text must not change); the API key (-A and
    RUN_API_KEY); a full queue (503 and Retry-After);
 5. slow and hostile clients: an idle connection is closed within 40 s, one that sends a byte a
    second within 30 s (on a server of their own); 600 idle connections do not stop a normal
    request;
 6. cancellation: a client gone mid-stream or mid-prompt is counted cancelled in /metrics, its
    KV blocks come back, the tokens it would have run are not run, and a request beside it is
    unchanged;
 7. real clients: curl, and tests/serve_openai.mjs with npm's `openai` package (RUN_NODE_MODULES,
    default tests/node_modules; skipped with a message without node or the package);
 8. SIGTERM: running requests finish, nothing new is served, exit status 0; a second signal
    cancels with a final error message and exits 0;
 9. /v1/models, /health, /metrics in Prometheus' text format;
10. the byte-level chat templates, Llama 3's (headers) and Qwen3's (ChatML), with tokenizers that
    export.py writes from ../shared's tokenizer.json (with $PYTHON, else python3 or
    /usr/bin/python3, one with numpy; kept in the golden cache under a hash of export.py and the
    JSON; skipped with a message without them) and tiny random models of their vocabularies: chats
    of a system and a user message, greedy and seeded, streamed and not, batched, are ./run -m
    chat's answers; 3-turn chats a fresh -b 1 server's (and for Qwen3, one whose earlier answers
    are -m chat's own is -m chat's third answer); completions are ./run's; Qwen3's
    chat_template_kwargs.enable_thinking and -e 0 give -m chat -e 0's or -e 1's answer, and an
    answer that starts with <think> comes apart into reasoning_content and content as vLLM
    returns it (on a model made to write <think> and </think>); with Llama 3 enable_thinking
    false is a 400.
The tests that need requests that last (queue, cancellation, SIGTERM, the stream beside the bad
requests) use a random-weight model that ../shared/tools/gen_model.c writes into the golden
cache ($GOLDEN_CACHE, default $TMPDIR/llm-golden-cache) with the repository's tokenizer.bin
(Llama 2's vocabulary, so streams carry multi-byte characters); without a C compiler they are
skipped. Environment: RUN (default ./run), SHARED (default ../shared), RUN_NODE_MODULES, PYTHON,
GOLDEN_CACHE.
A check that cannot run prints "skip ..." and counts as skipped. Python's standard library only.
The last line is "N passed, M failed, K skipped"."""
import concurrent.futures, http.client, json, os, queue, random, re, select, shutil, signal, socket
import subprocess, sys, tempfile, threading, time

QUICK = "--quick" in sys.argv[1:]
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RUN = os.path.abspath(os.environ.get("RUN") or "./run")
SHARED = os.path.abspath(os.environ.get("SHARED") or "../shared")
SANITIZED = "sanitize" in os.path.basename(RUN)
SLOW = 8 if SANITIZED else 1  # time limits scale with this under AddressSanitizer
T0 = time.time()

# ----------------------------------------------------------------------------------------------
# Counting

_lock = threading.Lock()
passed = failed = skipped = 0


def check(name, ok, why=""):
    global passed, failed
    with _lock:
        if ok:
            passed += 1
        else:
            failed += 1
            print(f"FAIL {name}: {why}"[:1500], flush=True)
    return ok


def skip(name, why):
    global skipped
    with _lock:
        skipped += 1
        print(f"skip {name}: {why}", flush=True)


def note(text):
    with _lock:
        print(f"  {text}", flush=True)


SERVERS = []


def finish_and_exit():
    for s in SERVERS:
        s.kill()
    for s in SERVERS:
        for t in s.readers:
            t.join(5)
        log = "".join(s.log)
        m = re.search(r"(ERROR: \w+Sanitizer|runtime error:|LeakSanitizer)", log)
        check(f"server {s.name}: no sanitizer report", not m, f"{s.cmd}: {log[max(0, m.start() - 100):m.start() + 600]!r}"
              if m else "")
    if ESCAPES:
        print(f"  the answers' bytes that are not UTF-8 came {' and '.join(sorted(ESCAPES))}")
    print(f"  test_serve.py took {time.time() - T0:.1f} s{' (quick)' if QUICK else ''}")
    print(f"{passed} passed, {failed} failed, {skipped} skipped", flush=True)
    os._exit(1 if failed else 0)


def watchdog():
    global failed
    import faulthandler
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)  # where it hangs
    with _lock:
        failed += 1
        print(f"FAIL test_serve.py: still running after {LIMIT} s: stopped (a server or a client hangs)", flush=True)
    finish_and_exit()


LIMIT = int(os.environ.get("SERVE_TEST_LIMIT", 300)) * SLOW

# ----------------------------------------------------------------------------------------------
# ./run alone: the reference

POOL = concurrent.futures.ThreadPoolExecutor(4)  # the references computed ahead, beside the tests
_cache, _cache_lock, _running = {}, threading.Lock(), threading.BoundedSemaphore(3)


def run_alone(args, stdin=None):
    """(stdout bytes, stderr text, exit status) of RUN with these arguments, stdin closed (or these
    bytes on it); cached (the first caller runs it, the others wait for its result)."""
    key = (tuple(args), stdin)
    with _cache_lock:
        f = _cache.get(key)
        mine = f is None
        if mine:
            f = _cache[key] = concurrent.futures.Future()
    if mine:
        try:
            with _running:
                feed = {"stdin": subprocess.DEVNULL} if stdin is None else {"input": stdin}
                p = subprocess.run([RUN] + list(args), capture_output=True, timeout=300 * SLOW, **feed)
            f.set_result((p.stdout, p.stderr.decode("utf-8", "replace"), p.returncode))
        except Exception as e:
            f.set_exception(e)
    return f.result()


def num(x):
    return repr(float(x)) if isinstance(x, float) else str(x)


def model_context(path):
    with open(path, "rb") as f:
        return int.from_bytes(f.read(28)[24:28], "little", signed=True)


def tokenize(model, tok, prompt):
    out, err, rc = run_alone([model, "-z", tok, "-m", "tokenize", "-i", prompt])
    if rc != 0:
        raise RuntimeError(f"./run -m tokenize failed: {err.strip()[:200]}")
    return out.split()


class Want:
    """What ./run alone gives for a request: text (bytes), finish_reason, prompt and completion tokens."""
    def __init__(self, text=None, finish=None, prompt_tokens=None, completion_tokens=None, error=None):
        self.text, self.finish, self.prompt_tokens, self.completion_tokens, self.error = \
            text, finish, prompt_tokens, completion_tokens, error


def alone_completion(model, tok, prompt, max_tokens, t, p, seed, extra=()):
    """./run -m generate for a completion of max_tokens (None: up to the context)."""
    try:
        ids = tokenize(model, tok, prompt)
    except Exception as e:
        return Want(error=str(e))
    ctx = model_context(model)
    n = len(ids) + max_tokens - 1 if max_tokens is not None else 0
    out, err, rc = run_alone([model, "-z", tok, "-n", str(n), "-i", prompt, "-t", num(t), "-p", num(p), "-s", str(seed)]
                             + list(extra))
    pb = prompt.encode("utf-8")
    if rc != 0 or not out.startswith(pb) or not out.endswith(b"\n"):
        return Want(error=f"./run alone: exit {rc}, stdout {out[:80]!r} does not hold the prompt; {err.strip()[:200]}")
    m = re.search(r"generated: (\d+) tokens", err)
    if not m:
        return Want(error=f"./run alone printed no 'generated: N tokens' line: {err.strip()[:200]}")
    gen = int(m.group(1))
    limit = max_tokens if max_tokens is not None else ctx - len(ids) + 1
    return Want(out[len(pb):-1], "length" if gen >= limit else "stop", len(ids), gen)


def chat_answer(model, tok, system, user, max_tokens, t, p, seed, extra):
    out, err, rc = run_alone([model, "-z", tok, "-m", "chat", "-y", system, "-i", user, "-a", str(max_tokens), "-n", "0",
                              "-t", num(t), "-p", num(p), "-s", str(seed)] + list(extra))
    head, tail = b"Assistant: ", b"\nUser: \n"
    if rc != 0 or not out.startswith(head) or not out.endswith(tail):
        return None, f"./run -m chat alone: exit {rc}, stdout {out[:60]!r}...{out[-30:]!r}; {err.strip()[:200]}"
    return out[len(head):-len(tail)], None


def alone_chat(model, tok, system, user, max_tokens, t, p, seed, extra=()):
    """./run -m chat for one system and one user turn. finish_reason: the answer with one token
    fewer (-a MAX-1) is the same text only when the answer ended before MAX tokens."""
    text, why = chat_answer(model, tok, system, user, max_tokens, t, p, seed, extra)
    if why:
        return Want(error=why)
    if max_tokens >= 2:
        shorter, why = chat_answer(model, tok, system, user, max_tokens - 1, t, p, seed, extra)
        if why:
            return Want(error=why)
        finish = "stop" if shorter == text else "length"
    else:
        finish = "stop" if text == b"" else "length"
    return Want(text, finish, None, max_tokens if finish == "length" else None)


def cut_at_stop(want, stops):
    """The alone text cut before the first occurrence of any stop string in the answer."""
    if want.error or not stops:
        return want
    found = [i for i in (want.text.find(s.encode("utf-8")) for s in stops) if i >= 0]
    if not found:
        return want
    return Want(want.text[:min(found)], "stop", want.prompt_tokens, None)


# ----------------------------------------------------------------------------------------------
# Servers

class Server:
    def __init__(self, name, model, tok, *flags, env=None, key=None):
        self.name, self.model, self.tok, self.key = name, model, tok, key
        self.port, self.log, self.error = None, [], None
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.body_limit = 0  # set to the -B given, for the 413 checks
        self.ctx = model_context(model)
        cmd = [RUN, model, "-z", tok, "-m", "serve", "-o", "0"] + list(flags)
        self.cmd = " ".join(cmd)
        self.p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  env=dict(os.environ, **(env or {})))
        SERVERS.append(self)
        self.ready = threading.Event()
        self.readers = [threading.Thread(target=self._read, args=(stream,), daemon=True)
                        for stream in (self.p.stderr, self.p.stdout)]
        for t in self.readers:
            t.start()
        self.ready.wait(60 * SLOW)
        if self.port is None:
            self.error = f"{self.cmd}: no 127.0.0.1:PORT line (exit {self.p.poll()}): {''.join(self.log)[-300:]!r}"

    def _read(self, stream):
        for raw in stream:
            line = raw.decode("utf-8", "replace")
            self.log.append(line)
            m = re.search(r"127\.0\.0\.1:(\d+)", line)
            if self.port is None and m and int(m.group(1)) > 0:
                self.port = int(m.group(1))
                self.ready.set()
        self.ready.set()

    def alive(self):
        return self.p.poll() is None

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                pass

    def stop(self, timeout):
        """SIGTERM; the exit status, or "hung"."""
        if self.p.poll() is not None:
            return f"already exited with {self.p.returncode}"
        self.p.send_signal(signal.SIGTERM)
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return "hung"


# ----------------------------------------------------------------------------------------------
# HTTP clients

class Resp:
    def __init__(self, status=None, headers=None, body=b"", error=None):
        self.status, self.headers, self.body, self.error = status, headers or {}, body, error

    def __repr__(self):
        return f"status {self.status} {self.error or ''} {self.body[:200]!r}"


def encode_body(body, ascii_only=True):
    if body is None or isinstance(body, bytes):
        return body
    return json.dumps(body, ensure_ascii=ascii_only).encode("utf-8")


def request(srv, method, path, body=None, headers=None, timeout=None, ascii_only=True, auth=True):
    """One request on its own connection; the whole response (a stream read to its end)."""
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=timeout or 120 * SLOW)
    try:
        data = encode_body(body, ascii_only)
        h = {"Content-Type": "application/json"} if data is not None else {}
        if auth:
            h.update(srv.headers)
        h.update(headers or {})
        c.request(method, path, data, h)
        r = c.getresponse()
        b = r.read()
        return Resp(r.status, {k.lower(): v for k, v in r.getheaders()}, b)
    except Exception as e:
        return Resp(error=f"{type(e).__name__}: {e}")
    finally:
        c.close()


class Stream:
    """A streaming request read line by line in a thread of its own; stop_after_chunks: the
    client goes away after that many chunks with text."""
    def __init__(self, srv, path, body, stop_after_chunks=None):
        self.srv, self.lines, self.status, self.headers, self.error = srv, [], None, {}, None
        self.content_chunks = 0
        self.first_content = threading.Event()
        self.done = threading.Event()
        self.stop_after = stop_after_chunks
        self.t0 = time.time()
        self.end_time = None
        self.thread = threading.Thread(target=self._go, args=(path, body), daemon=True)
        self.thread.start()

    def _go(self, path, body):
        c = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=120 * SLOW)
        r = None
        try:
            h = {"Content-Type": "application/json"}
            h.update(self.srv.headers)
            c.request("POST", path, encode_body(body), h)
            r = c.getresponse()
            self.status, self.headers = r.status, {k.lower(): v for k, v in r.getheaders()}
            while True:
                line = r.readline()
                if not line:
                    break
                self.lines.append(line)
                if line.startswith(b"data:") and line[5:].strip() not in (b"", b"[DONE]"):
                    try:
                        ch = json.loads(line[5:])["choices"][0]
                        piece = ch.get("text") if "text" in ch else (ch.get("delta") or {}).get("content")
                    except Exception:
                        piece = None
                    if piece:
                        self.content_chunks += 1
                        self.first_content.set()
                        if self.stop_after and self.content_chunks >= self.stop_after:
                            break  # the client goes away
        except Exception as e:
            self.error = f"{type(e).__name__}: {e}"
        finally:
            if r is not None:
                r.close()
            c.close()  # the socket is closed now
            self.end_time = time.time()
            self.first_content.set()
            self.done.set()

    def body(self):
        return b"".join(self.lines)

    def wait(self, timeout=None):
        self.done.wait(timeout or 180 * SLOW)
        return self.done.is_set()


def raw_parse(buf, eof):
    """An HTTP/1.1 response from raw bytes: Resp, or None while incomplete."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return Resp(error=f"no complete response: {buf[:120]!r}", body=buf) if eof else None
    head = buf[:end].decode("latin-1").split("\r\n")
    m = re.match(r"HTTP/1\.[01] (\d{3})", head[0])
    if not m:
        return Resp(error=f"not an HTTP response: {head[0][:80]!r}", body=buf)
    headers = {}
    for h in head[1:]:
        k, _, v = h.partition(":")
        headers[k.strip().lower()] = v.strip()
    body = buf[end + 4:]
    if "content-length" in headers:
        n = int(headers["content-length"])
        if len(body) >= n:
            return Resp(int(m.group(1)), headers, body[:n])
        return Resp(int(m.group(1)), headers, body, error="body cut short") if eof else None
    if headers.get("transfer-encoding", "").lower() == "chunked":
        out, rest = b"", body
        while True:
            i = rest.find(b"\r\n")
            if i < 0:
                break
            size = int(rest[:i].split(b";")[0] or b"0", 16)
            if size == 0:
                return Resp(int(m.group(1)), headers, out)
            if len(rest) < i + 2 + size + 2:
                break
            out += rest[i + 2:i + 2 + size]
            rest = rest[i + 2 + size + 2:]
        return Resp(int(m.group(1)), headers, out, error="chunked body cut short") if eof else None
    return Resp(int(m.group(1)), headers, body) if eof else None


def raw(srv, data, timeout=15, half_close=False, pause_after=None):
    """Sends bytes as they are on a new connection; the response, read to its end or to the close."""
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=timeout * SLOW)
    buf, send_error = b"", None
    try:
        try:
            s.sendall(data)
            if half_close:
                s.shutdown(socket.SHUT_WR)
        except OSError as e:
            send_error = f"{type(e).__name__}: {e}"
        while True:
            try:
                d = s.recv(65536)
            except socket.timeout:
                r = raw_parse(buf, True)
                r.error = f"no answer within {timeout * SLOW} s" + (f" ({r.error})" if r.error else "")
                return r
            except OSError as e:
                r = raw_parse(buf, True) if buf else Resp()
                r.error = f"{type(e).__name__}: {e}" + (f" (sending: {send_error})" if send_error else "")
                return r
            if not d:
                r = raw_parse(buf, True)
                if not buf:
                    r = Resp(error="closed without an answer" + (f" (sending: {send_error})" if send_error else ""))
                return r
            buf += d
            r = raw_parse(buf, False)
            if r:
                return r
    finally:
        s.close()


def post_head(srv, path, body, extra=b"", auth=True):
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    if auth and srv.key:
        head += f"Authorization: Bearer {srv.key}\r\n"
    return head.encode() + extra + b"\r\n"


# ----------------------------------------------------------------------------------------------
# Reading answers

def to_bytes(s):
    return s.encode("utf-8", "surrogateescape")


ESCAPES = set()  # how the server wrote the bytes of an answer that are not UTF-8


def escaped(s):
    return any("\udc80" <= ch <= "\udcff" for ch in s)


def as_sent(want, got=""):
    """./run's bytes as the server's JSON can carry them: each byte that is not UTF-8 either as
    \\udcXX (Python's surrogateescape, as batch mode writes them) or replaced by U+FFFD as a UTF-8
    decoder replaces them (Python's, which follows the Unicode Standard's "maximal subparts"), the
    way the answer got shows. A reference server's answer (text) stays as it is."""
    if isinstance(want, str):
        return want
    try:
        want.decode("utf-8")
        return want.decode("utf-8")
    except UnicodeDecodeError:
        pass
    if escaped(got):
        ESCAPES.add("as \\udcXX (surrogateescape)")
        return want.decode("utf-8", "surrogateescape")
    ESCAPES.add("as U+FFFD (a UTF-8 decoder's replacement)")
    return want.decode("utf-8", "replace")


def text_problem(s):
    """Why s (an answer's text from JSON) cannot be text a server sends: a surrogate that is not \\udcXX."""
    bad = [ch for ch in s if "\ud800" <= ch <= "\udfff" and not "\udc80" <= ch <= "\udcff"]
    return f"a lone surrogate {bad[0]!r} in the text" if bad else None


def error_problems(r, status, param=..., code=..., names=None):
    """Why r is not `status` with OpenAI's error object (and that param and code); [] if it is."""
    why = []
    if r.status != status:
        why.append(f"status {r.status}, want {status}" + (f" ({r.error})" if r.error else ""))
    try:
        obj = json.loads(r.body.decode("utf-8"))
    except Exception:
        return why + [f"body is not JSON: {r.body[:150]!r}"]
    err = obj.get("error") if isinstance(obj, dict) else None
    if not isinstance(err, dict):
        return why + [f"no error object: {r.body[:150]!r}"]
    for k in ("message", "type", "param", "code"):
        if k not in err:
            why.append(f"error has no {k!r}")
    if not isinstance(err.get("message"), str) or not err.get("message"):
        why.append("error.message is not a string")
    if not isinstance(err.get("type"), str):
        why.append("error.type is not a string")
    if param is not ... and err.get("param") != param:
        why.append(f"param {err.get('param')!r}, want {param!r}")
    if code is not ... and err.get("code") != code:
        why.append(f"code {err.get('code')!r}, want {code!r}")
    if names and not any(n == err.get("param") or n in str(err.get("message")) for n in names):
        why.append(f"the error does not name {names[0]!r}: {err}")
    ct = r.headers.get("content-type", "")
    if not ct.startswith("application/json"):
        why.append(f"Content-Type {ct!r}")
    return why


def read_json_answer(r, chat):
    """(text bytes, finish_reason, usage, problems) of a non-streaming answer."""
    problems = []
    if r.status != 200:
        return None, None, None, [f"{r}"]
    try:
        obj = json.loads(r.body.decode("utf-8"))
    except Exception as e:
        return None, None, None, [f"not JSON in UTF-8 ({e}): {r.body[:150]!r}"]
    want_object = "chat.completion" if chat else "text_completion"
    if obj.get("object") != want_object:
        problems.append(f"object {obj.get('object')!r}, want {want_object!r}")
    if not isinstance(obj.get("id"), str) or not isinstance(obj.get("created"), int) or not isinstance(obj.get("model"), str):
        problems.append("id, created or model missing or of the wrong type")
    ch = obj.get("choices")
    if not isinstance(ch, list) or len(ch) != 1 or not isinstance(ch[0], dict) or ch[0].get("index") != 0:
        return None, None, None, problems + [f"choices: {str(ch)[:100]}"]
    if chat:
        msg = ch[0].get("message") or {}
        if msg.get("role") != "assistant":
            problems.append(f"message.role {msg.get('role')!r}")
        text = msg.get("content")
    else:
        text = ch[0].get("text")
    if not isinstance(text, str):
        return None, None, None, problems + [f"no text: {str(ch)[:100]}"]
    if text_problem(text):
        problems.append(text_problem(text))
    usage = obj.get("usage")
    problems += usage_problems(usage)
    return text, ch[0].get("finish_reason"), usage, problems


def usage_problems(usage):
    if not isinstance(usage, dict) or not all(isinstance(usage.get(k), int) for k in
                                              ("prompt_tokens", "completion_tokens", "total_tokens")):
        return [f"usage {usage!r}"]
    if usage["total_tokens"] != usage["prompt_tokens"] + usage["completion_tokens"]:
        return [f"usage total {usage['total_tokens']} is not prompt + completion {usage}"]
    return []


def read_sse(body, chat, include_usage, status=200, headers=None):
    """(text bytes, finish_reason, usage, problems, facts) of a stream: every event "data: ...",
    JSON chunks then "data: [DONE]"; for a chat the role first; one finish_reason after the
    last content; with include_usage one chunk with usage and empty choices before [DONE]; each
    chunk's text whole UTF-8 (no character split between chunks)."""
    problems, facts = [], {}
    if status != 200:
        return None, None, None, [f"status {status}: {body[:200]!r}"], facts
    if headers is not None and not headers.get("content-type", "").startswith("text/event-stream"):
        problems.append(f"Content-Type {headers.get('content-type')!r}")
    try:
        s = body.decode("utf-8")
    except UnicodeDecodeError as e:
        problems.append(f"stream is not UTF-8: {e}")
        s = body.decode("utf-8", "surrogateescape")
    s = s.replace("\r\n", "\n")
    if not s.endswith("\n\n"):
        problems.append(f"the stream does not end with a blank line: {s[-60:]!r}")
    events = []
    for block in s.split("\n\n"):
        if not block.strip():
            continue
        data = []
        for line in block.split("\n"):
            if line.startswith(":"):
                continue
            if line.startswith("data:"):
                data.append(line[6:] if line.startswith("data: ") else line[5:])
            else:
                problems.append(f"not a data line: {line[:80]!r}")
        events.append("\n".join(data))
    if not events or events[-1] != "[DONE]":
        problems.append(f"the last event is not [DONE]: {events[-1][:80] if events else 'none'!r}")
    if events.count("[DONE]") != 1:
        problems.append(f"[DONE] {events.count('[DONE]')} times")
    chunks = []
    for e in events:
        if e == "[DONE]":
            continue
        try:
            chunks.append(json.loads(e))
        except Exception:
            problems.append(f"a chunk is not JSON: {e[:80]!r}")
    want_object = "chat.completion.chunk" if chat else "text_completion"
    pieces, thoughts, finish, finish_at, usage, usage_at, ids = [], [], None, None, None, None, set()
    for k, c in enumerate(chunks):
        if not isinstance(c, dict):
            problems.append(f"chunk {k} is not an object")
            continue
        if "error" in c:
            problems.append(f"chunk {k} is an error: {str(c)[:150]}")
            continue
        ids.add(c.get("id"))
        if c.get("object") != want_object:
            problems.append(f"chunk {k}: object {c.get('object')!r}, want {want_object!r}")
        ch = c.get("choices")
        if ch == []:
            if usage is not None:
                problems.append("two usage chunks")
            usage, usage_at = c.get("usage"), k
            continue
        if not isinstance(ch, list) or len(ch) != 1 or not isinstance(ch[0], dict):
            problems.append(f"chunk {k}: choices {str(ch)[:80]}")
            continue
        if usage_at is not None:
            problems.append(f"chunk {k} with choices after the usage chunk")
        c0 = ch[0]
        if chat:
            delta = c0.get("delta")
            if not isinstance(delta, dict):
                problems.append(f"chunk {k}: no delta")
                delta = {}
            if k == 0:
                facts["role_first"] = delta.get("role")
                if delta.get("role") != "assistant":
                    problems.append(f"the first chunk's delta.role is {delta.get('role')!r}, want 'assistant'")
            elif "role" in delta and delta["role"] is not None:
                problems.append(f"chunk {k} repeats the role")
            piece = delta.get("content")
            thought = delta.get("reasoning_content")  # Qwen3's thinking, apart (vLLM's delta field)
            if thought is not None and not isinstance(thought, str):
                problems.append(f"chunk {k}: reasoning_content of type {type(thought).__name__}")
            elif thought:
                if finish is not None:
                    problems.append(f"chunk {k}: reasoning_content after finish_reason")
                thoughts.append(thought)
        else:
            piece = c0.get("text")
        if piece is not None and not isinstance(piece, str):
            problems.append(f"chunk {k}: content of type {type(piece).__name__}")
            piece = None
        if piece:
            if finish is not None:
                problems.append(f"chunk {k}: content after finish_reason")
            pieces.append(piece)
        fr = c0.get("finish_reason")
        if fr is not None:
            if finish is not None:
                problems.append("finish_reason twice")
            finish, finish_at = fr, k
    if finish is None:
        problems.append("no chunk with a finish_reason")
    if len(ids) > 1:
        problems.append(f"the chunks have {len(ids)} different ids")
    if include_usage:
        if usage_at is None:
            problems.append("stream_options.include_usage: no chunk with usage and empty choices")
        else:
            if finish_at is not None and usage_at != finish_at + 1:
                problems.append("the usage chunk does not follow the finish_reason chunk")
            if usage_at != len(chunks) - 1:
                problems.append("the usage chunk is not the last before [DONE]")
            problems += usage_problems(usage)
    elif usage_at is not None:
        problems.append("a usage chunk without stream_options.include_usage")
    text = "".join(pieces)
    if text_problem(text):
        return None, finish, usage, problems + [text_problem(text)], facts
    # whole UTF-8: with bytes sent as \udcXX, each chunk's bytes decoded alone give the same
    # characters as the whole answer's (a split character shows as two escapes); with U+FFFD, a
    # split character is replacement characters where ./run's text has the character
    parts = [to_bytes(p) for p in pieces]
    whole = b"".join(parts).decode("utf-8", "surrogateescape")
    if escaped(text) and "".join(p.decode("utf-8", "surrogateescape") for p in parts) != whole:
        split = next((i for i, p in enumerate(parts) if p.decode("utf-8", "surrogateescape") !=
                      whole[len(b"".join(parts[:i]).decode("utf-8", "surrogateescape")):][:len(p)]), None)
        problems.append(f"a chunk ends inside a UTF-8 character (chunk {split}: {parts[split] if split is not None else b''!r})")
    facts["chunks"] = len(chunks)
    facts["content_chunks"] = len(pieces)
    facts["reasoning"] = "".join(thoughts) if thoughts else None
    return text, finish, usage, problems, facts


def show(b, n=70):
    return repr(b[:n]) + ("..." if b is not None and len(b) > n else "")


def compare(name, got_text, got_finish, usage, problems, want, max_tokens=None, check_usage=True):
    """One check: the answer is the alone text, with its finish_reason and usage."""
    why = differences(got_text, got_finish, usage, problems, want, check_usage)
    return check(name, not why, "; ".join(why))


def differences(got_text, got_finish, usage, problems, want, check_usage=True):
    if want.error:
        return [f"the reference: {want.error}"]
    why = list(problems)
    wanted = as_sent(want.text, got_text or "")
    if got_text is not None and got_text != wanted:
        i = next((k for k in range(min(len(got_text), len(wanted))) if got_text[k] != wanted[k]),
                 min(len(got_text), len(wanted)))
        why.append(f"text differs at character {i}: server {show(got_text[i:])} ({len(got_text)} characters), "
                   f"{'alone' if isinstance(want.text, bytes) else 'the reference'} {show(wanted[i:])} "
                   f"({len(wanted)} characters)")
    if got_text is not None and got_finish != want.finish:
        why.append(f"finish_reason {got_finish!r}, alone {want.finish!r}")
    if check_usage and isinstance(usage, dict):
        if want.prompt_tokens is not None and usage.get("prompt_tokens") != want.prompt_tokens:
            why.append(f"usage.prompt_tokens {usage.get('prompt_tokens')}, ./run -m tokenize: {want.prompt_tokens}")
        if want.finish == "length" and want.completion_tokens is not None and \
                usage.get("completion_tokens") != want.completion_tokens:
            why.append(f"usage.completion_tokens {usage.get('completion_tokens')} at length, want {want.completion_tokens}")
    return why


def ask(srv, api, body, stream=False, include_usage=False, ascii_only=True):
    """Sends one request; (text, finish, usage, problems, facts)."""
    chat = api == "chat"
    path = "/v1/chat/completions" if chat else "/v1/completions"
    body = dict(body)
    if stream:
        body["stream"] = True
        if include_usage:
            body["stream_options"] = {"include_usage": True}
    r = request(srv, "POST", path, body, ascii_only=ascii_only)
    if r.status is None:
        return None, None, None, [f"no answer: {r.error}"], {}
    if stream:
        return read_sse(r.body, chat, include_usage, r.status, r.headers)
    facts = {}
    if chat and r.status == 200:  # Qwen3's thinking, apart: message.reasoning_content
        try:
            facts["reasoning"] = json.loads(r.body.decode("utf-8"))["choices"][0]["message"].get("reasoning_content")
        except Exception:
            pass
    return read_json_answer(r, chat) + (facts,)


# ----------------------------------------------------------------------------------------------
# Prometheus

METRIC = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?[ \t]+(\S+)(?:[ \t]+-?\d+)?$')
LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\\n]|\\[\\"n])*)"\s*(?:,|$)')


def parse_metrics(text):
    """{(name, ((label, value), ...)): value} and the lines that are not Prometheus' text format."""
    values, bad = {}, []
    if text and not text.endswith("\n"):
        bad.append("no newline at the end")
    for line in text.split("\n"):
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 2 and parts[1] == "TYPE":
                if len(parts) < 4 or parts[3].strip() not in ("counter", "gauge", "histogram", "summary", "untyped"):
                    bad.append(line)
            elif len(parts) >= 2 and parts[1] == "HELP" and len(parts) < 3:
                bad.append(line)
            continue
        m = METRIC.match(line)
        if not m:
            bad.append(line)
            continue
        labels, rest = [], m.group(2) or ""
        while rest.strip():
            lm = LABEL.match(rest)
            if not lm:
                bad.append(line)
                break
            labels.append((lm.group(1), lm.group(2)))
            rest = rest[lm.end():]
        try:
            v = float(m.group(3))
        except ValueError:
            bad.append(line)
            continue
        values[(m.group(1), tuple(sorted(labels)))] = v
    return values, bad


def metrics(srv):
    r = request(srv, "GET", "/metrics", timeout=30 * SLOW)
    if r.status != 200:
        return None
    return parse_metrics(r.body.decode("utf-8", "replace"))[0]


def metric(values, name, **labels):
    if values is None:
        return None
    return values.get((name, tuple(sorted(labels.items()))), 0.0 if labels else None)


# ----------------------------------------------------------------------------------------------
# The texts

WORDS = ["Once", "upon", "a", "time", "there", "was", "a", "little", "girl", "named", "Lily", "she", "liked", "to",
         "play", "in", "the", "park", "with", "her", "dog", ".", "\"Hi!\"", "café", "Tom", "big", "red", "ball", "sun",
         "happy", "said", "mom", ",", "tree", "and", "🐶"]
PREFIX = ("Once upon a time, there was a little girl named Lily. She liked to play in the park with her dog. "
          "One day, she saw a big red ball under a tree. \"Hi!\" said the ball. Lily was very happy and she ran "
          "to her mom. Her mom said, \"Let us play together.\" ")
SYSTEM_LONG = ("You are a kind friend who tells short stories to children. You use simple words, you are happy, and "
               "you always answer in one or two sentences about a dog, a ball or the park.")
SYSTEMS = ["You are a helpful friend.", "Be brief.", "You like the sun."]
MULTI_TURN = [{"role": "system", "content": "You are a helpful friend."},
              {"role": "user", "content": "Hi, who are you?"},
              {"role": "assistant", "content": "I am Tom. I like to play with my ball."},
              {"role": "user", "content": "What do you like to do in the park?"},
              {"role": "assistant", "content": "I like to run with my dog."},
              {"role": "user", "content": "Tell me a story about the sun."}]


def words(rng, lo, hi):
    w = [rng.choice(WORDS) for _ in range(rng.randint(lo, hi))]
    return " ".join(w).replace(" .", ".").replace(" ,", ",")


# ----------------------------------------------------------------------------------------------
# 1, 2, 3: the mix under load

class Mix:
    def __init__(self, name, api, body, stream, include_usage, want_fn, ascii_only=True, max_tokens=None):
        self.name, self.api, self.body, self.stream, self.include_usage = name, api, body, stream, include_usage
        self.want_fn, self.ascii_only, self.max_tokens = want_fn, ascii_only, max_tokens
        self.want = None
        self.got = None


def sampling(rng, body):
    """Greedy or seeded sampling in body; the alone flags (t, p, seed, extra) and a label."""
    if rng.random() < 0.4:
        body["temperature"] = 0
        if rng.random() < 0.5:
            body["seed"] = rng.randint(1, 10 ** 6)
        return 0.0, 0.9, 1, [], "greedy"
    seed = rng.randint(1, 2 ** 31 - 1)
    body["seed"] = seed
    if rng.random() < 0.15:  # the server's defaults, as documented: -t 1.0 -p 0.9
        return 1.0, 0.9, seed, [], "defaults"
    t, p = rng.choice([0.8, 0.85, 0.9, 0.95, 1.0]), rng.choice([0.5, 0.9, 0.95, 1.0])
    body["temperature"], body["top_p"] = t, p
    extra, label = [], f"t={t} p={p}"
    if rng.random() < 0.3:
        k = rng.choice([5, 40])
        body["top_k"] = k
        extra += ["-K", str(k)]
        label += f" k={k}"
    if rng.random() < 0.2:
        body["min_p"] = 0.05
        extra += ["-M", "0.05"]
        label += " min_p"
    if rng.random() < 0.15:
        body["presence_penalty"] = 0.5
        extra += ["-P", "0.5"]
        label += " presence"
    return t, p, seed, extra, label


def make_mix(count, m260, tok, rng):
    ctx = model_context(m260)
    mix = []
    specials = 3 if QUICK else 5
    for i in range(count - specials):
        chat = rng.random() < 0.45
        stream = rng.random() < 0.5
        include_usage = stream and rng.random() < 0.5
        body = {}
        if rng.random() < 0.3:
            body["model"] = rng.choice(["gpt-4o", "stories260K.bin", "x"])
        t, p, seed, extra, label = sampling(rng, body)
        max_tokens = rng.randint(1, 4) if rng.random() < 0.2 else rng.randint(16, 100)
        if chat:
            system = SYSTEM_LONG if rng.random() < 0.4 else rng.choice(SYSTEMS)
            user = words(rng, 3, 10)
            body["messages"] = [{"role": "system", "content": system}, {"role": "user", "content": user}]
            body["max_completion_tokens" if rng.random() < 0.3 else "max_tokens"] = max_tokens
            want_fn = (lambda s=system, u=user, n=max_tokens, t=t, p=p, sd=seed, e=extra:
                       alone_chat(m260, tok, s, u, n, t, p, sd, e))
            what = f"chat{' long system' if system == SYSTEM_LONG else ''}"
        else:
            prompt = PREFIX + words(rng, 2, 6) if rng.random() < 0.35 else words(rng, 3, 12)
            n_prompt = len(tokenize(m260, tok, prompt))
            max_tokens = min(max_tokens, ctx - n_prompt + 1)
            body["prompt"] = prompt
            body["max_tokens"] = max_tokens
            want_fn = (lambda pr=prompt, n=max_tokens, t=t, p=p, sd=seed, e=extra:
                       alone_completion(m260, tok, pr, n, t, p, sd, e))
            what = f"completion{' long prefix' if prompt.startswith(PREFIX) else ''}"
        name = f"mix {i}: {what}, {label}, max_tokens {max_tokens}{', stream' if stream else ''}" \
               f"{' +usage' if include_usage else ''}"
        mix.append(Mix(name, "chat" if chat else "completions", body, stream, include_usage, want_fn,
                       ascii_only=rng.random() < 0.5, max_tokens=max_tokens))
    # no max_tokens: up to the context, as ./run -n 0
    prompt = PREFIX + "The dog"
    mix.append(Mix("mix: completion without max_tokens (up to the context, ./run -n 0), greedy", "completions",
                   {"prompt": prompt, "temperature": 0}, False, False,
                   lambda: alone_completion(m260, tok, prompt, None, 0.0, 0.9, 1)))
    if not QUICK:
        mix.append(Mix("mix: completion without max_tokens, seeded, stream", "completions",
                       {"prompt": "The sun was hot", "temperature": 0.9, "top_p": 0.95, "seed": 4242}, True, True,
                       lambda: alone_completion(m260, tok, "The sun was hot", None, 0.9, 0.95, 4242)))
    # the 3-turn chat, greedy and seeded: wanted from a fresh single-request server (set later)
    mix.append(Mix("mix: 3-turn chat, greedy", "chat", {"messages": MULTI_TURN, "max_tokens": 60, "temperature": 0},
                   False, False, None))
    mix.append(Mix("mix: 3-turn chat, seeded, stream", "chat",
                   {"messages": MULTI_TURN, "max_tokens": 60, "temperature": 0.9, "top_p": 0.9, "seed": 77},
                   True, True, None))
    if not QUICK:
        mix.append(Mix("mix: 3-turn chat, greedy, stream (again: its earlier turns cached)", "chat",
                       {"messages": MULTI_TURN, "max_tokens": 60, "temperature": 0}, True, False, None))
    return mix


def add_stops(mix, rng):
    """Stop strings taken from the alone answer (so they occur), and ones that do not occur."""
    for m in mix:
        if m.want_fn is None or m.want.error:
            continue
        r = rng.random()
        text = m.want.text
        cands = [i for i in range(len(text) // 3, len(text) - 2) if all(0x20 <= b < 0x7f for b in text[i:i + 3])]
        absent = next(s for s in ("zq#", "@@", "~~~", "Zz9") if s.encode() not in text)
        stops = None
        if r < 0.3 and cands:
            i = rng.choice(cands)
            found = text[i:i + rng.choice([2, 3])].decode()
            stops = found if r < 0.22 else [absent, found]
        elif r < 0.36:
            stops = absent
        if stops is not None:
            m.body["stop"] = stops
            m.want = cut_at_stop(m.want, [stops] if isinstance(stops, str) else stops)
            m.name += f", stop {stops!r}"


def send_mix(srv, mix, clients, rng):
    order = list(range(len(mix)))
    rng.shuffle(order)
    q = queue.Queue()
    for i in order:
        q.put(i)

    def client():
        while True:
            try:
                i = q.get_nowait()
            except queue.Empty:
                return
            m = mix[i]
            m.got = ask(srv, m.api, m.body, m.stream, m.include_usage, m.ascii_only)

    ts = [threading.Thread(target=client) for _ in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def test_mix(A, B, P, m260, tok):
    rng = random.Random(60)
    count = 24 if QUICK else 64
    mix = make_mix(count, m260, tok, rng)
    futures = [POOL.submit(m.want_fn) if m.want_fn else None for m in mix]
    # the 3-turn chats' reference: a fresh server running one request at a time
    b_ok = B.error is None
    check("fresh -b 1 server starts", b_ok, B.error or "")
    if b_ok:
        # the reference server itself answers a 1-turn chat as ./run -m chat does
        want = alone_chat(m260, tok, SYSTEMS[0], "Hi, who are you?", 40, 0.0, 0.9, 1)
        got = ask(B, "chat", {"messages": MULTI_TURN[:2], "max_tokens": 40, "temperature": 0})
        compare("fresh -b 1 server: a 1-turn chat is ./run -m chat's answer", *got[:4], want)
    for m in mix:
        if m.want_fn is None:
            if not b_ok:
                m.want = Want(error="the fresh single-request server did not start")
                continue
            body = {k: v for k, v in m.body.items()}
            text, finish, usage, problems, _ = ask(B, "chat", body)
            m.want = Want(text, finish) if text is not None and not problems else \
                Want(error=f"the fresh single-request server: {problems}")
    for m, f in zip(mix, futures):
        if f:
            m.want = f.result()
    add_stops(mix, random.Random(61))
    before = metrics(A)
    t0 = time.time()
    send_mix(A, mix, 16, random.Random(62))
    note(f"the mix: {len(mix)} requests from 16 clients in {time.time() - t0:.1f} s: "
         f"{sum(m.api == 'chat' for m in mix)} chats, {sum(m.stream for m in mix)} streamed, "
         f"{sum('temperature' not in m.body or m.body['temperature'] > 0 for m in mix)} sampled, "
         f"{sum('stop' in m.body for m in mix)} with stop strings; answers ending at a stop string "
         f"{sum(m.want.finish == 'stop' and 'stop' in m.body for m in mix)}, at the end of text (EOS) "
         f"{sum(m.want.finish == 'stop' and 'stop' not in m.body for m in mix)}, "
         f"at max_tokens {sum(m.want.finish == 'length' for m in mix)}")
    after = metrics(A)
    bad = 0
    for m in mix:
        text, finish, usage, problems, facts = m.got
        ok = compare(m.name, text, finish, usage, problems, m.want, m.max_tokens)
        bad += not ok
    check(f"the mix: every answer is ./run's alone ({len(mix)} requests, -b 4, 16 clients)", bad == 0,
          f"{bad} of {len(mix)} differ")
    # /metrics agrees with what was sent
    if before is None or after is None:
        check("/metrics during the mix", False, "GET /metrics failed")
    else:
        for outcome in ("stop", "length"):
            want = sum(1 for m in mix if not m.want.error and m.want.finish == outcome)
            got = metric(after, "run_requests_total", outcome=outcome) - metric(before, "run_requests_total", outcome=outcome)
            check(f"/metrics: run_requests_total{{outcome=\"{outcome}\"}} grew by the mix's {outcome} answers",
                  got == want, f"grew by {got}, the mix had {want}")
        check("/metrics: nothing running or waiting after the mix",
              metric(after, "run_requests_running") == 0 and metric(after, "run_requests_waiting") == 0,
              f"running {metric(after, 'run_requests_running')}, waiting {metric(after, 'run_requests_waiting')}")
        hits = metric(after, "run_prefix_cache_hit_tokens_total") - metric(before, "run_prefix_cache_hit_tokens_total") \
            if metric(after, "run_prefix_cache_hit_tokens_total") is not None else None
        check("/metrics: prompts with a long common prefix hit the prefix cache", hits is not None and hits > 0,
              f"run_prefix_cache_hit_tokens_total grew by {hits}")
    # again, on a KV pool that cannot hold every request at once: they wait for blocks
    if P.error:
        check("the small-pool server starts", False, P.error)
        return mix
    t0 = time.time()
    send_mix(P, mix, 16, random.Random(63))
    note(f"the mix again on -b 8 -x 640: {time.time() - t0:.1f} s")
    bad = [(m.name, differences(*m.got[:4], m.want)) for m in mix]
    bad = [(n, w) for n, w in bad if w]
    check(f"the mix again on a small KV pool (-b 8 -x 640, the context is 512): every answer is ./run's alone",
          not bad, f"{len(bad)} of {len(mix)} differ: " + "; ".join(f"{n}: {'; '.join(w)}" for n, w in bad[:3]))
    return mix


def test_stream_format(A, m260, tok):
    """3: one chat stream's format, point by point."""
    body = {"messages": [{"role": "system", "content": SYSTEMS[0]}, {"role": "user", "content": "Tell me about the dog."}],
            "max_tokens": 50, "temperature": 0.9, "top_p": 0.95, "seed": 31, "stream": True,
            "stream_options": {"include_usage": True}}
    want = alone_chat(m260, tok, SYSTEMS[0], "Tell me about the dog.", 50, 0.9, 0.95, 31)
    r = request(A, "POST", "/v1/chat/completions", body)
    text, finish, usage, problems, facts = read_sse(r.body, True, True, r.status, r.headers)
    lines = r.body.decode("utf-8", "replace").split("\n\n")
    events = [l[6:] for l in lines if l.startswith("data: ")]
    chunks = []
    for e in events[:-1]:
        try:
            chunks.append(json.loads(e))
        except Exception:
            pass
    check("stream format: status 200, Content-Type text/event-stream",
          r.status == 200 and r.headers.get("content-type", "").startswith("text/event-stream"),
          f"{r.status} {r.headers.get('content-type')!r}")
    check("stream format: every event is 'data: ...' followed by a blank line",
          r.body.endswith(b"\n\n") and all(l.startswith("data: ") for l in lines if l.strip()),
          f"{r.body[:120]!r}")
    check("stream format: the first chunk's delta.role is 'assistant'",
          bool(chunks) and (chunks[0].get("choices") or [{}])[0].get("delta", {}).get("role") == "assistant",
          f"{str(chunks[:1])[:200]}")
    check("stream format: every chunk's object is chat.completion.chunk",
          bool(chunks) and all(c.get("object") == "chat.completion.chunk" for c in chunks),
          f"{[c.get('object') for c in chunks][:5]}")
    with_choices = [c for c in chunks if c.get("choices")]
    fin = [k for k, c in enumerate(with_choices) if c["choices"][0].get("finish_reason")]
    content = [k for k, c in enumerate(with_choices) if (c["choices"][0].get("delta") or {}).get("content")]
    check("stream format: one chunk with finish_reason, after the last content chunk, the last with choices",
          len(fin) == 1 and fin[0] == len(with_choices) - 1 and (not content or content[-1] < fin[0]),
          f"finish_reason in chunks {fin}, content in {content[-3:]}, of {len(with_choices)}")
    check("stream format: include_usage: then one chunk with usage and empty choices",
          len(chunks) >= 1 and chunks[-1].get("choices") == [] and isinstance(chunks[-1].get("usage"), dict),
          f"{str(chunks[-1:])[:200]}")
    check("stream format: 'data: [DONE]' last", bool(events) and events[-1] == "[DONE]" and events.count("[DONE]") == 1,
          f"{events[-2:]}")
    check("stream format: each chunk's text is whole UTF-8 (and no other problem)", not problems, "; ".join(problems))
    compare("stream format: the deltas are ./run -m chat's answer", text, finish, usage, [], want)
    # without include_usage: no usage chunk, [DONE] right after the finish_reason chunk
    body2 = dict(body)
    del body2["stream_options"]
    r = request(A, "POST", "/v1/chat/completions", body2)
    text, finish, usage, problems, facts = read_sse(r.body, True, False, r.status, r.headers)
    compare("stream format: without include_usage no usage chunk; the same text", text, finish, None, problems, want)
    # a character the model makes of several byte tokens: never split between chunks
    prompt = "Lily said \"Hi!\" to the café dog."
    want = alone_completion(m260, tok, prompt, 80, 1.2, 1.0, 4)
    whole = whole_pieces(tok)
    spread = [c for c in (want.text or b"").decode("utf-8", "surrogateescape")
              if ord(c) > 127 and not 0xdc80 <= ord(c) <= 0xdcff and c.encode() not in whole]
    if not spread:
        skip("stream: a character made of several tokens arrives whole", "this case's answer has no such character")
    else:
        got = ask(A, "completions", {"prompt": prompt, "max_tokens": 80, "temperature": 1.2, "top_p": 1.0, "seed": 4},
                  True, False)
        compare(f"stream: characters made of several byte tokens ({''.join(spread)!r}) arrive whole, in one chunk each",
                *got[:4], want)
    # a completion stream
    want = alone_completion(m260, tok, "Lily and Tom", 40, 0.0, 0.9, 1)
    compare("stream format: a completion stream (text_completion chunks)",
            *ask(A, "completions", {"prompt": "Lily and Tom", "max_tokens": 40, "temperature": 0}, True, True)[:4], want)


# ----------------------------------------------------------------------------------------------
# 4: bad requests

def whole_pieces(tok):
    """The pieces of a llama2.c tokenizer file (int32 longest piece; per piece float32 score,
    int32 length, bytes): a character among them can come in one token."""
    import struct
    data, at, pieces = open(tok, "rb").read(), 4, set()
    while at + 8 <= len(data):
        n = struct.unpack_from("<i", data, at + 4)[0]
        pieces.add(data[at + 8:at + 8 + n])
        at += 8 + n
    return pieces


def long_prompt(srv):
    """A prompt longer than srv's context, counted by ./run -m tokenize."""
    for reps in (srv.ctx + 16, 2 * srv.ctx, 4 * srv.ctx):
        p = " 7" * reps
        if len(tokenize(srv.model, srv.tok, p)) > srv.ctx:
            return p
    raise RuntimeError("no prompt longer than the context")


def bad_requests(srv):
    """[(name, function returning the list of problems)] for every kind of bad request srv should
    answer; 413 with a server that has -B 8000, 401 with one that has a key."""
    chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5}
    comp = {"prompt": "Hi", "max_tokens": 5}
    tests = []
    too_long = long_prompt(srv)  # the references first: the requests go out back to back
    want_ignored = alone_completion(srv.model, srv.tok, "Once upon a time", 12, 0.0, 0.9, 1)

    def t(name):
        def deco(f):
            tests.append((name, f))
            return f
        return deco

    @t("malformed JSON: 400")
    def _():
        return error_problems(request(srv, "POST", "/v1/chat/completions", b'{"messages": [{"role": "user", '), 400)

    @t("JSON that is not an object: 400")
    def _():
        return error_problems(request(srv, "POST", "/v1/completions", b'["prompt"]'), 400)

    @t("malformed HTTP (a request line that is not one): 400")
    def _():
        return error_problems(raw(srv, b"HELLO THERE\r\n\r\n"), 400)

    @t("a body cut short (Content-Length larger than sent) and the connection closed: no crash")
    def _():
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        s.sendall(post_head(srv, "/v1/completions", b"x" * 200) + b'{"prompt": "Once upon')
        s.close()
        time.sleep(0.2)
        r = request(srv, "GET", "/health", timeout=10 * SLOW)
        return [] if srv.alive() and r.status == 200 else [f"server alive {srv.alive()}, /health {r}"]

    @t("a body cut short and the client's side half-closed: a 400 or a close, within 15 s")
    def _():
        r = raw(srv, post_head(srv, "/v1/completions", b"x" * 200) + b'{"prompt": "Once upon', half_close=True)
        if r.status is None and r.error and "closed without an answer" in r.error:
            return []
        return error_problems(r, 400)

    @t('wrong type ("max_tokens": "ten"): 400 naming max_tokens')
    def _():
        return error_problems(request(srv, "POST", "/v1/completions", dict(comp, max_tokens="ten")), 400, param="max_tokens")

    @t('wrong type ("temperature": "hot" in a chat): 400 naming temperature')
    def _():
        return error_problems(request(srv, "POST", "/v1/chat/completions", dict(chat, temperature="hot")), 400,
                              param="temperature")

    @t('wrong type ("messages": "Hi"): 400 naming messages')
    def _():
        return error_problems(request(srv, "POST", "/v1/chat/completions", {"messages": "Hi"}), 400, param="messages")

    @t('a message without content / with an unknown role: 400')
    def _():
        return error_problems(request(srv, "POST", "/v1/chat/completions",
                                      {"messages": [{"role": "wizard", "content": "Hi"}]}), 400) + \
            error_problems(request(srv, "POST", "/v1/chat/completions", {"messages": [{"role": "user"}]}), 400)

    @t("no prompt: 400")
    def _():
        return error_problems(request(srv, "POST", "/v1/completions", {"max_tokens": 5}), 400)

    @t('"n": 2: 400')
    def _():
        return error_problems(request(srv, "POST", "/v1/chat/completions", dict(chat, n=2)), 400)

    @t('"stop" with 5 strings: 400')
    def _():
        return error_problems(request(srv, "POST", "/v1/completions", dict(comp, stop=["a", "b", "c", "d", "e"])), 400)

    @t('"seed": -1: 400')
    def _():
        return error_problems(request(srv, "POST", "/v1/completions", dict(comp, seed=-1)), 400)

    @t('a field that would change the answer and is not supported ("logit_bias"): 400 naming it')
    def _():
        return error_problems(request(srv, "POST", "/v1/completions", dict(comp, logit_bias={"50": 100})), 400,
                              names=["logit_bias"])

    @t("unknown endpoint: 404 (POST /v1/nothing, GET /nothing)")
    def _():
        return error_problems(request(srv, "POST", "/v1/nothing", comp), 404) + \
            error_problems(request(srv, "GET", "/nothing"), 404)

    @t("wrong method: 405 (GET /v1/completions, DELETE /v1/chat/completions)")
    def _():
        return error_problems(request(srv, "GET", "/v1/completions"), 405) + \
            error_problems(request(srv, "DELETE", "/v1/chat/completions"), 405)

    @t("a header block over 16 KB: 431")
    def _():
        body = json.dumps(comp).encode()
        return error_problems(raw(srv, post_head(srv, "/v1/completions", body, b"X-Big: " + b"a" * 17000 + b"\r\n") + body),
                              431)

    @t("a prompt longer than the context: 400 context_length_exceeded (completion)")
    def _():
        return error_problems(request(srv, "POST", "/v1/completions", dict(comp, prompt=too_long)), 400,
                              code="context_length_exceeded")

    @t("a prompt longer than the context: 400 context_length_exceeded (chat, streamed)")
    def _():
        return error_problems(request(srv, "POST", "/v1/chat/completions",
                                      {"messages": [{"role": "user", "content": too_long}], "stream": True}),
                              400, code="context_length_exceeded")

    if srv.body_limit:
        @t(f"a body over -B {srv.body_limit}: 413 from Content-Length, the body never sent")
        def _():
            return error_problems(raw(srv, post_head(srv, "/v1/completions", b"x" * (srv.body_limit + 1000))), 413)

        @t(f"a body over -B {srv.body_limit}, sent whole: 413")
        def _():
            body = json.dumps(dict(comp, prompt="a " * srv.body_limit)).encode()
            return error_problems(raw(srv, post_head(srv, "/v1/completions", body) + body), 413)

    if srv.key:
        @t("API key: no Authorization header: 401")
        def _():
            return error_problems(request(srv, "POST", "/v1/completions", comp, auth=False), 401)

        @t("API key: a wrong key: 401 (and a key that is a prefix of the right one)")
        def _():
            return error_problems(request(srv, "POST", "/v1/completions", comp, auth=False,
                                          headers={"Authorization": "Bearer wrong"}), 401) + \
                error_problems(request(srv, "POST", "/v1/completions", comp, auth=False,
                                       headers={"Authorization": f"Bearer {srv.key[:-1]}"}), 401)

        @t("API key: /v1/models and /metrics without it: 401")
        def _():
            return error_problems(request(srv, "GET", "/v1/models", auth=False), 401) + \
                error_problems(request(srv, "GET", "/metrics", auth=False), 401)

        @t("API key: /health without it: 200")
        def _():
            r = request(srv, "GET", "/health", auth=False)
            return [] if r.status == 200 else [f"{r}"]

    @t("ignored fields (user, logprobs: false, frequency_penalty: 0): 200, the same text as ./run alone")
    def _():
        want = want_ignored
        body = {"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0, "user": "me", "logprobs": False,
                "frequency_penalty": 0}
        text, finish, usage, problems, _ = ask(srv, "completions", body)
        if want.error:
            return [want.error]
        return problems + ([] if text == as_sent(want.text, text or "") else [f"text {show(text)}, alone {show(want.text)}"])

    return tests


def run_bad_requests(srv, label, tests=None):
    results = []
    for name, f in tests or bad_requests(srv):
        try:
            why = f()
        except Exception as e:
            why = [f"{type(e).__name__}: {e}"]
        results.append((name, why))
    for name, why in results:
        check(f"{label}: {name}", not why, "; ".join(why))
    check(f"{label}: the server is still running", srv.alive(), f"exit {srv.p.poll()}")


# ----------------------------------------------------------------------------------------------
# 5: slow and hostile clients

def until_closed(s, limit, trickle=None):
    """Seconds until the server closes s (EOF, reset or an answer then EOF), sending trickle a byte
    a second; None if still open after limit seconds."""
    t0 = time.time()
    sent = 0
    next_send = t0
    while time.time() - t0 < limit:
        wait = max(0.0, min(next_send, t0 + limit) - time.time()) if trickle else t0 + limit - time.time()
        rd, _, _ = select.select([s], [], [], wait)
        if rd:
            try:
                d = s.recv(4096)
            except OSError:
                return time.time() - t0
            if not d:
                return time.time() - t0
            continue  # an answer (408 or so): wait for the close
        if trickle and time.time() >= next_send:
            try:
                s.send(trickle[sent % len(trickle):sent % len(trickle) + 1])
            except OSError:
                return time.time() - t0
            sent += 1
            next_send += 1.0
    return None


def test_idle_client(A):
    if A.error:
        return check("the slow clients' server starts", False, A.error)
    s = socket.create_connection(("127.0.0.1", A.port))
    try:
        t = until_closed(s, 40)
    finally:
        s.close()
    if t is not None:
        note(f"an idle connection was closed by the server after {t:.1f} s")
    check("a connection that sends nothing is closed within 40 s", t is not None, "still open after 40 s")


def test_trickle_client(A):
    if A.error:
        return
    s = socket.create_connection(("127.0.0.1", A.port))
    body = b'{"prompt": "Once upon a time", "max_tokens": 5}'
    data = post_head(A, "/v1/completions", body) + body
    try:
        t = until_closed(s, 30, trickle=data)
    finally:
        s.close()
    if t is not None:
        note(f"a client sending a byte a second was closed by the server after {t:.1f} s")
    check("a client that sends a byte a second is closed within 30 s", t is not None, "still open after 30 s")


def test_many_connections(A, m260, tok):
    """More idle connections than a server may keep open (the hostile client's way to hold it),
    then a normal request: served, at once (not after the idle ones time out)."""
    import resource
    n = 600
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n + 100:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 200) if hard != resource.RLIM_INFINITY else n + 200, hard))
        except (ValueError, OSError):
            pass
    hogs, refused = [], 0
    try:
        for _ in range(n):
            try:
                hogs.append(socket.create_connection(("127.0.0.1", A.port), timeout=5))
            except OSError as e:
                if e.errno == getattr(__import__("errno"), "EMFILE"):
                    break  # this process's limit
                refused += 1  # the server refuses some, as it may
        want = alone_completion(m260, tok, "Tom had a big red ball.", 30, 0.0, 0.9, 1)
        t0 = time.time()
        got = ask(A, "completions", {"prompt": "Tom had a big red ball.", "max_tokens": 30, "temperature": 0})
        took = time.time() - t0
        note(f"{len(hogs)} idle connections opened ({refused} refused): a normal request took {took:.2f} s")
        if len(hogs) + refused < n:
            note(f"only {len(hogs)} of {n} connections could be opened here (RLIMIT_NOFILE)")
        compare(f"{len(hogs) + refused} connections opened at once, sending nothing: a normal request is still "
                f"served, ./run's text", *got[:4], want)
        check("... and at once (within 8 s, before the idle ones time out)", took < 8 * SLOW, f"{took:.1f} s")
    finally:
        for s in hogs:
            s.close()


# ----------------------------------------------------------------------------------------------
# 7: real clients

def test_curl(A, m260, tok):
    curl = shutil.which("curl")
    if not curl:
        for what in ("non-streaming completion", "non-streaming chat", "streaming chat (-N)"):
            skip(f"curl: {what}", "curl not found")
        return

    def call(path, body):
        p = subprocess.run([curl, "-sS", "-N", "--max-time", str(120 * SLOW), "-H", "Content-Type: application/json",
                            "--data-binary", "@-", "-w", "\n%{http_code}", f"http://127.0.0.1:{A.port}{path}"],
                           input=json.dumps(body, ensure_ascii=False).encode(), capture_output=True)
        out, _, code = p.stdout.rpartition(b"\n")
        return Resp(int(code) if code.isdigit() else None, {}, out,
                    error=None if p.returncode == 0 else p.stderr.decode(errors="replace"))

    want = alone_completion(m260, tok, "Lily liked the park", 40, 0.9, 0.9, 5)
    r = call("/v1/completions", {"prompt": "Lily liked the park", "max_tokens": 40, "temperature": 0.9, "top_p": 0.9,
                                 "seed": 5})
    compare("curl: a completion is ./run's alone", *read_json_answer(r, False), want)
    want = alone_chat(m260, tok, SYSTEMS[1], "Where is the café?", 40, 0.0, 0.9, 1)
    msgs = [{"role": "system", "content": SYSTEMS[1]}, {"role": "user", "content": "Where is the café?"}]
    r = call("/v1/chat/completions", {"messages": msgs, "max_tokens": 40, "temperature": 0})
    compare("curl: a chat is ./run -m chat's answer", *read_json_answer(r, True), want)
    want = alone_chat(m260, tok, SYSTEMS[1], "Where is the café?", 40, 0.85, 0.95, 9)
    r = call("/v1/chat/completions", {"messages": msgs, "max_tokens": 40, "temperature": 0.85, "top_p": 0.95, "seed": 9,
                                      "stream": True, "stream_options": {"include_usage": True}})
    text, finish, usage, problems, _ = read_sse(r.body, True, True, r.status)
    compare("curl -N: a streamed chat, the deltas are ./run -m chat's answer", text, finish, usage, problems, want)


def node_modules_dir():
    d = os.environ.get("RUN_NODE_MODULES")
    if d:
        return d if os.path.isdir(os.path.join(d, "openai")) else None
    d = os.path.join(HERE, "node_modules")
    return d if os.path.isdir(os.path.join(d, "openai")) else None


def test_node(A, m260, tok, multi_turn_want):
    names = ["non-streaming chat", "streaming chat", "multi-turn chat", "completion", "error n: 2 (APIError 400)",
             "error: a prompt over the context, streamed (APIError 400)", "models.list()"]
    node = shutil.which("node")
    mods = node_modules_dir()
    if not node or not mods:
        why = "node not found" if not node else \
            "no openai package: npm install openai (in tests/, or set RUN_NODE_MODULES to a node_modules folder)"
        for n in names:
            skip(f"node openai: {n}", why)
        return
    msgs = [{"role": "system", "content": SYSTEMS[0]}, {"role": "user", "content": "Do you like the red ball?"}]
    calls = [
        {"name": names[0], "api": "chat", "params": {"model": "run", "messages": msgs, "max_tokens": 40, "temperature": 0}},
        {"name": names[1], "api": "chat", "params": {"model": "run", "messages": msgs, "max_tokens": 40, "temperature": 0.9,
                                                     "top_p": 0.9, "seed": 12, "stream": True,
                                                     "stream_options": {"include_usage": True}}},
        {"name": names[2], "api": "chat", "params": {"model": "run", "messages": MULTI_TURN, "max_tokens": 60,
                                                     "temperature": 0}},
        {"name": names[3], "api": "completions", "params": {"model": "run", "prompt": "The big dog", "max_tokens": 30,
                                                            "temperature": 0.8, "top_p": 0.95, "seed": 3}},
        {"name": names[4], "api": "chat", "params": {"model": "run", "messages": msgs, "max_tokens": 5, "n": 2}},
        {"name": names[5], "api": "chat", "params": {"model": "run", "stream": True,
                                                     "messages": [{"role": "user", "content": long_prompt(A)}]}},
        {"name": names[6], "api": "models", "params": {}},
    ]
    wants = [alone_chat(m260, tok, SYSTEMS[0], "Do you like the red ball?", 40, 0.0, 0.9, 1),
             alone_chat(m260, tok, SYSTEMS[0], "Do you like the red ball?", 40, 0.9, 0.9, 12),
             multi_turn_want,
             alone_completion(m260, tok, "The big dog", 30, 0.8, 0.95, 3)]
    p = subprocess.run([node, os.path.join(HERE, "serve_openai.mjs"), f"http://127.0.0.1:{A.port}/v1"],
                       input=json.dumps(calls).encode(), capture_output=True, timeout=300 * SLOW,
                       env=dict(os.environ, RUN_NODE_MODULES=os.path.abspath(mods)))
    lines = [l for l in p.stdout.decode("utf-8", "replace").split("\n") if l.strip()]
    try:
        results = [json.loads(l) for l in lines]
    except Exception:
        results = []
    if results and "skip" in results[0]:
        for n in names:
            skip(f"node openai: {n}", results[0]["skip"])
        return
    if results and "openai_version" in results[0]:
        note(f"npm openai {results[0]['openai_version']}, node {subprocess.run([node, '--version'], capture_output=True, text=True).stdout.strip()}")
        results = results[1:]
    by_name = {r.get("name"): r for r in results}
    if p.returncode != 0 or len(by_name) != len(calls):
        check("node openai: tests/serve_openai.mjs ran", False,
              f"exit {p.returncode}: {p.stderr.decode(errors='replace')[-400:]} {p.stdout[-200:]!r}")
    for k, name in enumerate(names[:4]):
        r = by_name.get(name)
        if r is None:
            check(f"node openai: {name}", False, "no result")
            continue
        if "error" in r:
            check(f"node openai: {name}", False, f"threw {r['error']}")
            continue
        problems = []
        if k < 3 and r.get("role") != "assistant":
            problems.append(f"role {r.get('role')!r}")
        problems += usage_problems(r.get("usage"))
        text = r.get("text")
        if not isinstance(text, str) or text_problem(text):
            text, problems = None, problems + [f"text {r.get('text')!r}"]
        compare(f"node openai: {name} is ./run's alone" if k != 2 else
                f"node openai: {name} is the fresh single-request server's", text, r.get("finish_reason"),
                r.get("usage"), problems, wants[k], check_usage=k != 2)
    for name, code in ((names[4], ...), (names[5], "context_length_exceeded")):
        r = by_name.get(name) or {}
        e = r.get("error") or {}
        why = []
        if not e:
            why.append(f"did not throw: {str(r)[:200]}")
        else:
            if not e.get("api_error") or e.get("status") != 400:
                why.append(f"threw {e.get('class')} status {e.get('status')}: {e.get('message')}")
            if code is not ... and e.get("code") != code:
                why.append(f"code {e.get('code')!r}, want {code!r}")
        check(f"node openai: {name}", not why, "; ".join(why))
    r = by_name.get(names[6]) or {}
    check(f"node openai: {names[6]} names the model's file", r.get("ids") == [os.path.basename(m260)], f"{r}")


# ----------------------------------------------------------------------------------------------
# 9: /v1/models, /health, /metrics

def test_keep_alive(A, m260, tok):
    """Three requests, one after the other, on one connection (as clients that pool them send)."""
    c = http.client.HTTPConnection("127.0.0.1", A.port, timeout=60 * SLOW)
    results = []
    calls = [("completions", {"prompt": "Once upon a time", "max_tokens": 20, "temperature": 0}, False),
             ("chat", {"messages": MULTI_TURN[:2], "max_tokens": 20, "temperature": 0.9, "seed": 8, "top_p": 0.9}, True),
             ("completions", {"prompt": "Tom and Lily", "max_tokens": 3, "temperature": 0}, False)]
    wants = [alone_completion(m260, tok, "Once upon a time", 20, 0.0, 0.9, 1),
             alone_chat(m260, tok, MULTI_TURN[0]["content"], MULTI_TURN[1]["content"], 20, 0.9, 0.9, 8),
             alone_completion(m260, tok, "Tom and Lily", 3, 0.0, 0.9, 1)]
    try:
        for api, body, stream in calls:
            path = "/v1/chat/completions" if api == "chat" else "/v1/completions"
            c.request("POST", path, json.dumps(dict(body, stream=stream)), {"Content-Type": "application/json"})
            r = c.getresponse()
            resp = Resp(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
            results.append(read_sse(resp.body, True, False, resp.status, resp.headers)[:4] if stream else
                           read_json_answer(resp, api == "chat"))
    except Exception as e:
        results.append((None, None, None, [f"request {len(results) + 1} on the connection: {type(e).__name__}: {e}"]))
    finally:
        c.close()
    for k, want in enumerate(wants):
        got = results[k] if k < len(results) else (None, None, None, ["not sent"])
        compare(f"keep-alive: request {k + 1} of 3 on one connection is ./run's alone", *got, want)


def test_pipelining(A, m260, tok):
    """Two requests sent at once on one connection (HTTP/1.1 pipelining): both answered, in order,
    the second as soon as the first is (not when some timer next fires)."""
    bodies = [{"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0},
              {"prompt": "The dog ran", "max_tokens": 8, "temperature": 0}]
    wants = [alone_completion(m260, tok, b["prompt"], 8, 0.0, 0.9, 1) for b in bodies]
    data = b"".join(post_head(A, "/v1/completions", encode_body(b)) + encode_body(b) for b in bodies)
    s = socket.create_connection(("127.0.0.1", A.port), timeout=30 * SLOW)
    buf, got, times, t0 = b"", [], [], time.time()
    try:
        s.sendall(data)
        while len(got) < 2:
            d = s.recv(65536)
            if not d:
                break
            buf += d
            r = raw_parse(buf, False)
            while r is not None and r.status:
                got.append(r)
                times.append(time.time() - t0)
                end = buf.find(b"\r\n\r\n") + 4 + len(r.body)
                buf = buf[end:]
                r = raw_parse(buf, False) if buf else None
    except OSError as e:
        got.append(Resp(error=f"{type(e).__name__}: {e}"))
    finally:
        s.close()
    for k in range(2):
        answer = read_json_answer(got[k], False) if k < len(got) else (None, None, None, ["no answer"])
        compare(f"pipelining: request {k + 1} of 2 sent at once is ./run's alone", *answer, wants[k])
    if len(times) == 2:
        note(f"pipelining: the answers came {times[0]:.2f} s and {times[1]:.2f} s after the requests")
        check("pipelining: the second answer follows the first at once (within 0.5 s)", times[1] - times[0] < 0.5 * SLOW,
              f"{times[1] - times[0]:.2f} s later")


def test_endpoints(A, m260):
    r = request(A, "GET", "/v1/models")
    try:
        obj = json.loads(r.body)
        ok = r.status == 200 and obj.get("object") == "list" and len(obj.get("data")) == 1 and \
            obj["data"][0].get("id") == os.path.basename(m260) and obj["data"][0].get("object") == "model"
    except Exception:
        ok = False
    check(f"GET /v1/models lists one model named {os.path.basename(m260)!r}", ok, f"{r}")
    r = request(A, "GET", "/health")
    try:
        ok = r.status == 200 and json.loads(r.body) == {"status": "ok"}
    except Exception:
        ok = False
    check('GET /health: 200 {"status": "ok"}', ok, f"{r}")
    r = request(A, "GET", "/metrics")
    values, bad = parse_metrics(r.body.decode("utf-8", "replace")) if r.status == 200 else ({}, ["no answer"])
    check("GET /metrics: 200, text/plain, every line Prometheus' text format",
          r.status == 200 and r.headers.get("content-type", "").startswith("text/plain") and not bad,
          f"{r.status} {r.headers.get('content-type')!r}; bad lines: {bad[:3]}")
    names = {k[0] for k in values}
    need = ["run_requests_total", "run_prompt_tokens_total", "run_generated_tokens_total", "run_requests_running",
            "run_requests_waiting", "run_kv_blocks_used", "run_kv_blocks_free", "run_prefix_cache_hit_tokens_total"]
    missing = [n for n in need if n not in names]
    outcomes = {dict(k[1]).get("outcome") for k in values if k[0] == "run_requests_total"}
    check("GET /metrics: the contract's metrics and outcomes (stop, length, cancelled, error, rejected)",
          not missing and {"stop", "length", "cancelled", "error", "rejected"} <= outcomes,
          f"missing {missing}, outcomes {sorted(o for o in outcomes if o)}")


def test_env_key(m260, tok):
    E = Server("E", m260, tok, "-b", "1", "-n", "20", "-t", "0.7", "-p", "0.8", "-s", "99",
               env={"RUN_API_KEY": "from-the-env"}, key="from-the-env")
    if E.error:
        check("RUN_API_KEY server starts", False, E.error)
        return
    # the command line's -n -t -p -s for the fields a request leaves out
    want = alone_completion(m260, tok, "The red ball", 20, 0.7, 0.8, 99)
    compare("-n 20 -t 0.7 -p 0.8 -s 99: a request without those fields gets them (./run -t 0.7 -p 0.8 -s 99, 20 tokens)",
            *ask(E, "completions", {"prompt": "The red ball"})[:4], want)
    want = alone_chat(m260, tok, SYSTEMS[2], "Is it hot?", 20, 0.7, 0.8, 99)
    compare("-n 20 -t 0.7 -p 0.8 -s 99: a chat without them too (./run -m chat -a 20 ...)",
            *ask(E, "chat", {"messages": [{"role": "system", "content": SYSTEMS[2]},
                                          {"role": "user", "content": "Is it hot?"}]})[:4], want)
    body = {"prompt": "Once upon a time", "max_tokens": 10, "temperature": 0}
    why = error_problems(request(E, "POST", "/v1/completions", body, auth=False), 401)
    check("RUN_API_KEY: a request without the key: 401", not why, "; ".join(why))
    want = alone_completion(m260, tok, "Once upon a time", 10, 0.0, 0.9, 1)
    compare("RUN_API_KEY: with the key: 200, ./run's text", *ask(E, "completions", body)[:4], want)
    rc = E.stop(30 * SLOW)
    check("RUN_API_KEY server: SIGTERM when idle: exit 0", rc == 0, f"exit {rc}")


# ----------------------------------------------------------------------------------------------
# 10: the byte-level chat templates: Llama 3 (headers) and Qwen3 (ChatML, thinking)

THINK, END_THINK = 151667, 151668  # Qwen3's <think> and </think>
BL_SYSTEM = "You are a pirate who likes the sea."
BL_USERS = ["Hi there! Où est le café? 🐶", "Tell me about the big red ball."]
# gen_model's arguments after OUT: dim 64, hidden 128, 2 layers, 4 heads over 2 KV heads, context 256
BL_MODELS = {"llama3": ("serve_rl3_64x2_256_s5.bin", [64, 128, 2, 4, 2, 128256, 256, 5]),
             "qwen3": ("serve_rq3_64x2_256_s6.bin", [64, 128, 2, 4, 2, 151936, 256, 6])}
THINKER = ("serve_rq3_thinker_64x2_256_s6.bin", [64, 128, 2, 4, 2, 151936, 256, 6, "--unshared"])
# The references run on one thread (-j 1): the text is the same on any number (threads split a
# matmul's rows and the attention's heads, never a sum), and three at once, each with a thread
# per core that spins between the classifier's 150,000-row matmuls, took 3 to 10 times as long
# on 2 cores. The servers keep their default, so the comparisons cross thread counts too.
ONE_THREAD = ["-j", "1"]
# --quick, and under AddressSanitizer (where each reference takes a second): fewer cases, each path once
FEW = QUICK or SANITIZED
BL_TESTS = ["Llama 3 (header template) through the server", "Qwen3 (ChatML, enable_thinking) through the server",
            "Qwen3: thinking apart in reasoning_content"]


def python_with_numpy():
    """The python3 export.py runs with: $PYTHON, else the first of python3 and /usr/bin/python3
    that has numpy; (path, None) or (None, why)."""
    names = [os.environ["PYTHON"]] if os.environ.get("PYTHON") else ["python3", "/usr/bin/python3"]
    for n in names:
        exe = shutil.which(n)
        if exe and subprocess.run([exe, "-c", "import numpy"], capture_output=True).returncode == 0:
            return exe, None
    return None, f"no python3 with numpy ({' nor '.join(names)}; PYTHON names one)"


def make_thinker(path):
    """gen_model's Qwen3-vocabulary model (its classifier apart from the embedding) made to write
    <think> and </think> often, and newlines: every token's embedding gets 1.0 in dimension 0 (so
    dimension 0 of the last hidden state stays positive: a weight there is a bias), and the
    classifier's rows of <think>, </think>, "\\n" and "\\n\\n" get 5.0 there. With temperature 1 some
    answers start with <think> and close it, some never close it, some have no <think>."""
    import array
    with open(path, "r+b") as f:
        head = array.array("i", f.read(28))
        if sys.byteorder == "big":
            head.byteswap()
        dim, vocab = head[0], -head[5]
        emb = array.array("f", f.read(vocab * dim * 4))
        emb[0::dim] = array.array("f", [1.0]) * vocab
        five = array.array("f", [5.0])
        if sys.byteorder == "big":
            emb.byteswap(), five.byteswap()
        f.seek(28)
        f.write(emb.tobytes())
        f.seek(-vocab * dim * 4, 2)  # the classifier: the file's last tensor
        cls = f.tell()
        for t in (THINK, END_THINK, 198, 271):  # 198 "\n", 271 "\n\n"
            f.seek(cls + t * dim * 4)
            f.write(five.tobytes())


def split_thinking(want):
    """./run's answer as a server must return it with Qwen3's thinking on (vLLM's convention):
    an answer that starts with "<think>" is reasoning up to the first "</think>", without the
    newlines at its two ends, and content after it, without the newlines at its start; any other
    is all content. One cut (max_tokens) before its "</think>" is reasoning only, without the
    newlines at its start (llama-server's way; some vLLM versions make it all content instead).
    (reasoning bytes or None, the content's Want)."""
    if want.error or not want.text.startswith(b"<think>"):
        return None, want
    rest = want.text[len(b"<think>"):]
    end = rest.find(b"</think>")
    if end < 0:
        reasoning, content = rest.lstrip(b"\n"), b""
    else:
        reasoning, content = rest[:end].strip(b"\n"), rest[end + len(b"</think>"):].lstrip(b"\n")
    return reasoning, Want(content, want.finish, want.prompt_tokens, want.completion_tokens)


class Ask:
    """A request of these checks and ./run alone's answer it must be (a Want or a Future of one);
    think: Qwen3 with thinking on, the answer's <think>...</think> goes to reasoning_content;
    text_only: the reference knows the text, not the finish_reason."""
    def __init__(self, name, srv, api, body, want, stream=False, include_usage=False, think=False, text_only=False):
        self.name, self.srv, self.api, self.body, self.want = name, srv, api, body, want
        self.stream, self.include_usage, self.think, self.text_only, self.got = stream, include_usage, think, text_only, None


def send_all(asks, clients):
    """Every request at once from `clients` threads (so the servers batch them)."""
    q = queue.Queue()
    for a in asks:
        q.put(a)

    def client():
        while True:
            try:
                a = q.get_nowait()
            except queue.Empty:
                return
            a.got = ask(a.srv, a.api, a.body, a.stream, a.include_usage)

    ts = [threading.Thread(target=client) for _ in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def wanted(a):
    return a.want.result() if isinstance(a.want, concurrent.futures.Future) else a.want


def judge(a):
    """One check: the answer's content (and reasoning_content) are ./run's alone."""
    want = wanted(a)
    text, finish, usage, problems, facts = a.got
    if a.text_only and not want.error:
        want = Want(want.text, finish)
    reasoning = None
    if not want.error and isinstance(want.text, str):  # a fresh server's answer: its reasoning too
        reasoning = getattr(want, "reasoning", None)
    elif a.think:
        reasoning, want = split_thinking(want)
    why = differences(text, finish, usage, problems, want)
    got = facts.get("reasoning")
    if not want.error and text is not None:
        if not reasoning:  # all content: no reasoning_content (or an empty one)
            if got:
                why.append(f"reasoning_content {show(got)}, but the answer is all content "
                           f"({'no <think> at its start' if a.think else 'thinking off'})")
        elif got != as_sent(reasoning, got or ""):
            why.append(f"reasoning_content {'absent' if got is None else show(got)}, ./run's thinking "
                       f"{show(as_sent(reasoning, got or ''))}")
    return check(a.name, not why, "; ".join(why))


def greedy():
    return {"temperature": 0}, (0.0, 0.9, 1), []


def seeded(seed, t=0.9, p=1.0, k=None):
    """Seeded sampling. top_p below 1 only after a top_k: over a vocabulary of 150,000 a random
    model's flat distribution makes the nucleus sort most of it, 35 ms a token."""
    body, extra = {"temperature": t, "top_p": p, "seed": seed}, []
    if k:
        body["top_k"], extra = k, ["-K", str(k)]
    return body, (t, p, seed), extra


def chat_ask(name, srv, user, n, sampling, stream=False, include_usage=False, kwargs=None, alone_e=None, think=False):
    """A chat of BL_SYSTEM and `user` against ./run -m chat -y BL_SYSTEM -i user (with -e alone_e)."""
    sbody, (t, p, seed), extra = sampling
    body = dict(sbody, messages=[{"role": "system", "content": BL_SYSTEM}, {"role": "user", "content": user}],
                max_tokens=n)
    if kwargs is not None:
        body["chat_template_kwargs"] = kwargs
    extra = extra + ONE_THREAD + (["-e", str(alone_e)] if alone_e is not None else [])
    want = POOL.submit(alone_chat, srv.model, srv.tok, BL_SYSTEM, user, n, t, p, seed, extra)
    return Ask(name, srv, "chat", body, want, stream, include_usage, think)


def completion_ask(name, srv, prompt, n, sampling, stream=False, include_usage=False):
    sbody, (t, p, seed), extra = sampling
    want = POOL.submit(alone_completion, srv.model, srv.tok, prompt, n, t, p, seed, extra + ONE_THREAD)
    return Ask(name, srv, "completions", dict(sbody, prompt=prompt, max_tokens=n), want, stream, include_usage)


def fresh_answer(R, body):
    """A fresh single-request server's answer: the reference of a multi-turn chat."""
    text, finish, usage, problems, facts = ask(R, "chat", body)
    if text is None or problems:
        return Want(error=f"the fresh single-request server: {'; '.join(problems)}")
    w = Want(text, finish)
    w.reasoning = facts.get("reasoning")
    return w


def chat_turns(model, tok, system, users, n):
    """./run -m chat -y SYSTEM -a N -t 0 with the users' lines on stdin: its answers (bytes), or
    (None, why)."""
    out, err, rc = run_alone([model, "-z", tok, "-m", "chat", "-y", system, "-a", str(n), "-n", "0", "-t", "0"]
                             + ONE_THREAD,
                             stdin="".join(u + "\n" for u in users).encode("utf-8"))
    head, sep, tail = b"User: Assistant: ", b"\nUser: Assistant: ", b"\nUser: \n"
    if rc != 0 or not out.startswith(head) or not out.endswith(tail):
        return None, f"./run -m chat with {len(users)} lines on stdin: exit {rc}, stdout {out[:60]!r}; {err.strip()[:200]}"
    answers = out[len(head):-len(tail)].split(sep)
    if len(answers) != len(users):
        return None, f"./run -m chat: {len(answers)} answers to {len(users)} lines"
    return answers, None


def stop_servers(label, servers):
    rcs = [(s.name, s.stop(30 * SLOW)) for s in servers]
    check(f"{label}: its servers exit 0 on SIGTERM", all(rc == 0 for _, rc in rcs), f"{rcs}")


def test_byte_level(label, model, tok, qwen):
    """Llama 3's header template or Qwen3's ChatML through the server: chats of a system and a
    user message (greedy and seeded, streamed and not, batched on -b 4) are ./run -m chat's
    answers; 3-turn chats a fresh -b 1 server's; completions ./run's; Qwen3's enable_thinking (in
    a request, and -e 0 on the command line) picks -m chat -e 0's or -e 1's answer; with Llama 3,
    enable_thinking false is a 400. With Qwen3's thinking on, an answer that starts with <think>
    comes apart (split_thinking()); this random model's answers hardly ever do (<think> is one
    token in 151,936), so here they check that all is content and there is no reasoning_content;
    test_thinker() has a model that thinks."""
    M = Server(f"{label} M", model, tok, "-b", "4")
    R = Server(f"{label} R", model, tok, "-b", "1")
    E = Server(f"{label} E", model, tok, "-b", "2", "-e", "0") if qwen else None
    servers = [s for s in (M, R, E) if s]
    bad = [s.error for s in servers if s.error]
    if bad:
        check(f"{label}: the servers start", False, "; ".join(bad))
        return
    u0, u1 = BL_USERS[0], BL_USERS[1]
    asks = [chat_ask(f"{label}: a chat (system + user), greedy: ./run -m chat's answer", M, u0, 40, greedy(),
                     think=qwen),
            chat_ask(f"{label}: a chat, seeded, streamed (+usage): ./run -m chat's answer", M, u0, 40, seeded(11),
                     True, True, think=qwen),
            completion_ask(f"{label}: a completion, seeded, streamed (+usage): ./run's", M,
                           "Once upon a time, the pirate", 30, seeded(13, 0.8), True, True)]
    if not FEW:
        asks += [chat_ask(f"{label}: a chat, greedy, streamed: ./run -m chat's answer", M, u1, 50, greedy(), True,
                          think=qwen),
                 chat_ask(f"{label}: a chat, seeded with top_k 40: ./run -m chat -K 40's answer", M, u1, 50,
                          seeded(12, 1.0, 0.9, 40), think=qwen),
                 chat_ask(f"{label}: a chat that max_tokens 3 cuts (finish_reason length)", M, u1, 3, seeded(14),
                          think=qwen),
                 completion_ask(f"{label}: a completion, greedy: ./run's", M, "Où est le café? 12 + 30 =", 40, greedy())]
    if qwen:
        off, on = {"enable_thinking": False}, {"enable_thinking": True}
        asks += [chat_ask(f"{label}: enable_thinking false, greedy: ./run -m chat -e 0's answer", M, u0, 40, greedy(),
                          kwargs=off, alone_e=0),
                 chat_ask(f"{label}: a server with -e 0, no chat_template_kwargs: ./run -m chat -e 0's answer", E, u0,
                          40, greedy(), alone_e=0),
                 chat_ask(f"{label}: a server with -e 0, enable_thinking true: ./run -m chat -e 1's answer", E, u0, 40,
                          greedy(), kwargs=on, alone_e=1, think=True)]
        if not FEW:
            asks += [chat_ask(f"{label}: enable_thinking false, seeded, streamed: ./run -m chat -e 0's answer", M, u1,
                              50, seeded(15), True, kwargs=off, alone_e=0),
                     chat_ask(f"{label}: enable_thinking true, greedy, streamed: ./run -m chat -e 1's answer", M, u1,
                              50, greedy(), True, kwargs=on, alone_e=1, think=True),
                     chat_ask(f"{label}: a server with -e 0, no chat_template_kwargs, seeded, streamed: "
                              f"./run -m chat -e 0's answer", E, u1, 50, seeded(16), True, True, alone_e=0)]
    elif not FEW:  # Llama 3's template has no thinking to turn on: accepted, the same answer
        asks.append(chat_ask(f"{label}: enable_thinking true (nothing to turn on): ./run -m chat's answer", M, u0, 40,
                             greedy(), kwargs={"enable_thinking": True}))
    # the multi-turn chats: the same request on the fresh single-request server first
    first = asks[0]
    got = ask(R, "chat", first.body)
    first_on_r = Ask(f"{label}: the fresh -b 1 server: a 1-turn chat is ./run -m chat's answer", R, "chat",
                     first.body, first.want, think=qwen)
    first_on_r.got = got
    judge(first_on_r)
    multi = [(f"{label}: a 3-turn chat, greedy: the fresh -b 1 server's answer", MULTI_TURN,
              {"max_tokens": 40, "temperature": 0}, False)]
    if not FEW:
        multi.append((f"{label}: a 3-turn chat, seeded, streamed: the fresh -b 1 server's answer", MULTI_TURN,
                      {"max_tokens": 40, "temperature": 0.9, "top_p": 1.0, "seed": 21}, True))
    for name, messages, settings, stream in multi:
        body = dict(settings, messages=messages)
        asks.append(Ask(name, M, "chat", body, fresh_answer(R, body), stream))
    three_turns = asks[-len(multi)]
    if qwen:
        # Qwen3's template keeps an earlier answer without its thinking: the same answer as without it
        thought = [dict(m, content=f"<think>\nThe user said: {MULTI_TURN[i - 1]['content']}\n</think>\n\n{m['content']}")
                   if m["role"] == "assistant" else m for i, m in enumerate(MULTI_TURN)]
        asks.append(Ask(f"{label}: a 3-turn chat whose earlier answers have <think>...</think>: the same answer "
                        f"(the template drops them)", M, "chat", dict(multi[0][2], messages=thought),
                        three_turns.want))
        # the earlier turns as ./run -m chat leaves them in its context (ChatML: the template's
        # tokens of its answer's text): its third answer to three lines on stdin
        users = [m["content"] for m in MULTI_TURN if m["role"] == "user"]
        answers, why = chat_turns(model, tok, MULTI_TURN[0]["content"], users, 16)
        name = f"{label}: a 3-turn chat of ./run -m chat's own first answers (3 lines on stdin, greedy): its third answer"
        if why:
            check(name, False, why)
        else:
            try:
                earlier = [a.decode("utf-8") for a in answers[:2]]
            except UnicodeDecodeError:
                earlier = None
                skip(name, f"an earlier answer is not UTF-8, which JSON cannot carry: {answers[:2]!r}")
            if earlier is not None:
                messages = [MULTI_TURN[0], {"role": "user", "content": users[0]},
                            {"role": "assistant", "content": earlier[0]}, {"role": "user", "content": users[1]},
                            {"role": "assistant", "content": earlier[1]}, {"role": "user", "content": users[2]}]
                # text only: -m chat's answers do not say whether the third stopped or was cut
                asks.append(Ask(name, M, "chat", {"messages": messages, "max_tokens": 16, "temperature": 0},
                                Want(answers[2]), think=True, text_only=True))
    else:
        r = request(M, "POST", "/v1/chat/completions", dict(asks[0].body, chat_template_kwargs={"enable_thinking": False}))
        why = error_problems(r, 400, param="chat_template_kwargs")
        check(f"{label}: enable_thinking false (no thinking to turn off): 400 naming chat_template_kwargs", not why,
              "; ".join(why))
    for a in asks:  # the references first: the requests then go out together
        wanted(a)
    if qwen:
        e0, e1 = (wanted(next(a for a in asks if a.name.startswith(f"{label}: {what}"))) for what in
                  ("enable_thinking false, greedy", "a server with -e 0, enable_thinking true"))
        check(f"{label}: ./run -m chat -e 0 and -e 1 answer differently here (else the enable_thinking checks see nothing)",
              e0.error or e1.error or e0.text != e1.text, f"both {show(e0.text)}")
    t0 = time.time()
    send_all(asks, 6)
    note(f"{label}: {len(asks)} requests in {time.time() - t0:.1f} s")
    for a in asks:
        judge(a)
    stop_servers(label, servers)


def test_thinker(model, tok):
    """Qwen3's thinking apart, with a model drawn to <think> and </think> (make_thinker()):
    answers that start with <think> and close it, that never close it (greedy), and that have
    none, each split as vLLM does against ./run -m chat's text; with enable_thinking false all
    of it is content."""
    label = "Qwen3 thinking apart"
    T = Server("thinker", model, tok, "-b", "4")
    if T.error:
        check(f"{label}: the server starts", False, T.error)
        return
    # here seed 3 thinks "\n strm" then answers, 13 thinks nothing ("<think></think>"), 6 thinks and
    # answers, 7 never closes its thinking, 4 has no <think> at its start but a "</think>" later
    seeds = [(3, True), (13, False)] if FEW else [(3, True), (3, False), (13, True), (13, False), (6, True),
                                                    (7, False), (4, True)]
    asks = [chat_ask(f"{label}: seed {s}{', streamed' if stream else ''}", T, BL_USERS[0], 30, seeded(s, 1.0, 1.0),
                     stream, think=True) for s, stream in seeds]
    asks.append(chat_ask(f"{label}: greedy, streamed", T, BL_USERS[0], 20, greedy(), True, think=True))
    # seed 19 with -e 0 starts with <think> here: with thinking off, that is content too
    asks.append(chat_ask(f"{label}: enable_thinking false: all content, ./run -m chat -e 0's", T, BL_USERS[0], 30,
                         seeded(19, 1.0, 1.0), kwargs={"enable_thinking": False}, alone_e=0))
    for a in asks:
        wanted(a)
    send_all(asks, 4)
    kinds = {"closed": 0, "unclosed": 0, "none": 0}
    for a in asks[:-1]:
        t = wanted(a).text or b""
        kinds["none" if not t.startswith(b"<think>") else "closed" if b"</think>" in t else "unclosed"] += 1
        judge(a)
    judge(asks[-1])
    note(f"{label}: of {len(asks) - 1} answers with thinking on, {kinds['closed']} think and close it, "
         f"{kinds['unclosed']} never close it, {kinds['none']} do not start with <think>")
    if not kinds["closed"]:
        skip(f"{label}: an answer that thinks then answers", "none of these seeds' answers closes its <think> here")
    stop_servers(label, [T])


def exported_tokenizers(whiches):
    """../shared's tokenizer.json of each of `whiches` (llama3, qwen3) as export.py writes it, kept
    in the golden cache under the hash of export.py and the JSON (so a changed export.py writes
    them again); ({which: path}, why not for the others)."""
    import hashlib
    toks, making, why = {}, [], None
    for which in whiches:
        src = os.path.join(SHARED, "tokenizer", which, "tokenizer.json")
        if not os.path.exists(src):
            why = f"{src} not found"
            continue
        h = hashlib.sha256()
        for f in (os.path.join(ROOT, "export.py"), src):
            with open(f, "rb") as fh:
                h.update(hashlib.sha256(fh.read()).digest())
        out = os.path.join(golden_cache(), f"serve_tokenizer_{which}_{h.hexdigest()[:16]}.bin")
        if os.path.exists(out):
            toks[which] = out
        else:
            making.append((which, src, out))
    if making:
        python, why_not = python_with_numpy()
        if not python:
            return toks, why_not
        runs = [(which, src, out, f"{out}.{os.getpid()}") for which, src, out in making]
        procs = [subprocess.Popen([python, os.path.join(ROOT, "export.py"), tmp, "--tokenizer", src], cwd=ROOT,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for _, src, _, tmp in runs]
        for (which, src, out, tmp), p in zip(runs, procs):  # the two at once
            _, err = p.communicate()
            if check(f"{python} export.py OUT --tokenizer {src}", p.returncode == 0,
                     f"exit {p.returncode}: {err.decode(errors='replace')[-300:]}"):
                os.replace(tmp, out)
                toks[which] = out
            else:
                why = "export.py failed"
    return toks, why


def test_templates():
    toks, why = exported_tokenizers(["llama3", "qwen3"])
    for (which, label, qwen), name in zip((("llama3", "Llama 3", False), ("qwen3", "Qwen3", True)), BL_TESTS):
        model, why_model = random_model(*BL_MODELS[which])
        if which not in toks or not model:
            skip(name, why if which not in toks else why_model)
            continue
        test_byte_level(label, model, toks[which], qwen)
    model, why_model = random_model(*THINKER, craft=make_thinker)
    if "qwen3" not in toks or not model:
        skip(BL_TESTS[2], why if "qwen3" not in toks else why_model)
    else:
        test_thinker(model, toks["qwen3"])


# ----------------------------------------------------------------------------------------------
# The slow model: 4 (beside a stream; queue full), 6, 8

def golden_cache():
    d = os.environ.get("GOLDEN_CACHE") or os.path.join(tempfile.gettempdir(), "llm-golden-cache")
    os.makedirs(d, exist_ok=True)
    return d


_gen_lock = threading.Lock()  # one thread at a time builds gen_model and writes a model


def random_model(name, args, craft=None):
    """The random-weight model `name` in the golden cache, written by ../shared/tools/gen_model.c
    with these arguments (after OUT), then changed by craft(path) if given (a name is one recipe:
    made once, then taken from the cache); (path, None) or (None, why)."""
    gen_c = os.path.join(SHARED, "tools", "gen_model.c")
    if not os.path.exists(gen_c):
        return None, f"{gen_c} not found"
    d = golden_cache()
    path = os.path.join(d, name)
    with _gen_lock:
        if os.path.exists(path):
            return path, None
        gen = os.path.join(d, "gen_model")
        if not os.path.exists(gen):
            cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
            if not cc:
                return None, "no C compiler for gen_model.c"
            tmp = f"{gen}.{os.getpid()}"
            if subprocess.run([cc, "-O2", "-o", tmp, gen_c, "-lm"]).returncode != 0:
                return None, "gen_model.c did not build"
            os.replace(tmp, gen)
        tmp = f"{path}.{os.getpid()}"
        if subprocess.run([gen, tmp] + [str(a) for a in args]).returncode != 0:
            return None, "gen_model failed"
        if craft:
            craft(tmp)
        os.replace(tmp, path)
    return path, None


def slow_model():
    """A random-weight model of stories15M's shape with a 1024-position context and Llama 2's
    vocabulary, written by ../shared/tools/gen_model.c into the golden cache; (path, None) or
    (None, why)."""
    return random_model("serve_r15M_1024_s7.bin", [288, 768, 6, 6, 6, 32000, 1024, 7])


SLOW_TESTS = ["a long stream beside every bad request: unchanged", "queue full: 503 with Retry-After",
              "cancellation mid-stream and mid-prompt", "SIGTERM: running requests finish, exit 0",
              "a second signal: a final error message, exit 0"]


def test_slow(m260, tok512):
    model, why = slow_model()
    tok = os.path.join(ROOT, "tokenizer.bin")
    if model is None or not os.path.exists(tok):
        why = why or f"{tok} not found"
        for n in SLOW_TESTS:
            skip(n, f"no slow model: {why}")
        # the bad requests still, on the small model
        C = Server("C", m260, tok512, "-b", "2", "-B", "8000", "-A", "secret-key", key="secret-key")
        C.body_limit = 8000
        if C.error:
            check("the bad-request server starts", False, C.error)
            return
        run_bad_requests(C, "bad request")
        return
    # how many tokens last about a second and a half here (alone, this binary)
    t0 = time.time()
    run_alone([model, "-z", tok, "-n", "160", "-i", "Once", "-t", "0", "-s", "1"])
    per_token = (time.time() - t0) / 160
    long = max(48 if SANITIZED else 96, min(300, int(1.5 / per_token)))
    note(f"slow model: {per_token * 1000:.1f} ms a token alone; long requests: {long} tokens")
    C = Server("C", model, tok, "-b", "2", "-B", "8000", "-A", "secret-key", key="secret-key")
    C.body_limit = 8000
    D = Server("D", model, tok, "-b", "1", "-q", "1")
    D.body_limit = 0
    if C.error or D.error:
        check("the slow model's servers start", False, C.error or D.error)
        return

    def comp(prompt, n, t=0.0, p=0.9, seed=1):
        body = {"prompt": prompt, "max_tokens": n, "temperature": t, "top_p": p, "seed": seed}
        return body, POOL.submit(alone_completion, model, tok, prompt, n, t, p, seed)

    s_body, s_want = comp("The stream that goes on", long, 0.9, 0.95, 17)
    q_body, q_want = comp("Wait in the queue", long)
    x_body, x_want = comp("A request beside", long // 2, 1.0, 0.9, 5)
    y_body, _ = comp("Gone after two chunks", long)
    z_prompt = "This prompt is long. " * (model_context(model) * 2 // 3 // 6)
    z_body, _ = comp(z_prompt, long)
    t1_body, t1_want = comp("Finish me after SIGTERM", long, 0.8, 0.9, 23)
    t2_body, t2_want = comp("And me too", long // 2)

    # 4: every bad request while a long request streams
    tests = bad_requests(C)
    st = Stream(C, "/v1/completions", dict(s_body, stream=True, stream_options={"include_usage": True}))
    st.first_content.wait(60 * SLOW)
    run_bad_requests(C, "bad request beside a stream", tests)
    bad_done = time.time()
    st.wait()
    text, finish, usage, problems, _ = read_sse(st.body(), False, True, st.status, st.headers)
    compare(f"a long stream ({long} tokens) beside every bad request: its text is ./run's alone", text, finish, usage,
            problems + ([st.error] if st.error else []), s_want.result(), long)
    if st.end_time and st.end_time < bad_done:
        skip("... the stream outlasted the bad requests", f"it ended {bad_done - st.end_time:.1f} s before the last")
    else:
        check("... the stream outlasted the bad requests", True)

    # 4: queue full (D: -b 1 -q 1)
    before = metrics(D)
    results = [None] * 5
    barrier = threading.Barrier(5)

    def fire(i):
        barrier.wait()
        results[i] = request(D, "POST", "/v1/completions", q_body)

    ts = [threading.Thread(target=fire, args=(i,)) for i in range(5)]
    for t in ts:
        t.start()
    time.sleep(0.3)
    h = request(D, "GET", "/health", timeout=10 * SLOW)
    for t in ts:
        t.join()
    ok200 = [r for r in results if r.status == 200]
    r503 = [r for r in results if r.status == 503]
    check("queue full (-b 1 -q 1, 5 long requests at once): at least one 503, the others 200",
          len(r503) >= 1 and len(ok200) + len(r503) == 5, f"statuses {[r.status for r in results]}")
    check("queue full: one running and one waiting are served (two 200s)", len(ok200) == 2,
          f"statuses {[r.status for r in results]}")
    for r in r503[:1]:
        why = error_problems(r, 503)
        ra = r.headers.get("retry-after", "")
        if not ra.strip().isdigit():
            why.append(f"Retry-After {ra!r}")
        check("queue full: the 503 has Retry-After (seconds) and an error object", not why, "; ".join(why))
    for k, r in enumerate(ok200):
        compare(f"queue full: served request {k} is ./run's alone", *read_json_answer(r, False), q_want.result(), long)
    check("queue full: GET /health is answered meanwhile", h.status == 200, f"{h}")
    after = metrics(D)
    if before and after:
        got = metric(after, "run_requests_total", outcome="rejected") - metric(before, "run_requests_total", outcome="rejected")
        check("queue full: /metrics counts the rejected requests", got == len(r503), f"grew by {got}, {len(r503)} 503s")

    # 8: a second signal cancels, each request getting a final error message; exit 0 (D)
    st2 = Stream(D, "/v1/completions", dict(q_body, prompt="Cancel me", max_tokens=3 * long, stream=True))
    st2.first_content.wait(60 * SLOW)
    D.p.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    D.p.send_signal(signal.SIGINT)
    try:
        rc = D.p.wait(30 * SLOW)
    except subprocess.TimeoutExpired:
        rc = "hung"
        D.kill()
    st2.wait(30 * SLOW)
    body = st2.body()
    check("a second signal: exit 0", rc == 0, f"exit {rc}")
    check("a second signal: the running stream ends with an error message",
          b'"error"' in body and st2.done.is_set(),
          f"stream ended {st2.done.is_set()} ({st2.error or 'no client error'}), {len(body)} bytes, "
          f"[DONE] {b'[DONE]' in body}, last bytes {body[-300:]!r}; server: {''.join(D.log)[-300:]!r}")

    # 6: cancellation (C, idle now)
    base = metrics(C)
    X = Stream(C, "/v1/completions", dict(x_body, stream=True))
    Y = Stream(C, "/v1/completions", dict(y_body, stream=True), stop_after_chunks=2)
    Y.wait()

    def wait_for(cond, limit):
        t0 = time.time()
        while time.time() - t0 < limit:
            v = metrics(C)
            if v is not None and cond(v):
                return v
            time.sleep(0.05)
        return metrics(C)

    v = wait_for(lambda v: metric(v, "run_requests_total", outcome="cancelled") >=
                 metric(base, "run_requests_total", outcome="cancelled") + 1, 10 * SLOW)
    check("cancellation: a client gone after 2 chunks: run_requests_total{outcome=\"cancelled\"} grows by 1",
          v is not None and metric(v, "run_requests_total", outcome="cancelled") ==
          metric(base, "run_requests_total", outcome="cancelled") + 1,
          f"cancelled {metric(base, 'run_requests_total', outcome='cancelled')} -> "
          f"{metric(v, 'run_requests_total', outcome='cancelled')}")
    # mid-prompt: a long prompt, the client gone right after sending it (not streamed)
    s = socket.create_connection(("127.0.0.1", C.port))
    zb = json.dumps(z_body).encode()
    s.sendall(post_head(C, "/v1/completions", zb) + zb)
    time.sleep(0.05)
    s.close()
    v = wait_for(lambda v: metric(v, "run_requests_total", outcome="cancelled") >=
                 metric(base, "run_requests_total", outcome="cancelled") + 2, 10 * SLOW)
    check("cancellation: a client gone mid-prompt (not streaming) is cancelled too",
          metric(v, "run_requests_total", outcome="cancelled") == metric(base, "run_requests_total", outcome="cancelled") + 2,
          f"cancelled {metric(base, 'run_requests_total', outcome='cancelled')} -> "
          f"{metric(v, 'run_requests_total', outcome='cancelled')}")
    X.wait()
    text, finish, usage, problems, _ = read_sse(X.body(), False, False, X.status, X.headers)
    compare("cancellation: the request beside them is ./run's alone", text, finish, usage, problems, x_want.result(), long // 2)
    v = wait_for(lambda v: metric(v, "run_requests_running") == 0 and
                 metric(v, "run_kv_blocks_used") == metric(base, "run_kv_blocks_used"), 10 * SLOW)
    check("cancellation: run_kv_blocks_used returns to what it was, nothing running",
          metric(v, "run_kv_blocks_used") == metric(base, "run_kv_blocks_used") and metric(v, "run_requests_running") == 0,
          f"kv blocks used {metric(base, 'run_kv_blocks_used')} -> {metric(v, 'run_kv_blocks_used')}, "
          f"running {metric(v, 'run_requests_running')}")
    if v is not None and base is not None:
        gen = metric(v, "run_generated_tokens_total") - metric(base, "run_generated_tokens_total")
        x_tokens = x_want.result().completion_tokens or 0
        check("cancellation: the cancelled requests' tokens were not run (generated tokens < the beside request's + half a long one)",
              gen < x_tokens + long / 2, f"generated {gen}: the request beside {x_tokens}, a long one {long}")

    # 8: SIGTERM: the running requests finish, nothing new is served, exit 0 (C)
    S1 = Stream(C, "/v1/completions", dict(t1_body, stream=True))
    S1.first_content.wait(60 * SLOW)
    S2 = Stream(C, "/v1/completions", dict(t2_body, stream=True))
    S2.first_content.wait(60 * SLOW)
    rc_holder = {}
    C.p.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    late = request(C, "POST", "/v1/completions", {"prompt": "Too late", "max_tokens": 5}, timeout=10 * SLOW)
    check("SIGTERM: a request after it is not served", late.status != 200, f"{late}")
    for S, want, n, label in ((S1, t1_want, long, "a running stream"), (S2, t2_want, long // 2, "a second running stream")):
        S.wait()
        text, finish, usage, problems, _ = read_sse(S.body(), False, False, S.status, S.headers)
        compare(f"SIGTERM: {label} finishes, ./run's alone text", text, finish, usage,
                problems + ([S.error] if S.error else []), want.result(), n)
    try:
        rc = C.p.wait(60 * SLOW)
    except subprocess.TimeoutExpired:
        rc = "hung"
        C.kill()
    check("SIGTERM with requests running: exit 0", rc == 0, f"exit {rc}")


# ----------------------------------------------------------------------------------------------

def main():
    threading.Timer(LIMIT, watchdog).start()
    m260 = os.path.join(SHARED, "models", "stories260K.bin")
    tok512 = os.path.join(SHARED, "models", "aidreams_tok512.bin")
    if not os.path.exists(RUN):
        check("the binary", False, f"{RUN} not found")
        finish_and_exit()
    if not (os.path.exists(m260) and os.path.exists(tok512)):
        skip("test_serve.py: every check", f"{m260} or {tok512} not found (../shared is missing)")
        finish_and_exit()
    A = Server("A", m260, tok512, "-b", "4")
    if A.error:
        check("the server starts", False, A.error)
        finish_and_exit()
    B = Server("B", m260, tok512, "-b", "1")
    # the slow clients on a server of their own: the many connections opened on A would push them out
    H = Server("H", m260, tok512, "-b", "1")
    def guarded(f, *a):
        try:
            f(*a)
        except Exception as e:
            import traceback
            traceback.print_exc()
            check(f"{f.__name__}", False, f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=guarded, args=(f,) + a) for f, a in
               ((test_idle_client, (H,)), (test_trickle_client, (H,)), (test_slow, (m260, tok512)),
                (test_templates, ()))]
    for t in threads:
        t.start()

    mix = []
    P = Server("P", m260, tok512, "-b", "8", "-x", "640")
    guarded(lambda: mix.extend(test_mix(A, B, P, m260, tok512)))
    if not P.error:
        rc = P.stop(30 * SLOW)
        check("the small-pool server: SIGTERM when idle: exit 0", rc == 0, f"exit {rc}")
    rc = B.stop(30 * SLOW)
    check("the fresh -b 1 server: SIGTERM when idle: exit 0", rc == 0, f"exit {rc}")
    guarded(test_stream_format, A, m260, tok512)
    guarded(test_endpoints, A, m260)
    guarded(test_keep_alive, A, m260, tok512)
    guarded(test_pipelining, A, m260, tok512)
    guarded(test_curl, A, m260, tok512)
    mt = next((m.want for m in mix if m.name == "mix: 3-turn chat, greedy"), Want(error="no 3-turn reference"))
    guarded(test_node, A, m260, tok512, mt)
    guarded(test_env_key, m260, tok512)
    guarded(test_many_connections, A, m260, tok512)
    for t in threads:
        t.join()
    rc = A.stop(30 * SLOW)
    check("SIGTERM after all that: exit 0", rc == 0, f"exit {rc}")
    if not H.error:
        r = request(H, "GET", "/health", timeout=10 * SLOW)
        check("after the slow clients: the server answers", r.status == 200, f"{r}")
        rc = H.stop(30 * SLOW)
        check("the slow clients' server: SIGTERM: exit 0", rc == 0, f"exit {rc}")
    finish_and_exit()


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except BaseException as e:
        import traceback
        traceback.print_exc()
        check("test_serve.py", False, f"{type(e).__name__}: {e}")
        finish_and_exit()
