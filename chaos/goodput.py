#!/usr/bin/env python3
"""goodput: how much of a supervised run's wall time went into steps that
survive in its final timeline, read from the supervisor's events.jsonl.

    chaos/goodput.py STATE/events.jsonl [--faults FAULTS.jsonl] [--json]

goodput = 1 - (wall time not spent on steps of the final timeline) / wall

Wall time runs from the first run_started to the last run_done (or the last
event), across every `supervise` of the same state directory. Each
generation trains steps restore+1, restore+2, ...; the steps it trains that
the next generation rolls back (those after the next generation's restore
step) are lost, as is all time between generations (detection, stopping,
relaunch, restore). The time a generation spent on its surviving steps is
read off its own (step, time) points -- its "step" events (one per
checkpoint interval), its first step (the "recovered" event) and the step
it had reached when a fault was detected -- by linear interpolation.

With --faults (JSON lines {"ts": unix seconds, "kind": "..."} written by the
code that injected each fault), each fault gets: time to detect (its first
fault_detected after it), time to recover (its first recovered after it:
the new gang's first step) and the steps it cost (that recovered event's
steps_lost).

Exit codes: 0 printed; 2 usage or an unreadable/empty event log.
"""
import argparse
import json
import math
import sys


def load(path):
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise SystemExit(f"goodput: {path}:{n}: not JSON ({e})")
    return out


def interp(pts, step):
    """Time at which `step` was done, from (step, ts) points sorted by step;
    extrapolated from the nearest two points outside their range."""
    if len(pts) == 1:
        return pts[0][1]
    for i in range(1, len(pts)):
        if step <= pts[i][0] or i == len(pts) - 1:
            (s0, t0), (s1, t1) = pts[i - 1], pts[i]
            if s1 == s0:
                return t1
            return t0 + (t1 - t0) * (step - s0) / (s1 - s0)
    return pts[-1][1]


def analyse(evs, faults=()):
    starts = [e for e in evs if e["event"] == "run_started"]
    if not starts:
        raise SystemExit("goodput: no run_started event in the log")
    t_begin = starts[0]["ts"]
    dones = [e for e in evs if e["event"] == "run_done"]
    t_end = dones[-1]["ts"] if dones else evs[-1]["ts"]
    wall = t_end - t_begin
    final_step = dones[-1]["steps"] if dones else None

    # generations in order of appearance (a new supervise restarts numbering
    # from its persisted generation, so (start index, gen) identifies one)
    gens = []  # dicts: gen, restore, pts
    cur = None
    for e in evs:
        ev = e["event"]
        if ev == "generation_started":
            cur = {"gen": e["gen"], "restore": max(0, e.get("restore_step", 0)), "pts": [],
                   "t0": e["ts"]}
            gens.append(cur)
        elif cur is None:
            continue
        elif ev == "recovered" and e.get("gen") == cur["gen"]:
            cur["pts"].append((e["first_step"], e["ts"]))
        elif ev == "step" and e.get("gen") == cur["gen"]:
            cur["pts"].append((e["step"], e["ts"]))
        elif ev == "fault_detected" and e.get("gen") == cur["gen"] and e.get("step", -1) > cur["restore"]:
            cur["pts"].append((e["step"], e["ts"]))
        elif ev == "run_done" and e.get("gen") == cur["gen"]:
            cur["pts"].append((e["steps"], e["ts"]))
    useful = 0.0
    survive = 0
    for i, g in enumerate(gens):
        pts = sorted(set(g["pts"]))
        if not pts:
            continue
        upto = gens[i + 1]["restore"] if i + 1 < len(gens) else (final_step or pts[-1][0])
        upto = min(upto, pts[-1][0])
        if upto <= g["restore"]:
            continue
        # a generation's first point may be steps after its restore point
        # (no "recovered" for the first one): extrapolating back from a slow
        # stretch must not reach before the generation began
        t_from = max(g["t0"], interp(pts, g["restore"]))
        useful += max(0.0, min(t_end, interp(pts, upto)) - t_from)
        survive += upto - g["restore"]

    rows = []
    # a fault is detected by its first fault_detected, or by a straggler
    # report (a slow host is reported, not recovered from) after it
    dets = [e for e in evs if e["event"] in ("fault_detected", "straggler")]
    recs = [e for e in evs if e["event"] == "recovered"]
    quar = [e for e in evs if e["event"] == "node_quarantined"]
    for i, f in enumerate(faults):
        nxt = faults[i + 1]["ts"] if i + 1 < len(faults) else math.inf
        d = next((e for e in dets if f["ts"] <= e["ts"] < nxt), None)
        r = None
        if d and d["event"] == "fault_detected":
            r = next((e for e in recs if e["ts"] >= d["ts"]), None)
        # who paid: the hosts quarantined between detection and recovery
        upto = r["ts"] if r else nxt
        paid = [e for e in quar if d and d["ts"] <= e["ts"] <= upto]
        if d and d["event"] == "straggler":
            blamed = "reported " + (d.get("host") or f"node {d.get('node')}")
            kind = "straggler:" + d.get("cause", "?")
        else:
            blamed = ", ".join(e.get("host") or f"node {e['node']}" for e in paid) or "none"
            kind = d.get("kind") if d else None
        rows.append({"kind": f.get("kind", "?"), "ts": f["ts"],
                     "detect_s": d["ts"] - f["ts"] if d else math.nan,
                     "recover_s": r["ts"] - f["ts"] if r else math.nan,
                     "steps_lost": r.get("steps_lost", 0) if r else None,
                     "blamed": blamed if d else None,
                     "detected_as": kind})
    return {"wall_s": wall, "useful_s": useful, "goodput": useful / wall if wall > 0 else math.nan,
            "generations": len(gens), "surviving_steps": survive, "final_step": final_step,
            "faults": rows}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("events", help="STATE/events.jsonl")
    ap.add_argument("--faults", help="JSON lines {ts, kind} of injected faults")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    a = ap.parse_args()
    try:
        evs = load(a.events)
        faults = load(a.faults) if a.faults else []
    except OSError as e:
        print(f"goodput: {e}", file=sys.stderr)
        return 2
    if not evs:
        print(f"goodput: {a.events} holds no events", file=sys.stderr)
        return 2
    r = analyse(evs, faults)
    if a.json:
        print(json.dumps(r))
        return 0
    print(f"wall {r['wall_s']:.1f} s, on surviving steps {r['useful_s']:.1f} s: "
          f"goodput {100 * r['goodput']:.1f}% ({r['generations']} generations, "
          f"{r['surviving_steps']} steps in the final timeline)")
    if r["faults"]:
        print(f"{'fault':<22} {'detect s':>9} {'recover s':>10} {'steps lost':>11}  "
              "detected as: quarantined")
        for f in r["faults"]:
            print(f"{f['kind']:<22} {f['detect_s']:>9.2f} {f['recover_s']:>10.2f} "
                  f"{str(f['steps_lost']):>11}  {f['detected_as']}: {f['blamed']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
