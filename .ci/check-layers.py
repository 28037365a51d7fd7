#!/usr/bin/env python3
"""Checks that the crate's top-level modules form layers: every `crate::<module>` path in a
module's files (use lines and inline paths alike, outside comments and `#[cfg(test)] mod
tests`) names a module listed *before* it on the `// Layers, bottom up:` line of
`src/lib.rs`. A violation is an upward import; with none, an import cycle is impossible.
Every top-level module must be on that line.

Usage: python3 .ci/check-layers.py [src]   (exit 1 on a violation, listing each one)
"""
import os
import re
import sys

src = sys.argv[1] if len(sys.argv) > 1 else "src"


def strip(text):
    # Test modules may import from anywhere; comments and doc links are not imports.
    text = re.sub(r"(?s)#\[cfg\(test\)\]\s*mod tests\s*\{.*", "", text)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)  # string literals
    return re.sub(r"(?m)//.*$", "", text)


def crate_paths(text):
    """First path segments after `crate::`, including each item of a grouped import."""
    found = set(re.findall(r"\bcrate::([a-z_][a-z0-9_]*)", text))
    for m in re.finditer(r"\bcrate::\{", text):
        depth, i, item_start = 1, m.end(), True
        while i < len(text) and depth:
            ch = text[i]
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 1:
                item_start = True
            elif depth == 1 and item_start and (ch.isalpha() or ch == "_"):
                word = re.match(r"[A-Za-z_][A-Za-z0-9_]*", text[i:]).group(0)
                if word[0].islower() and word != "self":
                    found.add(word)
                item_start = False
                i += len(word)
                continue
            i += 1
    return found


raw_lib = open(os.path.join(src, "lib.rs"), encoding="utf-8").read()
declared = re.findall(
    r"(?m)^\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;", strip(raw_lib)
)
line = re.search(r"(?m)^//\s*Layers, bottom up:\s*(.+)$", raw_lib)
if not line:
    print("src/lib.rs has no `// Layers, bottom up: a < b < ...` line")
    sys.exit(1)
order = [name.strip() for name in line.group(1).split("<")]
layer = {name: i for i, name in enumerate(order)}

problems = [f"lib.rs: module `{m}` is missing from the layers line" for m in declared if m not in layer]
problems += [f"lib.rs: `{m}` is on the layers line but not declared" for m in order if m not in declared]
for dirpath, _, files in os.walk(src):
    for f in sorted(files):
        if not f.endswith(".rs"):
            continue
        path = os.path.join(dirpath, f)
        rel = os.path.relpath(path, src)
        top = rel.split(os.sep)[0]
        top = top[:-3] if top.endswith(".rs") else top
        if top in ("lib", "main", "bin"):  # binaries are crates of their own
            continue
        if top not in layer:
            problems.append(f"{rel}: module `{top}` is not declared in lib.rs")
            continue
        text = strip(open(path, encoding="utf-8", errors="replace").read())
        for target in sorted(crate_paths(text)):
            if target == top or target not in layer:
                continue
            if layer[target] > layer[top]:
                problems.append(
                    f"{rel}: `{top}` imports `crate::{target}`, a higher layer "
                    f"(lib.rs order: {' < '.join(order)})"
                )

for p in problems:
    print(p)
print(f"layers: {' < '.join(order)}; upward imports: {len(problems)}")
sys.exit(1 if problems else 0)
