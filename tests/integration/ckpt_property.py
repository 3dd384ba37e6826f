#!/usr/bin/env python3
"""ckpt_property: random sequences of operator commands against a checkpoint
store while faults are injected, and after every command a check that no good
checkpoint was lost (issue 41's property test; tests/integration/ckpt_property.sh
sets up the servers and the disks and runs this twice: a local store and an s3
store behind chaos/s3_faults.py in front of moto with signatures checked).

    ckpt_property.py --kind local|s3 --store URI --work DIR --seed N --ops N
                     [--disk DIR] [--mode-file FILE] [--cache DIR]

Each step picks one command, the way an operator (or a script) would run them:
ls, gc (random --keep-last/--keep-every/--grace/--dry-run), verify [STEP],
pin/unpin STEP, rebuild-catalog, restore STEP|latest (now and then --to a path
inside the store, which must be refused), and a writer that commits new
checkpoints as training would. Before the command, zero to two faults:

    both kinds  kill      SIGKILL the command after a random delay
                disk_full the disk under the store (local) or the cache (s3)
                          filled to its last block (a tmpfs: --disk)
                stale     the catalog replaced by a copy taken earlier (a
                          backup put back; a host's cache that is behind)
    local       disk_ro   that disk remounted read-only
                lost      the catalog folder deleted
    s3          s3_500    the next 1-12 requests answered 500
                s3_hang   the endpoint answers nothing for 0.3-2.5 s
                s3_down   the endpoint refuses connections for 0.3-2.5 s
                s3_403    the command signs with a wrong secret
                cache_lost the whole cache deleted
                cache_chunk one chunk file of the cache truncated

Then the faults are healed (the endpoint, the disk; a stale or lost catalog
stays as it is) and the check runs. The TRUTH is what the store holds, read
the way a new host would: for s3 a new empty cache (the catalog built from the
bucket), for local a copy of the store's chunks and manifests with a catalog
rebuilt from them (rebuild-catalog; pins and marks are kept beside the
manifests). The MODEL is every checkpoint an earlier check's ls showed as
committed or good, with the sha256 of its restore and its pin. The check:

  P1 every model checkpoint is in the truth and restores bit-identically,
     unless the last command was a gc (not --dry-run) whose policy allowed
     deleting it (not pinned, not among the newest --keep-last, not a
     multiple of --keep-every; --keep-last 0 deletes none)
  P2 no model checkpoint is marked bad (the faults never damage the last
     copy of a byte: a bad mark on whole data is the first step to losing it,
     gc drops bad checkpoints)
  P3 pins survive: a pin or unpin that exited 0 is what the truth shows
  P4 no command was killed by a signal we did not send, none hung (120 s),
     every exit code is one `ckpt --help` documents (0-5)
  P5 a restore that exited 0 wrote the model's bytes; a restore --to a path
     inside the store was refused (exit 2, or 3/4 when an earlier check
     refused it) and changed nothing
  P6 the operator's own view recovers: after the faults heal, `ckpt ls`
     exits 0, or says to run rebuild-catalog and does after it (a stale
     catalog may lag, but never shows a model checkpoint as bad)
Then newly listed good checkpoints join the model.

Exit 0 when every check held; 1 on the first violation, printing it, the
seed and the commands that led there (rerun with the same --seed).
"""
import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

A = None
RNG = None
LOG = []  # (index, text) of every command, for the report
STATS = {}


def note(key):
    STATS[key] = STATS.get(key, 0) + 1


def say(msg):
    print(msg, flush=True)


def violation(what):
    say("")
    say(f"VIOLATION ({A.kind} store, seed {A.seed}): {what}")
    say("the commands that led here (newest last):")
    for line in LOG[-25:]:
        say("  " + line)
    say(f"rerun: FT_PROPERTY_SEED={A.seed} ctest -R ckpt_property "
        f"(or ckpt_property.py --kind {A.kind} --seed {A.seed} ...)")
    sys.exit(1)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


# ---- running programs ------------------------------------------------------


class Result:
    def __init__(self, rc, out, err, killed):
        self.rc, self.out, self.err, self.killed = rc, out, err, killed

    def text(self):
        return (self.out + self.err).strip().replace("\n", " | ")[:400]


def run(argv, env=None, kill_after=None, timeout=120):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e,
                         text=True)
    killed = False
    if kill_after is not None:
        try:
            p.wait(timeout=kill_after)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
            killed = True
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        violation(f"'{' '.join(argv)}' hung for {timeout} s (killed): {err[-300:]}")
    return Result(p.returncode, out, err, killed)


