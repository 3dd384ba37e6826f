#!/usr/bin/env python3
"""chaos: fault-injection suites that run the real binaries (docs/design.md).

Each case starts `supervise` on a tiny run, injects a real fault with a real
signal at a known point (after a checkpoint is committed), and asserts what an
operator would check:
  - the run reaches its last step (a run_done event, exit code 0);
  - `ckpt verify` passes on every committed checkpoint;
  - the final weights equal a fault-free reference run's bit for bit (same
    world size), or, after a shrink, the final loss is within tolerance.
It prints a table: fault, time to detect, time to recover (fault to the first
step of the new generation), steps lost.

No false alarms (issue 36): the events of every run a case starts (and of the
fault-free reference) must hold no `progress_hang` unless the case injects a
hang itself (HANG_CASES: a SIGSTOPped worker, S3 requests that hang); a case
whose run shows one fails, naming it.

The s3 suite runs supervise with an s3:// store against moto_server on
loopback with authentication enforced (chaos/moto_auth.py: every request's
SigV4 signature is checked, as on AWS; it fails, never skips, without moto)
behind the fault proxy s3_faults.py: the endpoint down / answering 500 /
hanging during checkpoints, chunks damaged in the bucket, the supervisor's
cache lost, and keys the server refuses.

usage: chaos.py [--bin BUILD/bin] [--work DIR] [--suite node-loss|watchdog|s3]
                [--worker PATH] [CASE ...]
  --bin   the programs (default: $FT_BIN, else build/bin of the repository this
          script is in)
  --work  the suite's folder (default: a new temporary folder, kept and named
          at the end)
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

RUN_YAML = """\
run: chaos
model: {{n_layer: 2, n_head: 4, n_embd: 64, vocab_size: 256, seq_len: 64}}
train: {{steps: {steps}, global_batch: 16, micro_batch: 4, lr: 3.0e-3, warmup: 10, seed: 7}}
data: {{train: "{data}/synth_train_*.bin", val: "{data}/synth_val_*.bin"}}
nodes: {{count: 2, workers_per_node: 2, device: cpu, launcher: local}}
checkpoint: {{every_steps: {every}, keep_last: 20}}
watchdog: {{heartbeat_timeout_s: {hb}, collective_timeout_s: {coll}, xid_source: "{xid}",
           loss_spike: {{window: 20, zscore: 6.0, min_steps: 10}}}}
recovery: {{max_restarts: 5, when_no_spares: shrink, skip_batches: 5}}
doctor: {{mem_mb: 4, disk_mb: 1}}
"""

STEPS, EVERY, HB, COLL = 60, 10, 4, 8


class Fail(Exception):
    pass


def log(*a):
    print(*a, flush=True)


# Cases that inject a hang of their own; every other case's runs must never
# report progress_hang (the progress watchdog's false alarm).
HANG_CASES = {"sigstop", "500-hang"}

RUNS = []  # every Run made, in order (no_false_hang checks a case's own)


class Run:
    """One supervise process and its state directory."""

    def __init__(self, args, name, spares, env=None):
        RUNS.append(self)
        self.args, self.name, self.spares = args, name, spares
        self.state = os.path.join(args.work, name)
        self.store = "local:" + os.path.join(self.state, "store")
        self.proc = None
        self.env = dict(os.environ, **(env or {}))

    def start(self):
        cmd = [os.path.join(self.args.bin, "supervise"), "--spares", str(self.spares),
               "--state", self.state, self.args.runfile]
        os.makedirs(self.state, exist_ok=True)
        out = open(os.path.join(self.state, "supervise.out"), "ab")
        self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=self.env)
        return self

    def events(self):
        path = os.path.join(self.state, "events.jsonl")
        if not os.path.exists(path):
            return []
        evs = []
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        evs.append(json.loads(line))
                    except json.JSONDecodeError:
                        pass  # a line being written
        return evs

    def wait_event(self, pred, timeout, what):
        t0 = time.time()
        while time.time() - t0 < timeout:
            for e in self.events():
                if pred(e):
                    return e
            if self.proc and self.proc.poll() is not None:
                for e in self.events():
                    if pred(e):
                        return e
                raise Fail(f"{self.name}: supervise exited ({self.proc.returncode}) before {what}"
                           f"; see {self.state}/supervise.out")
            time.sleep(0.05)
        raise Fail(f"{self.name}: no {what} within {timeout} s")

    def wait_exit(self, timeout):
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise Fail(f"{self.name}: supervise did not finish within {timeout} s")
        if rc != 0:
            raise Fail(f"{self.name}: supervise exited with {rc}; see {self.state}/supervise.out")

    def gang_nodes(self):
        gens = [e for e in self.events() if e["event"] == "generation_started"]
        return gens[-1]["nodes"] if gens else []

    def pid_of(self, node, slot):
        pids = [e["pid"] for e in self.events()
                if e["event"] == "worker_launched" and e["node"] == node and e["slot"] == slot]
        if not pids:
            raise Fail(f"{self.name}: no worker_launched for node {node} slot {slot}")
        return pids[-1]

    def ckpt(self, *a, check=True):
        r = subprocess.run([os.path.join(self.args.bin, "ckpt"), "--store", self.store, *a],
                           capture_output=True, text=True)
        if check and r.returncode != 0:
            raise Fail(f"{self.name}: ckpt {' '.join(a)} exited {r.returncode}: {r.stderr.strip()}")
        return r

    def final(self):
        """Final step's loss, and the final weights as a safetensors file."""
        ls = json.loads(self.ckpt("ls", "--json").stdout)
        last = [c for c in ls if c["step"] == STEPS]
        if not last:
            raise Fail(f"{self.name}: no checkpoint of the last step {STEPS}")
        out = os.path.join(self.state, "final.safetensors")
        self.ckpt("restore", str(STEPS), "--to", out)
        return last[0]["loss"], out


