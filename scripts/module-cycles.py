#!/usr/bin/env python3
"""Report modules of a crate that import each other (pairs, and longer cycles), test code excluded.

Usage: scripts/module-cycles.py applier catalog segment-format ...   (crate folders)

Why: no two modules of a crate may import each other, directly or in a cycle. Rust allows them, so nothing else catches
one. A module "imports" another when its non-test code names a path through it (`crate::a::b`, `super::x`, or a
child module `child::item`); items re-exported by a parent count as the parent. Approximate (text, not the
compiler), but it found every cycle a review had found by hand.
"""
import os, re, sys
def modpath(src, f):
    rel = os.path.relpath(f, src)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"): rel = rel[:-1]
    return tuple(rel)
def strip_tests(text):
    m = re.search(r"#\[cfg\(test\)\]\s*mod \w+\s*\{", text)
    return text[:m.start()] if m else text
for crate in sys.argv[1:]:
    src = os.path.join(crate, "src")
    files = [os.path.join(d, f) for d, _, fs in os.walk(src) for f in fs if f.endswith(".rs")]
    mods = {modpath(src, f): f for f in files}
    edges = {}
    for m, f in mods.items():
        base = os.path.basename(f)
        if base.startswith("tests") or "/tests/" in f or base == "test_support.rs": continue
        text = strip_tests(open(f).read())
        deps = set()
        # expand `use x::{a, b::c}` groups crudely
        for g in re.finditer(r"\b(crate|super)((?:::\w+)*)::\{([^}]*)\}", text):
            root, mid, inner = g.groups()
            for part in inner.split(","):
                part = part.strip().split(" as ")[0]
                if part: deps.add((root, mid + "::" + part))
        for g in re.finditer(r"\b(crate|super)((?:::\w+)+)", text):
            deps.add((g.group(1), g.group(2)))
        for g in re.finditer(r"(?<![:\w])(\w+)::", text):
            child = m + (g.group(1),)
            if child in mods and g.group(1) not in ("crate", "super", "self"):
                edges.setdefault(m, set()).add(child)
        for root, path in deps:
            segs = [s for s in path.split("::") if s]
            # `super` inside foo/mod.rs refers to foo's parent
            base_mod = () if root == "crate" else (m[:-1] if not f.endswith("mod.rs") else m[:-1])
            if root == "super" and not (f.endswith("mod.rs") or f.endswith("lib.rs")):
                base_mod = m[:-1]
            target = base_mod
            best = base_mod
            for s in segs:
                target = target + (s,)
                if target in mods: best = target
                else: break
            if best != m and not (len(m) > len(best) and m[:len(best)] == best and best == ()):
                edges.setdefault(m, set()).add(best)
    found = False
    for a, bs in edges.items():
        for b in bs:
            if a < b and a in edges.get(b, set()):
                print(f"{crate}: {'::'.join(a) or 'lib'} <-> {'::'.join(b) or 'lib'}"); found = True
    # longer cycles (DFS), crate root excluded
    def dfs(node, stack, seen):
        for n in edges.get(node, ()):
            if n == (): continue
            if n in stack:
                cyc = stack[stack.index(n):]
                if len(cyc) > 2 and min(cyc) == n: print(f"{crate}: cycle " + " -> ".join("::".join(c) for c in cyc + [n]))
                continue
            if n in seen: continue
            dfs(n, stack + [n], seen)
        seen.add(node)
    seen = set()
    for m in list(edges):
        if m != (): dfs(m, [m], seen)
    if not found: print(f"{crate}: no pair of modules imports each other (crate root excluded)")
