#!/usr/bin/env python3
# The store's room has no circle of calls (issue 40): reads the symbols of the
# ftckpt objects with `nm`, draws an edge from each object to the object that
# defines a symbol it leaves undefined, and fails naming the files of every
# strongly connected component of more than one file. Lower files that must
# call up do it through a function pointer, which `nm` does not see as an
# edge; anything else that calls up closes a circle and this test names it.
#
# Usage: layering_store.py [OBJDIR]; OBJDIR defaults to
# $FT_BUILD/ckptstore/CMakeFiles/ftckpt.dir (set by ft_add_script_test);
# $NM names the nm to run (CMake's CMAKE_NM), "nm" if unset.
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


def main():
    if len(sys.argv) > 1:
        objdir = sys.argv[1]
    else:
        build = os.environ.get("FT_BUILD")
        if not build:
            print("layering_store: FT_BUILD is not set and no OBJDIR given")
            return 2
        objdir = os.path.join(build, "ckptstore", "CMakeFiles", "ftckpt.dir")
    objs = sorted(glob.glob(os.path.join(objdir, "*.o")))
    if not objs:
        print(f"layering_store: no objects in {objdir}")
        return 2
    name = {o: os.path.basename(o)[:-len(".o")] for o in objs}
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
    bad = [c for c in sccs(objs, edges) if len(c) > 1]
    if not bad:
        print(f"layering_store: {len(objs)} objects, no circle")
        return 0
    for c in bad:
        print("layering_store: circle of %d files: %s" %
              (len(c), " ".join(name[o] for o in c)))
        members = set(c)
        for o in c:
            for d in sorted(edges[o] & members):
                print("  %s -> %s (%s)" % (name[o], name[d],
                                           ", ".join(sorted(why[(o, d)]))))
    return 1


if __name__ == "__main__":
    sys.exit(main())