def committed(step):
    return lambda e: e["event"] == "checkpoint_committed" and e.get("step") == step


def after_checkpoint(run, step):
    """Waits for checkpoint `step`, then a little longer, so the fault lands
    between checkpoints (some steps are lost, as in real life)."""
    run.wait_event(committed(step), 120, f"checkpoint {step}")
    time.sleep(0.4)


def finish(run, kill_t, fault, ref, exact=True):
    """Waits for the run to end and checks it; returns a table row."""
    run.wait_exit(240)
    evs = run.events()
    if not any(e["event"] == "run_done" for e in evs):
        raise Fail(f"{run.name}: no run_done event")
    run.ckpt("verify")
    loss, weights = run.final()
    ref_loss, ref_weights = ref
    if exact:
        if open(weights, "rb").read() != open(ref_weights, "rb").read():
            raise Fail(f"{run.name}: final weights differ from the fault-free run's")
        check = "weights bit-identical"
    else:
        rel = abs(loss - ref_loss) / abs(ref_loss)
        if rel > 1e-3:
            raise Fail(f"{run.name}: final loss {loss} vs {ref_loss} (rel {rel:.2e} > 1e-3)")
        check = f"loss within {rel:.1e}"
    det = [e for e in evs if e["event"] == "fault_detected" and e["ts"] >= kill_t - 1]
    rec = [e for e in evs if e["event"] == "recovered" and e["ts"] >= kill_t - 1]
    detect = det[0]["ts"] - kill_t if det and kill_t else float("nan")
    recover = rec[0]["ts"] - kill_t if rec and kill_t else float("nan")
    lost = sum(e.get("steps_lost", 0) for e in rec)
    return (fault, detect, recover, lost, check)


def case_kill_worker(args, ref):
    run = Run(args, "kill-worker", spares=2).start()
    after_checkpoint(run, 20)
    node = run.gang_nodes()[-1]
    pid = run.pid_of(node, 1)
    t = time.time()
    os.kill(pid, signal.SIGKILL)
    log(f"  kill -9 worker pid {pid} (node {node} slot 1)")
    return finish(run, t, "kill -9 one worker", ref)


def kill_node(run, node):
    pid = run.pid_of(node, 0)
    pgid = os.getpgid(pid)
    t = time.time()
    os.killpg(pgid, signal.SIGKILL)
    log(f"  kill -9 node {node} (process group {pgid})")
    return t


def case_kill_node(args, ref):
    run = Run(args, "kill-node", spares=2).start()
    after_checkpoint(run, 20)
    t = kill_node(run, run.gang_nodes()[-1])
    return finish(run, t, "kill a whole node", ref)


def case_two_nodes(args, ref):
    run = Run(args, "two-nodes", spares=2).start()
    after_checkpoint(run, 20)
    t1 = kill_node(run, run.gang_nodes()[-1])
    run.wait_event(lambda e: e["event"] == "recovered" and e["ts"] >= t1, 120, "first recovery")
    after_checkpoint(run, 40)
    t2 = kill_node(run, run.gang_nodes()[0])
    row = finish(run, t2, "two node kills (both spares)", ref)
    promoted = [e for e in run.events() if e["event"] == "spare_promoted"]
    if len(promoted) != 2:
        raise Fail(f"two-nodes: {len(promoted)} spare_promoted events, expected 2")
    return row


def case_shrink(args, ref):
    run = Run(args, "shrink", spares=0).start()
    after_checkpoint(run, 20)
    t = kill_node(run, run.gang_nodes()[-1])
    row = finish(run, t, "node kill, no spare (shrink)", ref, exact=False)
    if not any(e["event"] == "gang_shrunk" for e in run.events()):
        raise Fail("shrink: no gang_shrunk event")
    return row


def case_kill_supervisor(args, ref):
    run = Run(args, "kill-supervisor", spares=1).start()
    after_checkpoint(run, 20)
    pids = [e["pid"] for e in run.events() if e["event"] == "worker_launched"]
    t = time.time()
    run.proc.kill()
    run.proc.wait()
    log(f"  kill -9 supervise (pid {run.proc.pid})")
    deadline = t + HB + 5
    while time.time() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    left = [p for p in pids if alive(p)]
    if left:
        raise Fail(f"kill-supervisor: workers {left} still alive {HB + 5} s after the supervisor died")
    orphan_s = time.time() - t
    log(f"  all {len(pids)} workers gone {orphan_s:.2f} s after the supervisor")
    run.start()  # the same command, the same state directory
    row = finish(run, None, "kill -9 the supervisor", ref)
    starts = [e for e in run.events() if e["event"] == "generation_started"]
    restored = starts[-1].get("restore_step", -1)
    if restored < 20:
        raise Fail(f"kill-supervisor: the restarted run restored step {restored}, expected >= 20")
    first = [e for e in run.events() if e["event"] == "step" and e["ts"] > t]
    return (row[0], orphan_s, (first[0]["ts"] - t) if first else float("nan"),
            max(0, 20 - restored) if restored >= 0 else STEPS, row[4] + ", resumed from " + str(restored))


