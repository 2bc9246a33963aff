"""serve_harness.py — starts `qwen-ft serve` on 127.0.0.1 on a free port for the serve tests (tests/cli/*_serve*.sh)
and talks HTTP with the standard library only."""
import http.client, json, os, re, signal, subprocess, time


class Server:
    def __init__(self, qwenft, *args, log="serve.err", launcher=()):
        """launcher: a command prefix (["mpirun", "-np", "2"]: the layers split over the ranks)"""
        self.log = log
        self.errf = open(log, "wb")
        env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
        self.p = subprocess.Popen([*launcher, qwenft, "serve", "--port", "0", *args], stdout=subprocess.DEVNULL,
                                  stderr=self.errf, env=env)
        self.port = None
        t0 = time.time()
        while time.time() - t0 < 60:
            text = open(log, errors="replace").read()
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", text)
            if m:
                self.port = int(m.group(1))
                return
            if self.p.poll() is not None:
                raise RuntimeError(f"serve exited {self.p.returncode} before listening:\n{text}")
            time.sleep(0.05)
        raise RuntimeError("serve did not listen within 60 s:\n" + open(log, errors="replace").read())

    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def req(self, method, path, body=None, headers=None, raw=None, timeout=120):
        """(status, headers dict (lower-case), body bytes)"""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        h = {"Content-Type": "application/json", **(headers or {})}
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        out = r.read()
        hs = {k.lower(): v for k, v in r.getheaders()}
        c.close()
        return r.status, hs, out

    def post(self, path, body, **kw):
        s, h, b = self.req("POST", path, body, **kw)
        return s, h, (json.loads(b) if h.get("content-type", "").startswith("application/json") else b)

    def sse(self, path, body, headers=None):
        """the data payloads of a server-sent event stream, in order"""
        s, h, b = self.req("POST", path, body, headers=headers)
        if s != 200:
            raise AssertionError(f"{path}: status {s}: {b[:300]!r}")
        if not h.get("content-type", "").startswith("text/event-stream"):
            raise AssertionError(f"{path}: content-type {h.get('content-type')}")
        events = []
        for block in b.decode().split("\n\n"):
            if not block.strip():
                continue
            if not block.startswith("data: "):
                raise AssertionError(f"{path}: not an SSE data line: {block!r}")
            events.append(block[6:])
        return events

    def metrics(self):
        s, h, b = self.req("GET", "/metrics")
        out = {}
        for line in b.decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def stop_ranks(self, which=None, sig=signal.SIGTERM, timeout=60):
        """a server under a launcher: the signal to its ranks (pids from their 'rank R of W (pid P)' lines; which:
        the ranks, default all), as srun/scancel send it, not to mpirun (Open MPI's mpirun exits 1 for a job it
        signalled); the launcher's exit code"""
        pids = {int(r): int(p) for r, p in re.findall(r"rank (\d+) of \d+ \(pid (\d+)\)",
                                                          open(self.log, errors="replace").read())}
        for r, p in pids.items():
            if which is None or r in which:
                os.kill(p, sig)
        return self._wait(timeout)

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.p.poll() is None:
            self.p.send_signal(sig)
        return self._wait(timeout)

    def _wait(self, timeout):
        """the exit code, or "hung" (killed) after timeout s"""
        try:
            rc = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = "hung"
        self.errf.close()
        return rc
