#!/usr/bin/env python3
"""The files of distlock/src that one acquisition and release run through.

Reads a callgrind output file of `lock-worker pairs URL KEY N` (scripts/acquire-path.sh)
and keeps the functions of distlock/src called at least N times (once per pair or more:
what runs once, at start-up, is left out). Prints those files by folder, then the calls
between files of different folders (a call through code outside distlock/src, a future's
poll or a drop made for
distlock's types, is followed through it), each pair of files once.

    scripts/acquire-path.py CALLGRIND_OUT N [ARCHITECTURE_TEST]

With ARCHITECTURE_TEST (distlock/tests/architecture.rs, whose LAYERS orders the folders
bottom to top), the calls from a lower folder to a higher one are counted: a future or a
callback of a higher layer that a lower one polls or calls.
"""

import collections
import re
import sys

NAMED = re.compile(r"^(fl|fi|fe|fn|cfl|cfi|cfn|ob|cob)=(?:\((\d+)\))?\s*(.*)$")


def parse(path):
    """Call edges (caller, callee) -> count, each function a (file, name) pair."""
    names = {}  # (kind class, id) -> text
    edges = collections.Counter()
    fl = fn = cfl = cfn = None

    def resolve(cls, ident, text):
        if ident is None:
            return text
        if text:
            names[(cls, ident)] = text
        return names.get((cls, ident), "")

    calls_pending = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            m = NAMED.match(line)
            if m:
                key, ident, text = m.groups()
                cls = "file" if key in ("fl", "fi", "fe", "cfl", "cfi") else key.lstrip("c")
                value = resolve(cls, ident, text)
                if key == "fl":
                    fl = value
                elif key == "fn":
                    fn = (fl, value)
                elif key in ("cfl", "cfi"):
                    cfl = value
                elif key == "cfn":
                    cfn = value
                continue
            if line.startswith("calls="):
                count = int(line.split("=", 1)[1].split()[0])
                calls_pending = count
                continue
            if calls_pending is not None:
                callee = ((cfl if cfl is not None else fl), cfn)
                edges[(fn, callee)] += calls_pending
                calls_pending = None
                cfl = None
    return edges


def folder(file):
    rel = file.split("/distlock/src/", 1)[1]
    return rel.split("/", 1)[0] if "/" in rel else "(crate root)"


def ours(func):
    return func[0] and "/distlock/src/" in func[0]


def main():
    out, n = sys.argv[1], int(sys.argv[2])
    edges = parse(out)
    called = collections.Counter()
    callees = collections.defaultdict(list)
    for (a, b), c in edges.items():
        called[b] += c
        callees[a].append((b, c))
    hot = {f for f, c in called.items() if ours(f) and c >= n}
    files = sorted({f[0].split("/distlock/src/", 1)[1] for f in hot})
    by_folder = collections.defaultdict(list)
    for f in files:
        by_folder[folder("/distlock/src/" + f)].append(f)
    print(f"{len(files)} files in {len(by_folder)} folders, {len(hot)} functions "
          f"called at least {n} times:")
    for d in sorted(by_folder):
        print(f"  {d}: {', '.join(sorted(by_folder[d]))}")

    # Calls between our hot functions, through at most 4 functions outside distlock/src.
    crossings = set()
    for a in hot:
        seen, frontier = set(), [(b, 0) for b, c in callees[a] if c >= n]
        while frontier:
            b, depth = frontier.pop()
            if b in seen:
                continue
            seen.add(b)
            if ours(b):
                if b in hot and folder(a[0]) != folder(b[0]):
                    crossings.add((a[0].split("/distlock/src/", 1)[1],
                                   b[0].split("/distlock/src/", 1)[1]))
                continue
            # Through glue made for distlock's own types only (a future's poll, a drop):
            # a function shared by all callers (formatting, the runtime's scheduler)
            # would join every caller to every callee.
            if depth < 4 and "distlock::" in b[1]:
                frontier.extend((x, depth + 1) for x, c in callees[b] if c >= n)
    folders = {(folder("/distlock/src/" + a), folder("/distlock/src/" + b)) for a, b in crossings}
    print(f"{len(crossings)} calls between files of different folders "
          f"({len(folders)} folder pairs):")
    layers = read_layers(sys.argv[3]) if len(sys.argv) > 3 else []
    for a, b in sorted(crossings):
        print(f"  {a} -> {b}")
    if layers:
        rank = {name: i for i, name in enumerate(layers)}
        up = [(a, b) for a, b in sorted(crossings)
              if rank.get(folder("/distlock/src/" + a), -1) < rank.get(folder("/distlock/src/" + b), -1)]
        print(f"{len(up)} of them up the layer order ({' < '.join(layers)}):")
        for a, b in up:
            print(f"  {a} -> {b}")


def read_layers(path):
    """The folder order of `const LAYERS` in the architecture test, if it has one."""
    try:
        text = open(path, encoding="utf-8").read()
    except OSError:
        return []
    m = re.search(r"const LAYERS: &\[&str\] = &\[(.*?)\];", text, re.S)
    return re.findall(r'"([a-z_]+)"', m.group(1)) if m else []


if __name__ == "__main__":
    main()