# ---- the watchdog suite ---------------------------------------------------


def first_event(run, name, since):
    for e in run.events():
        if e["event"] == name and e["ts"] >= since:
            return e
    return None


def case_sigstop(args, ref):
    run = Run(args, "sigstop", spares=2).start()
    after_checkpoint(run, 20)
    node = run.gang_nodes()[-1]
    pid = run.pid_of(node, 0)
    t = time.time()
    os.kill(pid, signal.SIGSTOP)  # a hang: the process holds its sockets, says nothing
    log(f"  SIGSTOP worker pid {pid} (node {node} slot 0)")
    row = finish(run, t, "SIGSTOP a worker (hang)", ref)
    q = [e for e in run.events() if e["event"] == "node_quarantined" and e["ts"] >= t]
    if not q or q[0]["node"] != node:
        raise Fail(f"sigstop: node {node} was not quarantined ({q})")
    det = row[1]
    if det > max(HB, COLL) + 2:
        raise Fail(f"sigstop: detected after {det:.1f} s, more than the timeouts ({HB}/{COLL} s) allow")
    return row


def xid_line(node, slot, xid):
    return (f"[ 1234.567890] NVRM: Xid (PCI:0000:{node:02x}:{slot:02x}): {xid}, pid=4242, "
            f"name=worker, chaos drill\n")


def case_xid_fatal(args, ref):
    run = Run(args, "xid-79", spares=2).start()
    after_checkpoint(run, 20)
    node = run.gang_nodes()[-1]
    t = time.time()
    with open(os.path.join(args.work, "kern.log"), "a") as f:
        f.write(xid_line(node, 0, 79))
    log(f"  wrote an Xid 79 line for node {node}'s GPU")
    promoted = run.wait_event(lambda e: e["event"] == "spare_promoted" and e["ts"] >= t, 30,
                              "spare_promoted after the Xid")
    if promoted["replaces"] != node:
        raise Fail(f"xid-79: the spare replaced node {promoted['replaces']}, not {node}")
    if promoted["ts"] - t > 2.0:
        raise Fail(f"xid-79: spare promoted {promoted['ts'] - t:.2f} s after the line (> 2 s)")
    return finish(run, t, "Xid 79 (fatal) on one GPU", ref)


def case_xid_app(args, ref):
    run = Run(args, "xid-13", spares=2).start()
    after_checkpoint(run, 20)
    node = run.gang_nodes()[-1]
    t = time.time()
    with open(os.path.join(args.work, "kern.log"), "a") as f:
        f.write(xid_line(node, 1, 13))
    log(f"  wrote an Xid 13 line for node {node} slot 1's GPU")
    run.wait_event(lambda e: e["event"] == "recovered" and e["ts"] >= t, 60, "recovery after Xid 13")
    row = finish(run, t, "Xid 13 (application)", ref)
    if any(e["event"] == "node_quarantined" and e["ts"] >= t for e in run.events()):
        raise Fail("xid-13: a node was quarantined for an application Xid")
    return row


def spike_lines(run):
    """(step, loss) of every step line rank 0's processes printed."""
    out = []
    logs = os.path.join(run.state, "logs")
    for name in sorted(os.listdir(logs)):
        for line in open(os.path.join(logs, name), errors="replace"):
            if line.startswith("step ") and "| loss " in line:
                step = int(line.split()[1].split("/")[0])
                out.append((step, float(line.split("| loss ")[1].split()[0])))
    return out


def case_loss_fault(args, ref, name, failpoint, label):
    batch = 34
    run = Run(args, name, spares=0, env={"FT_FAILPOINTS": f"{failpoint}={batch}"}).start()
    t = time.time()
    run.wait_exit(240)
    evs = run.events()
    if not any(e["event"] == "run_done" for e in evs):
        raise Fail(f"{name}: no run_done event")
    run.ckpt("verify")
    rb = [e for e in evs if e["event"] == "rollback"]
    if len(rb) != 1:
        raise Fail(f"{name}: {len(rb)} rollback events, expected 1")
    if rb[0].get("skip_first") is None or not (rb[0]["skip_first"] <= batch < rb[0]["skip_end"]):
        raise Fail(f"{name}: the skip range {rb[0].get('skip_first')}..{rb[0].get('skip_end')} "
                   f"does not cover batch {batch}")
    losses = spike_lines(run)
    # ln(256) = 5.55 is the loss of a model that knows nothing; the poisoned
    # batch scores far above it, ordinary steps never do.
    bad = [(s_, l) for s_, l in losses if not (l == l) or l > 6.5]
    if failpoint == "poison_batch" and len(bad) != 1:
        raise Fail(f"{name}: {len(bad)} spiking steps in the logs, expected exactly 1: {bad}")
    if failpoint == "nan_batch" and bad:
        raise Fail(f"{name}: a non-finite or spiking loss was logged after the rollback: {bad}")
    det = [e for e in evs if e["event"] in ("loss_spike", "fault_detected")]
    spike = [e for e in evs if e["event"] == "loss_spike"]
    rec = [e for e in evs if e["event"] == "recovered"]
    detect_steps = (spike[0]["step"] - (batch + 1)) if spike else float("nan")
    return (label, detect_steps, (rec[0]["ts"] - spike[0]["ts"]) if rec and spike else float("nan"),
            sum(e.get("steps_lost", 0) for e in rec),
            f"rolled back to {rb[0]['restore_step']}, skipped [{rb[0]['skip_first']}, {rb[0]['skip_end']})")


