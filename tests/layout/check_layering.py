#!/usr/bin/env python3
"""tests/layout/check_layering.py — the structure rules of docs/DESIGN.md,
"Layers and rooms", checked on the sources and on the built objects.

  1. Layers: a file includes only headers of its own room or of a room
     below it (RANKS below); rooms of one rank do not include each other,
     nor does a client's room include the server's folders, or the other way
     round (FORBIDDEN), and every source is in a room.
  2. No circle of headers: the include graph of the project's headers has
     no cycle.
  3. No circle of rooms through calls: every function or object one room of
     net/ or clients/ uses from another is defined in a room below it (nm of
     the built objects, when BUILDDIR has them: a declaration written by
     hand escapes rule 1, a call cannot escape this one).
  4. No production source over 900 lines (tests/ excluded).

Usage: check_layering.py [SRCDIR [BUILDDIR]] (make check passes both by
$TALLY_SRCDIR and the current directory). Prints each breach as
FILE: rule: what, and exits 1 when there is any.
"""
import os
import re
import subprocess
import sys

# Room -> rank. A file may include a header of a room of lower rank, or of
# its own room. Programs (tools/, relay/) are on top; tests/ is not checked.
RANKS = {
    "common": 0,
    "log": 1,
    "ledger": 2,
    # the client side: common/ only below it (FORBIDDEN)
    "clients/transport": 1,  # libtally's SP connections and pipes
    "clients/libtally": 2,   # libtally's core: the client, calls, events, streams
    "clients/inbox": 3,      # the subscriber-side inbox (in libtally.so, above its core)
    "clients/json": 3,       # objects and values as JSON and text (libtallyjson)
    "clients/cli": 4,        # the tally CLI
    "net/auth": 3,
    "net/cluster": 3,        # cluster mode's command stream: common/ and cnats only
    "net/ops": 4,
    "net/metrics": 5,
    "net/engine": 6,
    "net/sp": 7,
    "net/http": 7,
    "net/server": 8,
    "relay": 9,
    "tools": 9,
}
# Folders a folder's rooms never include, whatever the ranks: a client is
# not a server (it shares only common/ with tallyd), nor a server a client.
FORBIDDEN = {
    "clients": ("log", "ledger", "net"),
    "net": ("clients",),
    "ledger": ("clients",),
    "log": ("clients",),
}
LINES_MAX = 900
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def room_of(path):
    for room in sorted(RANKS, key=len, reverse=True):
        if path == room or path.startswith(room + "/"):
            return room
    return None


def folder_of(room):
    return room.split("/")[0]


def sources(src):
    out = []
    for top in sorted({room.split("/")[0] for room in RANKS}):
        base = os.path.join(src, top)
        for root, _, files in os.walk(base):
            for f in files:
                if f.endswith((".c", ".h")):
                    out.append(os.path.relpath(os.path.join(root, f), src))
    return sorted(out)


def check_includes(src, files, breaches):
    graph = {}
    for f in files:
        text = open(os.path.join(src, f), encoding="utf-8").read()
        lines = text.count("\n")
        if lines > LINES_MAX:
            breaches.append(f"{f}: size: {lines} lines (at most {LINES_MAX})")
        room = room_of(f)
        if room is None:
            breaches.append(f"{f}: rooms: in no room (RANKS)")
            graph[f] = []
            continue
        deps = []
        for inc in INCLUDE.findall(text):
            target = room_of(inc)
            if target is None:  # a header beside the file, or a system one
                continue
            deps.append(inc)
            if target == room:
                continue
            if folder_of(target) in FORBIDDEN.get(folder_of(room), ()):
                breaches.append(f"{f}: layers: includes {inc} ({folder_of(room)}/ never "
                                f"includes {folder_of(target)}/)")
            elif RANKS[target] >= RANKS[room]:
                breaches.append(f"{f}: layers: includes {inc}, a room not below {room}")
        graph[f] = deps
    return graph


def check_header_cycles(graph, breaches):
    state = {}

    def visit(node, trail):
        state[node] = 1
        for dep in graph.get(node, ()):
            if state.get(dep) == 1:
                cycle = trail[trail.index(dep):] + [dep] if dep in trail else [node, dep]
                breaches.append(f"{node}: circle: " + " -> ".join(cycle))
            elif dep not in state:
                visit(dep, trail + [dep])
        state[node] = 2

    for node in sorted(graph):
        if node.endswith(".h") and node not in state:
            visit(node, [node])


def nm_symbols(obj):
    out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "U":
            used.add(parts[1])
        elif len(parts) == 3 and parts[1] in "TDBRCtdbr" and parts[1].isupper():
            defined.add(parts[2])
    return defined, used


# The folders whose calls are checked, and the prefixes automake gives
# their objects (a library's, or a program's: the tally CLI).
OBJECT_PREFIXES = {
    "net": ("libtallynet_la-", "libtallycluster_la-"),
    "clients": ("libtally_la-", "libtallyjson_la-", "tally-"),
}


def object_of(build, f):
    d, b = os.path.split(f)
    for prefix in OBJECT_PREFIXES.get(folder_of(f), ()):
        for obj in (os.path.join(build, d, ".libs", prefix + b[:-2] + ".o"),
                    os.path.join(build, d, prefix + b[:-2] + ".o")):
            if os.path.exists(obj):
                return obj
    return None


def check_calls(build, files, breaches):
    objects = {}
    for f in files:
        obj = object_of(build, f) if f.endswith(".c") and room_of(f) else None
        if obj is not None:
            objects[f] = obj
    if not objects:
        return False
    owner, used_by = {}, {}
    for f, obj in objects.items():
        defined, used = nm_symbols(obj)
        for sym in defined:
            owner[sym] = f
        used_by[f] = used
    for f, used in sorted(used_by.items()):
        room = room_of(f)
        for sym in sorted(used):
            g = owner.get(sym)
            if g is None or room_of(g) == room:
                continue
            if folder_of(room_of(g)) in FORBIDDEN.get(folder_of(room), ()):
                breaches.append(f"{f}: calls: {sym} of {g} ({folder_of(room)}/ never "
                                f"calls {folder_of(room_of(g))}/)")
            elif RANKS[room_of(g)] >= RANKS[room]:
                breaches.append(f"{f}: calls: {sym} of {g}, a room not below {room}")
    return True


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("TALLY_SRCDIR", ".")
    build = sys.argv[2] if len(sys.argv) > 2 else "."
    files = sources(src)
    if not any(f.startswith("net/") for f in files):
        print(f"check_layering: no net/ under {src}", file=sys.stderr)
        return 1
    breaches = []
    graph = check_includes(src, files, breaches)
    check_header_cycles(graph, breaches)
    if not check_calls(build, files, breaches):
        print(f"check_layering: no objects of net/ or clients/ under {build}: "
              "calls not checked")
    for b in breaches:
        print(b)
    print(f"check_layering: {len(files)} files, {len(breaches)} breaches")
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())