def ckpt(args, store=None, env=None, kill_after=None):
    argv = [A.ckpt, "--store", store or A.store] + args
    return run(argv, env=env, kill_after=kill_after)


def check_rc(r, what):
    """P4: no signal we did not send, no exit code ckpt does not document."""
    if r.killed:
        return
    if r.rc < 0:
        violation(f"{what} died of signal {-r.rc}: {r.text()}")
    if r.rc not in (0, 1, 2, 3, 4, 5):
        violation(f"{what} exited {r.rc}, not a documented code: {r.text()}")


# ---- faults ----------------------------------------------------------------


def wait_endpoint():
    """After "down" the proxy listens again within 0.1 s: waits for it."""
    port = int(os.environ["FT_S3_ENDPOINT"].rsplit(":", 1)[1])
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    violation(f"the fault proxy does not listen again on port {port}")


class Faults:
    """Applies and heals the faults of one command."""

    def __init__(self):
        self.env = {}
        self.kill_after = None
        self.timers = []
        self.ballast = None
        self.ro = False
        self.names = []
        self.snapshots = []  # copies of the catalog folder taken at checks

    def catalog_dir(self):
        if A.kind == "local":
            return os.path.join(A.store[len("local:"):], "catalog")
        return os.path.join(A.cache, "catalog")

    def set_mode(self, m):
        with open(A.mode_file, "w") as f:
            f.write(m + "\n")

    def timed_mode(self, m, secs):
        self.set_mode(m)
        t = threading.Timer(secs, lambda: self.set_mode("ok"))
        t.start()
        self.timers.append(t)

    def fill_disk(self):
        """Fills the tmpfs to its last block (unbuffered writes, smaller and
        smaller, until each one fails)."""
        path = os.path.join(A.disk, "ballast")
        self.ballast = path
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            for size in (1 << 20, 4096, 512, 1):
                blk = b"\0" * size
                try:
                    while True:
                        os.write(fd, blk)
                except OSError:
                    pass
        finally:
            os.close(fd)

    def snapshot(self):
        """Keeps a copy of the catalog as it is now (at most 4)."""
        src = self.catalog_dir()
        if not os.path.isdir(src):
            return
        dst = os.path.join(A.work, f"catalog-snap-{len(LOG)}")
        try:
            shutil.copytree(src, dst)
        except OSError:
            shutil.rmtree(dst, ignore_errors=True)
            return
        self.snapshots.append(dst)
        if len(self.snapshots) > 4:
            shutil.rmtree(self.snapshots.pop(0), ignore_errors=True)

    def apply(self, name):
        self.names.append(name)
        if name == "kill":
            self.kill_after = RNG.uniform(0.0, 0.25 if A.kind == "local" else 0.8)
        elif name == "disk_full":
            self.fill_disk()
        elif name == "disk_ro":
            subprocess.run(["mount", "-o", "remount,ro", A.disk], check=True)
            self.ro = True
        elif name == "stale":
            if not self.snapshots:
                self.names.pop()
                return
            snap = RNG.choice(self.snapshots)
            dst = self.catalog_dir()
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(snap, dst)
        elif name == "lost":
            shutil.rmtree(self.catalog_dir(), ignore_errors=True)
        elif name == "s3_500":
            self.set_mode(f"500:{RNG.randint(1, 12)}")
        elif name == "s3_hang":
            self.timed_mode("hang", RNG.uniform(0.3, 2.5))
        elif name == "s3_down":
            self.timed_mode("down", RNG.uniform(0.3, 2.5))
        elif name == "s3_403":
            self.env["AWS_SECRET_ACCESS_KEY"] = "wrong-secret-" + str(RNG.randint(0, 99))
        elif name == "cache_lost":
            shutil.rmtree(A.cache, ignore_errors=True)
        elif name == "cache_chunk":
            files = []
            for root, _, names in os.walk(os.path.join(A.cache, "chunks")):
                files += [os.path.join(root, n) for n in names]
            if not files:
                self.names.pop()
                return
            victim = RNG.choice(sorted(files))
            size = os.path.getsize(victim)
            os.truncate(victim, RNG.randint(0, max(0, size - 1)))
        else:
            raise ValueError(name)

    def heal(self):
        for t in self.timers:
            t.cancel()
        self.timers = []
        if A.mode_file:
            self.set_mode("ok")
            wait_endpoint()
        if self.ro:
            subprocess.run(["mount", "-o", "remount,rw", A.disk], check=True)
            self.ro = False
        if self.ballast:
            os.unlink(self.ballast)
            self.ballast = None
        self.env = {}
        self.kill_after = None
        names, self.names = self.names, []
        return names