def case_loss_spike(args, ref):
    return case_loss_fault(args, ref, "loss-spike", "poison_batch", "loss spike (poisoned batch)")


def case_nan(args, ref):
    return case_loss_fault(args, ref, "nan", "nan_batch", "NaN loss")


def case_straggler(args, ref):
    run = Run(args, "straggler", spares=0, env={"FT_FAILPOINTS": "slow_rank=2"}).start()
    t = time.time()
    run.wait_exit(300)
    ev = first_event(run, "straggler", t)
    if not ev:
        raise Fail("straggler: no straggler event for the slowed rank 2")
    if ev.get("rank") != 2:
        raise Fail(f"straggler: rank {ev.get('rank')} reported, expected 2")
    run.ckpt("verify")
    return ("straggler (rank 2 3x slower)", float("nan"), float("nan"), 0,
            f"reported at step {ev.get('step')}, ratio {ev.get('ratio', float('nan')):.1f}")


# ---- the s3 suite -----------------------------------------------------------
#
# supervise with an s3:// store: moto_server on loopback checking every
# signature (chaos/moto_auth.py), chaos/s3_faults.py in front of it, and the supervisor
# and its workers talking to the proxy. The cache (and the catalog in it) is
# supervise's default, STATE/s3cache. Every case checks: run_done, `ckpt
# verify`, every checkpoint_committed step listed from the bucket alone (an
# empty cache), and the final weights equal the fault-free local run's.

S3_OUTAGE = 5.0  # seconds an outage lasts


class S3Server:
    """moto_server with authentication enforced (chaos/moto_auth.py: an IAM
    user and access key made through moto's IAM API, then every signature
    checked) on a free loopback port, the fault proxy in front of it, and a
    bucket per case. Fails loudly when moto cannot run: an S3 suite never
    passes by not testing, and no server that skips signature checks stands
    in for it."""

    def __init__(self, args):
        self.dir = os.path.join(args.work, "s3")
        os.makedirs(self.dir, exist_ok=True)
        self.procs = []
        self.env = {"AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
                    "AWS_EC2_METADATA_DISABLED": "true", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
                    "AWS_CONFIG_FILE": "/nonexistent"}
        self.port = free_port()
        srvlog = open(os.path.join(self.dir, "server.log"), "ab")
        here = os.path.dirname(os.path.abspath(__file__))
        if subprocess.run([sys.executable, "-c", "import moto.server, boto3"],
                          capture_output=True).returncode != 0:
            raise Fail(f"moto_server cannot run here: {sys.executable} lacks moto (5.x, with its "
                       "server extra) or boto3; scripts/install-deps.sh installs them")
        keys = os.path.join(self.dir, "keys")
        cmd = [sys.executable, os.path.join(here, "moto_auth.py"), "--port", str(self.port),
               "--keys", keys]
        self.procs.append(subprocess.Popen(cmd, stdout=srvlog, stderr=subprocess.STDOUT))
        for _ in range(600):  # ready once the keys file exists: authentication is on
            if os.path.exists(keys) or self.procs[-1].poll() is not None:
                break
            time.sleep(0.1)
        if not os.path.exists(keys):
            raise Fail("moto_server with authentication did not start (see the s3/ folder of the suite)")
        with open(keys) as f:
            self.env["AWS_ACCESS_KEY_ID"], self.env["AWS_SECRET_ACCESS_KEY"] = f.read().split()
        self.upstream = f"http://127.0.0.1:{self.port}"
        self.mode_file = os.path.join(self.dir, "mode")
        self.set_mode("ok")
        self.proxy_port = free_port()
        self.proxy_log = os.path.join(self.dir, "proxy.log")
        self.procs.append(subprocess.Popen(
            [sys.executable, os.path.join(here, "s3_faults.py"), "--listen", str(self.proxy_port),
             "--upstream", str(self.port), "--mode-file", self.mode_file, "--log", self.proxy_log],
            stdout=subprocess.DEVNULL, stderr=srvlog))
        wait_port(self.proxy_port, self.procs[-1], "s3_faults.py")
        self.env["FT_S3_ENDPOINT"] = f"http://127.0.0.1:{self.proxy_port}"
        log(f"   s3: moto (signatures checked) on {self.upstream}, fault proxy on "
            f"{self.env['FT_S3_ENDPOINT']}")

    def set_mode(self, m):
        tmp = self.mode_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(m + "\n")
        os.replace(tmp, self.mode_file)

    def aws(self, *a, check=True):
        """The aws cli straight at the server (not through the proxy)."""
        r = subprocess.run(["aws", "--endpoint-url", self.upstream, *a], capture_output=True,
                           env=dict(os.environ, **self.env))
        if check and r.returncode != 0:
            raise Fail(f"aws {' '.join(a)}: {r.stderr.decode(errors='replace').strip()}")
        return r

    def mkbucket(self, name):
        self.aws("s3api", "create-bucket", "--bucket", name)

    def keys(self, bucket, prefix):
        r = self.aws("s3api", "list-objects-v2", "--bucket", bucket, "--prefix", prefix, "--output", "json")
        out = r.stdout.decode().strip()
        return [o["Key"] for o in (json.loads(out).get("Contents", []) if out else [])]

    def stop(self):
        for p in reversed(self.procs):
            p.kill()
            p.wait()
        self.procs = []


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, proc, what):
    import socket
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.1)
    raise Fail(f"{what} did not start on 127.0.0.1:{port} (see the s3/ folder of the suite)")


