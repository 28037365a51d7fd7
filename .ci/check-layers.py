#!/usr/bin/env python3
"""Checks that the crate's modules form layers: no module imports from a module above it.

`src/lib.rs` has a line `// Layers, bottom up: a < b < c`, naming every top-level module.
A module directory's `mod.rs` may have such a line too, naming its own submodules: then the
files inside it are held to that order as well (`command/` has one).

Every path that leaves a module counts, wherever it stands (use lines, grouped imports,
inline paths in code): `crate::x`, `super::x` and `super::super::x` (resolved against the
file's own place in the tree), and names the crate root or a layered `mod.rs` re-exports
(`use crate::Fleet;` is `crate::fleet::Fleet`). Comments, doc links, string literals and the
bodies of `#[cfg(test)]` modules do not count (tests may import from anywhere); code after a
test module does. A violation is an upward import; with none, an import cycle is impossible.

Usage: python3 .ci/check-layers.py [src]   (exit 1 on a violation, listing each one)
The checker's own tests: python3 .ci/test_check_layers.py
"""
import os
import re
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
LAYERS_LINE = re.compile(r"(?m)^//\s*Layers, bottom up:\s*(.+)$")


def strip(text):
    """The code that counts: no comments, string contents or `#[cfg(test)]` module bodies."""
    text = re.sub(r"(?s)/\*.*?\*/", " ", text)
    text = re.sub(r"(?m)//.*$", "", text)
    text = re.sub(r'b?"(?:\\.|[^"\\])*"', '""', text)
    out, at = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+" + IDENT + r"\s*\{", text):
        if m.start() < at:
            continue
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        out.append(text[at:m.start()])
        at = i
    out.append(text[at:])
    return "".join(out)


def use_tree(text, i):
    """Parses a path or grouped use-tree starting at text[i]; returns (paths, end)."""
    paths, segments = [], []
    while i < len(text):
        while i < len(text) and text[i].isspace():
            i += 1
        if i < len(text) and text[i] == "{":
            i += 1
            while True:
                while i < len(text) and text[i] in " \t\r\n,":
                    i += 1
                if i >= len(text) or text[i] == "}":
                    return [segments + p for p in paths] or [segments], i + 1
                sub, i = use_tree(text, i)
                paths.extend(sub)
        m = re.match(IDENT, text[i:])
        if not m:
            break
        segments.append(m.group(0))
        i += m.end()
        rest = re.match(r"\s*::\s*", text[i:])
        if not rest:
            break
        i += rest.end()
    return [segments], i


def module_path(rel):
    """`command/quote.rs` -> [command, quote]; `command/mod.rs` -> [command]; `lib.rs` -> []."""
    parts = rel[:-3].split(os.sep)
    if parts[-1] in ("mod", "lib"):
        parts = parts[:-1]
    return parts


def imports(text, here):
    """Absolute paths (segment lists) of every `crate::`, `super::` and `self::` path."""
    found = []
    for m in re.finditer(r"(?<![A-Za-z0-9_:])(crate|self|super)\s*::", text):
        base = [] if m.group(1) == "crate" else list(here) if m.group(1) == "self" else here[:-1]
        i = m.end()
        while True:
            more = re.match(r"\s*super\s*::", text[i:])
            if not more:
                break
            base = base[:-1]
            i += more.end()
        for path in use_tree(text, i)[0]:
            path = [p for p in path if p != "self"]
            found.append(base + path)
    return found


def reexports(text):
    """Names a facade re-exports, to the submodule they come from: `pub use x::{A, b};`."""
    names = {}
    for m in re.finditer(r"(?m)^\s*pub(?:\([a-z]+\))?\s+use\s+", text):
        for path in use_tree(text, m.end())[0]:
            if len(path) >= 2:
                names[path[-1]] = path[0]
    return names


def layers(text):
    line = LAYERS_LINE.search(text)
    return [name.strip() for name in line.group(1).split("<")] if line else None


def declared(text):
    return re.findall(r"(?m)^\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+(" + IDENT + r")\s*;", text)


def check(src):
    """Every violation in the tree at `src`, as lines of text."""
    problems = []
    read = lambda path: open(path, encoding="utf-8", errors="replace").read()
    raw_lib = read(os.path.join(src, "lib.rs"))
    facades = {(): (layers(raw_lib), reexports(strip(raw_lib)))}
    if facades[()][0] is None:
        return ["src/lib.rs has no `// Layers, bottom up: a < b < ...` line"]
    files = []  # (path relative to src, the code that counts)
    for dirpath, _, names in os.walk(src):
        for name in sorted(names):
            if name.endswith(".rs"):
                rel = os.path.relpath(os.path.join(dirpath, name), src)
                raw = read(os.path.join(src, rel))
                text = strip(raw)
                files.append((rel, text))
                order = layers(raw) if rel.endswith("mod.rs") else None
                if order:
                    facades[tuple(module_path(rel))] = (order, reexports(text))
    # Every layered facade names each of its submodules exactly once.
    for facade, (order, _) in facades.items():
        where = os.path.join(*facade, "mod.rs") if facade else "lib.rs"
        mods = declared([t for r, t in files if r == where][0])
        problems += [f"{where}: module `{m}` is missing from the layers line" for m in mods if m not in order]
        problems += [f"{where}: `{m}` is on the layers line but not declared" for m in order if m not in mods]
    for rel, text in files:
        here = module_path(rel)
        if not here or (here[0] in ("main", "bin")):
            continue  # the root, and binaries (crates of their own)
        for facade, (order, names) in facades.items():
            depth = len(facade)
            # Files below one of the facade's submodules; the facade's own file is exempt.
            if here[:depth] != list(facade) or len(here) <= depth:
                continue
            mine = here[depth]
            if mine not in order:
                continue
            for path in imports(text, here):
                if path[:depth] != list(facade) or len(path) <= depth:
                    continue
                target = path[depth]
                target = target if target in order else names.get(target)
                if target is None or target == mine or target not in order:
                    continue
                if order.index(target) > order.index(mine):
                    where = "crate" if not facade else "::".join(facade)
                    problems.append(
                        f"{rel}: `{mine}` imports `{'::'.join(['crate'] + path)}` from `{target}`, "
                        f"a higher layer of {where} ({' < '.join(order)})"
                    )
    return sorted(set(problems))


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "src"
    problems = check(src)
    for p in problems:
        print(p)
    raw_lib = open(os.path.join(src, "lib.rs"), encoding="utf-8").read()
    print(f"layers: {' < '.join(layers(raw_lib) or [])}; upward imports: {len(problems)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