# ---- the model and the truth -----------------------------------------------


class Model:
    def __init__(self):
        self.steps = {}  # step -> {"sha": hex, "pinned": bool, "pin_sure": bool}
        self.next_step = 1
        # the committed/good steps the operator's own ls showed at the last
        # check: an s3 cache may hold one whose upload is still queued (level
        # local), which a new host does not see yet but gc counts
        self.operator_steps = set()

    def eligible(self, keep_last, keep_every):
        """The steps a gc with this policy may delete (ckpt_gc.c's G2)."""
        if keep_last <= 0:
            return set()
        out = set()
        for i, step in enumerate(sorted(set(self.steps) | self.operator_steps, reverse=True)):
            c = self.steps.get(step)
            if c is None or c["pinned"] or not c["pin_sure"]:
                continue  # not in the model, or an uncertain pin: keep it
            if i < keep_last or (keep_every > 0 and step % keep_every == 0):
                continue
            out.add(step)
        return out


def truth_view(n):
    """A new host's view of the store: (store URI, env) to run ckpt with."""
    if A.kind == "s3":
        cache = os.path.join(A.work, f"truth-cache-{n}")
        return A.store, {"FT_S3_CACHE": cache}, cache
    src = A.store[len("local:"):]
    dst = os.path.join(A.work, f"truth-{n}")
    os.makedirs(dst)
    for sub in ("chunks", "manifests"):
        if os.path.isdir(os.path.join(src, sub)):
            shutil.copytree(os.path.join(src, sub), os.path.join(dst, sub), symlinks=True)
    r = ckpt(["--json", "rebuild-catalog", "local:" + dst], store="local:" + dst)
    check_rc(r, "truth: rebuild-catalog of a copy of the store")
    if r.rc not in (0, 1):
        violation(f"a copy of the store cannot be catalogued (rebuild-catalog exit {r.rc}): "
                  f"{r.text()}")
    return "local:" + dst, {}, dst


def ls_json(store, env):
    r = ckpt(["--json", "ls"], store=store, env=env)
    check_rc(r, "ls")
    if r.rc == 3 and "no checkpoints" in (r.out + r.err):
        return r, []
    if r.rc != 0:
        return r, None
    try:
        return r, json.loads(r.out)
    except ValueError:
        violation(f"ls --json printed no JSON: {r.out[:300]}")


def restore_sha(store, env, step, where):
    out = os.path.join(A.work, "check.st")
    if os.path.exists(out):
        os.unlink(out)
    r = ckpt(["restore", str(step), "--to", out], store=store, env=env)
    check_rc(r, f"restore {step} ({where})")
    if r.rc != 0:
        return None, r
    return sha256(out), r


def check(model, last, n):
    """P1-P3 and P6 after a command (faults healed); then admits new ones."""
    store, env, scratch = truth_view(n)
    r, listing = ls_json(store, env)
    if listing is None:
        violation(f"the store's own ls (a new host's view) fails: exit {r.rc}: {r.text()}")
    truth = {c["step"]: c for c in listing if c["run"] == "testrun"}
    allowed = last.get("may_delete", set())
    for step in sorted(model.steps):
        c = model.steps[step]
        if step not in truth:
            if step in allowed:
                del model.steps[step]
                note("deleted_by_gc")
                continue
            violation(f"checkpoint {step} (listed good before, restored with sha {c['sha'][:12]}) "
                      f"is gone from the store after '{last['cmd']}'")
        t = truth[step]
        if t["state"] not in ("committed", "good"):
            violation(f"checkpoint {step} is marked {t['state']} after '{last['cmd']}', "
                      "though every byte of it was whole")
        if c["pin_sure"] and t["pinned"] != c["pinned"]:
            violation(f"checkpoint {step}: pinned={t['pinned']} in the store after "
                      f"'{last['cmd']}', but the last pin/unpin that succeeded left it "
                      f"pinned={c['pinned']}")
        c["pinned"], c["pin_sure"] = t["pinned"], True
        got, rr = restore_sha(store, env, step, "a new host's view")
        if got is None:
            violation(f"checkpoint {step} no longer restores after '{last['cmd']}': exit "
                      f"{rr.rc}: {rr.text()}")
        if got != c["sha"]:
            violation(f"checkpoint {step} restores other bytes after '{last['cmd']}' "
                      f"({got[:12]} instead of {c['sha'][:12]})")
    for step, t in sorted(truth.items()):
        model.next_step = max(model.next_step, step + 1)
        if step in model.steps or t["state"] not in ("committed", "good"):
            continue
        got, rr = restore_sha(store, env, step, "a new host's view")
        if got is None:
            violation(f"checkpoint {step} is listed {t['state']} but does not restore: exit "
                      f"{rr.rc}: {rr.text()}")
        model.steps[step] = {"sha": got, "pinned": t["pinned"], "pin_sure": True}
        note("admitted")
    shutil.rmtree(scratch, ignore_errors=True)
    # P6: the operator's own view
    r, mine = ls_json(A.store, {})
    if mine is None and r.rc == 4 and "rebuild-catalog" in r.err:
        note("operator_rebuilds")
        rb = ckpt(["rebuild-catalog", A.store_root])
        check_rc(rb, "rebuild-catalog (the recovery ls asked for)")
        r, mine = ls_json(A.store, {})
    if mine is None:
        violation(f"after the faults healed, the operator's 'ckpt ls' exits {r.rc}: {r.text()}")
    model.operator_steps = {c["step"] for c in mine
                            if c["run"] == "testrun" and c["state"] in ("committed", "good")}
    for c in mine:
        if c["step"] in model.steps and c["state"] not in ("committed", "good"):
            violation(f"the operator's ls shows checkpoint {c['step']} as {c['state']}, though "
                      "every byte of it is whole")