S3 = {"srv": None}


def s3_server(args):
    if S3["srv"] is None:
        S3["srv"] = S3Server(args)
    return S3["srv"]


class S3Run(Run):
    """supervise --store s3://BUCKET/run through the fault proxy; the cache is
    supervise's default, STATE/s3cache (FT_S3_CACHE is not set for it)."""

    def __init__(self, args, name, require, env=None):
        srv = s3_server(args)
        self.bucket = "chaos-" + name
        srv.mkbucket(self.bucket)
        e = dict(srv.env, FT_S3_REQUIRE=require, FT_S3_TIMEOUT_S="2", FT_S3_RETRIES="50",
                 FT_S3_RETRY_BUDGET_S="60", FT_S3_DRAIN_S="60", **(env or {}))
        base = {k: v for k, v in os.environ.items()
                if k not in ("FT_S3_CACHE", "AWS_SESSION_TOKEN", "AWS_PROFILE")}
        super().__init__(args, name, spares=0)
        self.env = dict(base, **e)
        self.srv = srv
        self.store = f"s3://{self.bucket}/run"
        self.cache = os.path.join(self.state, "s3cache")

    def start(self):
        cmd = [os.path.join(self.args.bin, "supervise"), "--state", self.state, "--store", self.store]
        if self.args.worker:
            cmd += ["--worker", self.args.worker]
        os.makedirs(self.state, exist_ok=True)
        out = open(os.path.join(self.state, "supervise.out"), "ab")
        self.t0 = time.time()
        self.proc = subprocess.Popen(cmd + [self.args.runfile], stdout=out, stderr=subprocess.STDOUT,
                                     env=self.env)
        return self

    def ckpt(self, *a, check=True, cache=None):
        # the operator's checks go straight to the server, not through the
        # fault proxy (faults are over by then; it halves their time)
        env = dict(self.env, FT_S3_CACHE=cache or self.cache, FT_S3_ENDPOINT=self.srv.upstream)
        r = subprocess.run([os.path.join(self.args.bin, "ckpt"), "--store", self.store, *a],
                           capture_output=True, text=True, env=env)
        if check and r.returncode != 0:
            raise Fail(f"{self.name}: ckpt {' '.join(a)} (cache {cache or self.cache}) exited "
                       f"{r.returncode}: {r.stderr.strip()}")
        return r

    def listed(self, cache=None):
        return {c["step"]: c["state"] for c in json.loads(self.ckpt("ls", "--json", cache=cache).stdout)}

    def restore(self, step, out, cache=None):
        self.ckpt("restore", str(step), "--to", out, cache=cache)
        return open(out, "rb").read()

    def trained_step(self):
        """The last step rank 0 printed in its log: training's own progress,
        whatever the supervisor's loop is doing."""
        s = spike_lines(self)
        return max(st for st, _ in s) if s else -1


def metrics(run):
    """The supervisor's /metrics (its address in STATE/http.addr), unlabelled
    samples only: {name: value}."""
    import urllib.request
    addr = open(os.path.join(run.state, "http.addr")).read().strip()
    body = urllib.request.urlopen(f"http://{addr}/metrics", timeout=10).read().decode()
    out = {}
    for line in body.splitlines():
        parts = line.split()
        if len(parts) == 2 and not line.startswith("#") and "{" not in parts[0]:
            out[parts[0]] = float(parts[1])
    return out


def outage(run, mode, after_step, secs=S3_OUTAGE, then=None):
    """Waits for checkpoint after_step, then sets the proxy to `mode` (and
    `then`, if given, for the second half) for `secs` seconds. Returns (start,
    end, steps rank 0 trained meanwhile, checkpoint_committed events meanwhile)."""
    run.wait_event(committed(after_step), 120, f"checkpoint {after_step}")
    m = metrics(run)
    if m.get("ftsup_s3_requests_total", 0) <= 0 or m.get("ftsup_s3_sent_bytes_total", 0) <= 0:
        raise Fail(f"{run.name}: /metrics shows no S3 traffic after checkpoint {after_step}: "
                   f"{ {k: v for k, v in m.items() if k.startswith('ftsup_s3')} }")
    s0 = run.trained_step()
    t0 = time.time()
    run.srv.set_mode(mode)
    log(f"  S3 endpoint {mode} for {secs:.0f} s" + (f" (then {then})" if then else "") +
        f" from step {s0}")
    if then:
        time.sleep(secs / 2)
        run.srv.set_mode(then)
        time.sleep(secs / 2)
    else:
        time.sleep(secs)
    s1 = run.trained_step()
    t1 = time.time()
    run.srv.set_mode("ok")
    during = [e["step"] for e in run.events()
              if e["event"] == "checkpoint_committed" and t0 <= e["ts"] <= t1]
    log(f"  endpoint back after {t1 - t0:.1f} s; rank 0 trained steps {s0} -> {s1} meanwhile; "
        f"checkpoints committed meanwhile: {during}")
    if s1 <= s0:
        raise Fail(f"{run.name}: training stopped while the S3 endpoint was {mode} "
                   f"(rank 0 at step {s0} before, {s1} after)")
    return t0, t1, s1 - s0, during


