#!/usr/bin/env python3
# The direction of calls in a room of the code (issue 40), read from the
# objects' symbols with `nm`: an edge goes from each object to the object
# that defines a symbol it leaves undefined. A lower file that must call up
# does it through a function pointer (the store's tier operations, the
# supervisor's sup_hooks), which `nm` does not see as an edge.
#
# Rooms:
#   store       the ftckpt objects: no circle of calls (no strongly
#               connected component of more than one file).
#   supervisor  the ftsup and supervise objects: no circle, and every call
#               goes to the same or a lower layer of LAYERS below (the
#               supervisor's layers, docs/design.md section 3). A file in no
#               layer fails too: a new file is placed in one here.
# Each failure names the files and the symbols of the offending calls.
#
# Usage: layering.py ROOM [OBJDIR...]; the OBJDIRs default to the room's
# under $FT_BUILD (set by ft_add_script_test); $NM names the nm to run
# (CMake's CMAKE_NM), "nm" if unset.
import glob
import os
import subprocess
import sys


def symbols(obj):
    """(defined, undefined) global symbol names of one object file."""
    out = subprocess.run([os.environ.get("NM") or "nm", "-P", obj], check=True, capture_output=True,
                         text=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        f = line.split()
        if len(f) < 2:
            continue
        name, kind = f[0], f[1]
        if kind == "U":
            undefined.add(name)
        elif kind in "TDBRCVWGS":
            defined.add(name)
    return defined, undefined


def sccs(nodes, edges):
    """Tarjan's strongly connected components, iterative."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(edges[nxt]))))
                elif nxt in on:
                    low[v] = min(low[v], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(sorted(comp))
    return out


ROOMS = {
    "store": ["ckptstore/CMakeFiles/ftckpt.dir"],
    "supervisor": ["supervisor/CMakeFiles/ftsup.dir", "supervisor/CMakeFiles/supervise.dir"],
}

# The supervisor's layers, lowest first. Detectors (layer 3) hand what they
# see down to the recovery (2), which acts through layer 1; the parts (0)
# know nothing of the run. sup_main.c wires the few calls up (sup_hooks).
LAYERS = [
    ("parts", "sup_assets sup_ckpt_events sup_commitq sup_conn sup_events sup_gang sup_history "
     "sup_kv sup_launch sup_listing sup_rollback sup_shardq sup_view sup_wake"),
    ("act", "sup_act sup_nodes sup_seal sup_stall"),
    ("recovery", "sup_recovery"),
    ("detectors", "sup_run sup_watch sup_doctor sup_timers"),
    ("operator", "sup_http sup_metrics"),
    ("main", "sup_main sup_doctor_cli sup_status"),
]


def layer_of():
    out = {}
    for i, (_, files) in enumerate(LAYERS):
        for f in files.split():
            out[f] = i
    return out


def graph(objs):
    """edges[o] = objects o calls; why[(o, d)] = the symbols."""
    syms = {o: symbols(o) for o in objs}
    owner = {}
    for o in objs:
        for s in syms[o][0]:
            owner[s] = o
    edges = {o: set() for o in objs}
    why = {}
    for o in objs:
        for s in syms[o][1]:
            d = owner.get(s)
            if d and d != o:
                edges[o].add(d)
                why.setdefault((o, d), []).append(s)
    return edges, why


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ROOMS:
        print("usage: layering.py {%s} [OBJDIR...]" % "|".join(ROOMS))
        return 2
    room = sys.argv[1]
    if len(sys.argv) > 2:
        dirs = sys.argv[2:]
    else:
        build = os.environ.get("FT_BUILD")
        if not build:
            print("layering: FT_BUILD is not set and no OBJDIR given")
            return 2
        dirs = [os.path.join(build, d) for d in ROOMS[room]]
    objs = sorted(o for d in dirs for o in glob.glob(os.path.join(d, "*.o")))
    if not objs:
        print(f"layering: no objects in {' '.join(dirs)}")
        return 2
    # sup_x.c.o (CMake) or sup_x.o: the source file's stem
    name = {o: os.path.basename(o).split(".")[0] for o in objs}
    edges, why = graph(objs)
    bad = 0
    for c in sccs(objs, edges):
        if len(c) < 2:
            continue
        bad += 1
        print("layering %s: circle of %d files: %s" % (room, len(c), " ".join(name[o] for o in c)))
        members = set(c)
        for o in c:
            for d in sorted(edges[o] & members):
                print("  %s -> %s (%s)" % (name[o], name[d], ", ".join(sorted(why[(o, d)]))))
    if room == "supervisor":
        lay = layer_of()
        for o in objs:
            if name[o] not in lay:
                bad += 1
                print("layering supervisor: %s is in no layer (tests/unit/layering.py LAYERS)" %
                      name[o])
        for o in objs:
            for d in sorted(edges[o]):
                lo, ld = lay.get(name[o]), lay.get(name[d])
                if lo is not None and ld is not None and ld > lo:
                    bad += 1
                    print("layering supervisor: %s (%s) calls up into %s (%s): %s" %
                          (name[o], LAYERS[lo][0], name[d], LAYERS[ld][0],
                           ", ".join(sorted(why[(o, d)]))))
    if bad:
        return 1
    print(f"layering {room}: {len(objs)} objects, no circle" +
          (", every call down or level" if room == "supervisor" else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