# ---- the commands ----------------------------------------------------------


def pick_step(model):
    if model.steps and RNG.random() < 0.9:
        return RNG.choice(sorted(model.steps))
    return model.next_step + RNG.randint(0, 5)  # one that does not exist


def op_ls(model, f):
    args = ["--json", "ls"] if RNG.random() < 0.5 else ["ls"]
    return args, {}


def op_gc(model, f):
    args = ["gc"]
    keep_last = RNG.choice([0, 1, 1, 2, 2, 3, 4])
    keep_every = RNG.choice([0, 0, 0, 2, 3])
    dry = RNG.random() < 0.2
    if keep_last or RNG.random() < 0.5:
        args += ["--keep-last", str(keep_last)]
    if keep_every:
        args += ["--keep-every", str(keep_every)]
    args += ["--grace", "0"] if RNG.random() < 0.8 else []
    if dry:
        args.append("--dry-run")
    may = set() if dry else model.eligible(keep_last, keep_every)
    return args, {"may_delete": may}


def op_verify(model, f):
    if model.steps and RNG.random() < 0.4:
        return ["verify", str(pick_step(model))], {}
    return ["verify"], {}


def op_pin(model, f):
    step = pick_step(model)
    pin = RNG.random() < 0.6
    return ["pin" if pin else "unpin", str(step)], {"pin": (step, pin)}


def op_rebuild(model, f):
    return ["rebuild-catalog", A.store_root], {}


def op_restore(model, f):
    out = os.path.join(A.work, "op.st")
    if os.path.exists(out):
        os.unlink(out)
    if RNG.random() < 0.15:
        # a path inside the store: must be refused (exit 2), nothing changed
        root = A.store[len("local:"):] if A.kind == "local" else A.cache
        cands = []
        for r, _, names in os.walk(os.path.join(root, "manifests")):
            cands += [os.path.join(r, n) for n in names if n.endswith(".json")]
        target = RNG.choice(sorted(cands)) if cands else os.path.join(root, "new.st")
        before = sha256(target) if os.path.isfile(target) else None
        return (["restore", str(pick_step(model)), "--to", target],
                {"into_store": (target, before)})
    step = "latest" if RNG.random() < 0.3 else str(pick_step(model))
    return ["--json", "restore", step, "--to", out], {"restore_to": out}


OPS = [(op_ls, 2), (op_gc, 5), (op_verify, 2), (op_pin, 3), (op_rebuild, 1), (op_restore, 3),
       ("write", 3)]


def run_writer(model, f):
    start = model.next_step
    k = RNG.randint(1, 2)
    embd = RNG.choice([64, 96])
    model.next_step = start + k
    argv = [A.writer, "--store", A.store, "--start", str(start), "--steps", str(k), "--world", "2",
            "--layers", "2", "--embd", str(embd), "--chunk-mib", "1"]
    return run(argv, env=f.env, kill_after=f.kill_after), f"writer steps {start}..{start + k - 1}"


FAULTS = {
    "local": [("kill", 2), ("disk_full", 2), ("stale", 2), ("disk_ro", 1), ("lost", 1)],
    "s3": [("kill", 2), ("disk_full", 1), ("stale", 2), ("s3_500", 2), ("s3_hang", 1),
           ("s3_down", 1), ("s3_403", 1), ("cache_lost", 1), ("cache_chunk", 2)],
}