def s3_finish(run, ref, t1=None):
    """The checks every S3 case makes; returns (steps committed, recover s, check)."""
    run.wait_exit(240)
    evs = run.events()
    if not any(e["event"] == "run_done" for e in evs):
        raise Fail(f"{run.name}: no run_done event")
    wall = time.time() - run.t0
    limit = run.args.ref_wall * 2 + S3_OUTAGE + 60
    if wall > limit:
        raise Fail(f"{run.name}: the run took {wall:.0f} s, more than {limit:.0f} s")
    done = sorted({e["step"] for e in evs if e["event"] == "checkpoint_committed"})
    failed = sorted({e["step"] for e in evs if e["event"] == "checkpoint_failed"})
    if STEPS not in done:
        raise Fail(f"{run.name}: the last step's checkpoint was not committed ({done})")
    run.ckpt("verify")
    mine = run.listed()
    if sorted(mine) != done:
        raise Fail(f"{run.name}: ckpt ls (catalog {run.cache}/catalog) lists {sorted(mine)}, "
                   f"committed were {done}")
    fresh = os.path.join(run.state, "fresh-cache")
    remote = run.listed(cache=fresh)
    if sorted(remote) != done:
        raise Fail(f"{run.name}: from the bucket alone ckpt ls lists {sorted(remote)}, "
                   f"committed were {done}: a committed checkpoint is not in the bucket")
    w = run.restore(STEPS, os.path.join(run.state, "final.safetensors"), cache=fresh)
    if w != open(ref[1], "rb").read():
        raise Fail(f"{run.name}: the weights restored from the bucket differ from the "
                   f"fault-free local run's")
    rec = float("nan")
    if t1 is not None:
        after = [e["ts"] for e in evs if e["event"] == "checkpoint_committed" and e["ts"] >= t1]
        rec = after[0] - t1 if after else float("nan")
    check = f"{len(done)} committed, all in the bucket, weights bit-identical"
    if failed:
        check += f"; reported failed: {failed}"
    return done, failed, rec, check


def case_s3_down_local(args, ref):
    # every retention GC waits 2 s after listing the manifests, so the GC
    # after checkpoint 20 meets the outage when it reads the marks: that must
    # hold up the GC alone, never the commits (it held the store's lock once)
    run = S3Run(args, "down-local", "local", env={"FT_FAILPOINTS": "gc_pause_ms=2000"}).start()
    t0, t1, trained, during = outage(run, "down", 20)
    if not during:
        raise Fail("down-local: no checkpoint was committed while the endpoint was down "
                   "(FT_S3_REQUIRE=local must not wait for the bucket)")
    done, failed, rec, check = s3_finish(run, ref, t1)
    if failed:
        raise Fail(f"down-local: checkpoints {failed} failed with FT_S3_REQUIRE=local")
    return (f"S3 down {S3_OUTAGE:.0f} s, require=local", t1 - t0, rec, 0,
            f"{trained} steps and {len(during)} commit(s) during the outage; {check}")


def case_s3_down_both(args, ref):
    run = S3Run(args, "down-both", "both").start()
    t0, t1, trained, during = outage(run, "down", 20)
    done, failed, rec, check = s3_finish(run, ref, t1)
    if not [s_ for s_ in done if s_ > 20]:
        raise Fail("down-both: no checkpoint landed after the outage")
    return (f"S3 down {S3_OUTAGE:.0f} s, require=both", t1 - t0, rec, 0,
            f"{trained} steps during the outage; {check}")


def case_s3_500_hang(args, ref):
    run = S3Run(args, "500-hang", "both").start()
    n0 = sum(1 for _ in open(run.srv.proxy_log)) if os.path.exists(run.srv.proxy_log) else 0
    t0, t1, trained, during = outage(run, "500", 20, then="hang")
    lines = open(run.srv.proxy_log).read().splitlines()[n0:]
    n500 = sum(1 for l_ in lines if l_.startswith("500 "))
    nhang = sum(1 for l_ in lines if l_.startswith("hang "))
    if not n500 or not nhang:
        raise Fail(f"500-hang: {n500} requests met a 500 and {nhang} a hang: the fault missed")
    done, failed, rec, check = s3_finish(run, ref, t1)
    return ("S3 500s then hangs, require=both", t1 - t0, rec, 0,
            f"{n500} x 500, {nhang} hung; {trained} steps during the faults; {check}")