def weighted(choices):
    total = sum(w for _, w in choices)
    x = RNG.uniform(0, total)
    for c, w in choices:
        x -= w
        if x <= 0:
            return c
    return choices[-1][0]


def one_op(i, model, f):
    op = weighted(OPS)
    nf = RNG.choice([0, 0, 1, 1, 1, 2])
    chosen = []
    for _ in range(nf):
        name = weighted(FAULTS[A.kind])
        if name in ("disk_full", "disk_ro") and not A.disk:
            continue
        if name not in chosen:
            chosen.append(name)
    # files first, then the disk: fill it, then make it read-only
    for name in sorted(chosen, key=lambda x: ("disk_full", "disk_ro").index(x) + 1
                       if x.startswith("disk_") else 0):
        f.apply(name)
    faults = list(f.names)
    if op == "write":
        r, cmd = run_writer(model, f)
        info = {}
        what = cmd
    else:
        args, info = op(model, f)
        what = "ckpt " + " ".join(args)
        r = ckpt(args, env=f.env, kill_after=f.kill_after)
        check_rc(r, what)
    f.heal()
    note("killed" if r.killed else f"rc{r.rc}")
    LOG.append(f"#{i} [{','.join(faults) or 'no fault'}] {what} -> "
               f"{'killed' if r.killed else 'exit ' + str(r.rc)}: {r.text()[:160]}")
    if not faults:
        note("no_fault")
    for name in faults:
        note("fault_" + name)
    info["cmd"] = what
    # P5
    if "into_store" in info:
        target, before = info["into_store"]
        after = sha256(target) if os.path.isfile(target) else None
        # 2 (refused), or an earlier refusal: 3 (no such step), 4 (no catalog)
        if not r.killed and r.rc == 0:
            violation(f"'{what}' (a path inside the store) exited 0: {r.text()}")
        if after != before:
            violation(f"'{what}' changed {target}")
    if "restore_to" in info and r.rc == 0 and not r.killed:
        step = json.loads(r.out)["step"]
        if step in model.steps:
            got = sha256(info["restore_to"])
            if got != model.steps[step]["sha"]:
                violation(f"'{what}' exited 0 with other bytes for step {step} "
                          f"({got[:12]} instead of {model.steps[step]['sha'][:12]})")
            note("restores_compared")
    if "pin" in info:
        step, pin = info["pin"]
        if step in model.steps:
            c = model.steps[step]
            if r.rc == 0 and not r.killed:
                c["pinned"], c["pin_sure"] = pin, True
            else:
                c["pin_sure"] = False  # it may or may not have landed
    return info


def main():
    global A, RNG
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kind", choices=["local", "s3"], required=True)
    p.add_argument("--store", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--ops", type=int, default=40)
    p.add_argument("--disk", help="a tmpfs under the store (local) or the cache (s3)")
    p.add_argument("--mode-file", help="s3_faults.py's mode file (s3)")
    p.add_argument("--cache", help="the operator's FT_S3_CACHE (s3)")
    p.add_argument("--ckpt", default=os.path.join(os.environ.get("FT_BIN", ""), "ckpt"))
    p.add_argument("--writer",
                   default=os.path.join(os.environ.get("FT_BUILD", ""), "tests", "ckpt_testwriter"))
    A = p.parse_args()
    A.store_root = A.store[len("local:"):] if A.kind == "local" else A.store
    if A.kind == "s3":
        os.environ["FT_S3_CACHE"] = A.cache
    RNG = random.Random(f"{A.seed}-{A.kind}")
    os.makedirs(A.work, exist_ok=True)
    say(f"{A.kind} store {A.store}: {A.ops} commands, seed {A.seed}"
        f"{'' if A.disk else ' (no tmpfs: no disk faults)'}")
    model, f = Model(), Faults()
    # a first few checkpoints, no faults
    r, _ = run_writer(model, f)
    if r.rc != 0:
        violation(f"the first writer failed: {r.text()}")
    LOG.append("#0 [no fault] writer (the first checkpoints)")
    check(model, {"cmd": "the first writer"}, 0)
    t0 = time.monotonic()
    for i in range(1, A.ops + 1):
        info = one_op(i, model, f)
        check(model, info, i)
        if RNG.random() < 0.3:
            f.snapshot()
        if i % 10 == 0:
            say(f"  {i}/{A.ops} commands, {len(model.steps)} checkpoints in the model, "
                f"{time.monotonic() - t0:.0f} s")
    say(f"ok: {A.kind}: {A.ops} commands, every check held; " +
        ", ".join(f"{k} {v}" for k, v in sorted(STATS.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