def case_s3_bucket_damage(args, ref):
    run = S3Run(args, "bucket-damage", "both").start()
    done, _, _, _ = s3_finish(run, ref)
    chunks = sorted(k for k in run.srv.keys(run.bucket, "run/chunks/"))
    if len(chunks) < 2:
        raise Fail(f"bucket-damage: {len(chunks)} chunk objects in the bucket")
    gone, bad = chunks[0], chunks[len(chunks) // 2]
    run.srv.aws("s3api", "delete-object", "--bucket", run.bucket, "--key", gone)
    body = os.path.join(run.state, "chunk.bin")
    run.srv.aws("s3api", "get-object", "--bucket", run.bucket, "--key", bad, body)
    data = bytearray(open(body, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(body, "wb").write(bytes(data))
    run.srv.aws("s3api", "put-object", "--bucket", run.bucket, "--key", bad, "--body", body)
    log(f"  deleted {gone} and flipped a byte of {bad} in the bucket")
    r = run.ckpt("verify")  # scrubs both tiers: repairs the bucket from the cache
    m = [l_ for l_ in r.stdout.splitlines() if l_.startswith("repaired")]
    nrem = int(m[0].split(" and ")[1].split()[0]) if m else 0
    if nrem < 2:
        raise Fail(f"bucket-damage: verify repaired {nrem} bucket chunk(s), expected 2: "
                   f"{r.stdout.strip()}")
    log(f"  ckpt verify: {m[0]}")
    cached = lambda k: open(os.path.join(run.cache, k[len("run/"):]), "rb").read()
    for k in (gone, bad):
        run.srv.aws("s3api", "get-object", "--bucket", run.bucket, "--key", k, body)
        if open(body, "rb").read() != cached(k):
            raise Fail(f"bucket-damage: {k} in the bucket differs from the cache's after verify")
    mine = run.restore(STEPS, os.path.join(run.state, "a.safetensors"))
    fresh = os.path.join(run.state, "empty-cache")
    if sorted(run.listed(cache=fresh)) != done:
        raise Fail("bucket-damage: the bucket alone does not list every committed checkpoint")
    run.ckpt("verify", cache=fresh)
    theirs = run.restore(STEPS, os.path.join(run.state, "b.safetensors"), cache=fresh)
    if mine != theirs:
        raise Fail("bucket-damage: the restore from the bucket alone differs from the store's")
    return ("chunk deleted + corrupted in bucket", float("nan"), float("nan"), 0,
            f"{m[0]}; bucket-only restore bit-identical")


def case_s3_wrong_key(args, ref):
    """Keys the server refuses (a wrong secret): supervise stops at once with
    exit 4 and an error naming the HTTP 403 and where the keys came from, never
    the secret; the refusal is not retried (one 403 at the server) and no
    worker is started."""
    srv = s3_server(args)
    secret = "not-" + srv.env["AWS_SECRET_ACCESS_KEY"]

    def refused():
        with open(os.path.join(srv.dir, "server.log"), errors="replace") as f:
            return sum(1 for line in f if '" 403 ' in line)

    before = refused()
    run = S3Run(args, "wrong-key", "both", env={"AWS_SECRET_ACCESS_KEY": secret}).start()
    t0 = time.time()
    try:
        rc = run.proc.wait(120)
    except subprocess.TimeoutExpired:
        run.proc.kill()
        raise Fail("wrong-key: supervise kept going with keys the server refuses")
    t1 = time.time()
    with open(os.path.join(run.state, "supervise.out"), errors="replace") as f:
        out = f.read()
    if rc != 4:
        raise Fail(f"wrong-key: supervise exited {rc}, expected 4: {out.strip()[-600:]}")
    for want in ("HTTP 403", "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY from the environment"):
        if want not in out:
            raise Fail(f"wrong-key: '{want}' is not in supervise's error: {out.strip()[-600:]}")
    if secret in out:
        raise Fail("wrong-key: the secret is in supervise's output")
    n = refused() - before
    if n != 1:
        raise Fail(f"wrong-key: the server refused {n} requests, expected 1 (a 403 is final)")
    if any(e["event"] == "worker_launched" for e in run.events()):
        raise Fail("wrong-key: workers were started with a store that cannot be opened")
    line = next((ln for ln in out.splitlines() if "HTTP 403" in ln), "")
    return ("S3 keys refused (wrong secret)", t1 - t0, float("nan"), 0,
            f"exit 4, 1 request: {line[line.index('HTTP 403'):].strip()[:200]}")


def case_s3_lost_cache(args, ref):
    import shutil
    run = S3Run(args, "lost-cache", "both").start()
    done, _, _, _ = s3_finish(run, ref)
    before = run.listed()
    mine = run.restore(STEPS, os.path.join(run.state, "a.safetensors"))
    shutil.rmtree(run.cache)
    log(f"  removed {run.cache} (the supervisor's disk is lost)")
    os.makedirs(run.cache)
    r = run.ckpt("rebuild-catalog")
    after = run.listed()
    # GOOD/BAD marks live in the catalog only (not in the bucket's
    # manifests): the rebuilt catalog lists the same steps, as committed
    if sorted(after) != sorted(before):
        raise Fail(f"lost-cache: after rebuild-catalog ckpt ls lists {sorted(after)}, "
                   f"before {sorted(before)}")
    run.ckpt("verify")
    theirs = run.restore(STEPS, os.path.join(run.state, "b.safetensors"))
    if mine != theirs:
        raise Fail("lost-cache: the restore after the loss differs from the one before")
    # and supervise itself, run again on the rebuilt cache: the run is done
    run.start()
    run.wait_exit(60)
    out = open(os.path.join(run.state, "supervise.out")).read()
    if "final checkpoint" not in out and "already done" not in out:
        raise Fail("lost-cache: supervise run again did not find the run done in the bucket")
    return ("state dir's cache lost", float("nan"), float("nan"), 0,
            f"rebuild-catalog: {r.stdout.strip()}; {len(after)} listed as before, restore "
            f"bit-identical, supervise again: done")


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


SUITES = {
    "node-loss": {
        "kill-worker": case_kill_worker,
        "kill-node": case_kill_node,
        "two-nodes": case_two_nodes,
        "shrink": case_shrink,
        "kill-supervisor": case_kill_supervisor,
    },
    "watchdog": {
        "sigstop": case_sigstop,
        "xid-79": case_xid_fatal,
        "xid-13": case_xid_app,
        "loss-spike": case_loss_spike,
        "nan": case_nan,
        "straggler": case_straggler,
    },
    "s3": {
        "down-local": case_s3_down_local,
        "down-both": case_s3_down_both,
        "500-hang": case_s3_500_hang,
        "bucket-damage": case_s3_bucket_damage,
        "lost-cache": case_s3_lost_cache,
        "wrong-key": case_s3_wrong_key,
    },
}


def no_false_hang(runs):
    """Raises Fail if any of these runs reported progress_hang (no hang was
    injected: the progress watchdog took live training for a hang)."""
    for run in runs:
        hangs = [e for e in run.events() if e["event"] == "progress_hang"]
        if hangs:
            h = hangs[0]
            raise Fail(f"{run.name}: progress_hang with no hang injected ({len(hangs)}; the first: "
                       f"class {h.get('class')}, {h.get('why')})")


def run_cases(args, cases, ref, rows, failed):
    for name in args.cases:
        log(f"== {name}")
        first = len(RUNS)
        try:
            row = cases[name](args, ref)
            if name not in HANG_CASES:
                no_false_hang(RUNS[first:])
            rows.append(row)
            log(f"   ok: {rows[-1][4]}")
        except Fail as e:
            failed.append(name)
            log(f"   FAIL: {e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--bin", default=os.environ.get("FT_BIN") or os.path.join(repo, "build", "bin"),
                    help="the programs (default: $FT_BIN, else %(default)s)")
    ap.add_argument("--work", default=None,
                    help="the suite's folder (default: a new temporary folder)")
    ap.add_argument("--suite", default="node-loss", choices=sorted(SUITES))
    ap.add_argument("--worker", default=os.environ.get("FT_CHAOS_WORKER") or None,
                    help="the worker program for the s3 suite's runs (default: "
                    "$FT_CHAOS_WORKER, else the one beside supervise)")
    ap.add_argument("cases", nargs="*")
    args = ap.parse_args()
    CASES = SUITES[args.suite]
    args.cases = args.cases or list(CASES)
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        ap.error(f"no case {', '.join(unknown)} in suite {args.suite} "
                 f"(cases: {', '.join(CASES)})")
    if not os.access(os.path.join(args.bin, "supervise"), os.X_OK):
        ap.error(f"no supervise program in {args.bin}: build first (scripts/build.sh) or "
                 "give --bin BUILD/bin")
    args.bin = os.path.abspath(args.bin)
    own_work = args.work is None
    if own_work:
        args.work = tempfile.mkdtemp(prefix=f"chaos-{args.suite}.")
        log(f"(the suite's files are in {args.work}; removed if every case passes)")
    args.work = os.path.abspath(args.work)
    os.makedirs(args.work, exist_ok=True)
    data = os.path.join(args.work, "data")
    subprocess.run([os.path.join(args.bin, "ftdata"), "synth", "--out", data + "/synth",
                    "--tokens", "300000"], check=True, capture_output=True)
    args.runfile = os.path.join(args.work, "chaos.yaml")
    with open(args.runfile, "w") as f:
        f.write(RUN_YAML.format(steps=STEPS, every=EVERY, hb=HB, coll=COLL, data=data,
                                xid=os.path.join(args.work, "kern.log")))
    open(os.path.join(args.work, "kern.log"), "a").close()

    log("== reference: the same run without faults (2 nodes x 2 workers)")
    ref_run = Run(args, "reference", spares=0).start()
    t_ref = time.time()
    ref_run.wait_exit(240)
    no_false_hang([ref_run])
    args.ref_wall = time.time() - t_ref
    ref = ref_run.final()
    log(f"   final loss {ref[0]:.6f}")

    rows, failed = [], []
    try:
        run_cases(args, CASES, ref, rows, failed)
    finally:
        if S3["srv"]:
            S3["srv"].stop()
    log("")
    log(f"{'fault':<32} {'detect s':>9} {'recover s':>10} {'steps lost':>11}  check")
    for fault, det, rec, lost, check in rows:
        log(f"{fault:<32} {det:>9.3f} {rec:>10.3f} {lost:>11}  {check}")
    if args.suite == "watchdog":
        log("(loss spike / NaN: 'detect' is in steps after the poisoned batch was trained on,"
            " 'recover' the seconds from the detection to the first step after the rollback)")
    if args.suite == "s3":
        log("(s3: 'detect' is how long the endpoint was faulty, 'recover' the time from its"
            " return to the next committed checkpoint)")
    log("(kill -9 the supervisor: 'detect' is how long its orphaned workers took to stop,"
        " 'recover' the time from the kill to the first step after the restart)")
    log(f"{len(rows)} passed, {len(failed)} failed")
    if own_work and not failed:
        import shutil
        shutil.rmtree(args.work, ignore_errors=True)
    elif own_work:
        log(f"(kept the suite's files in {args.work})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
