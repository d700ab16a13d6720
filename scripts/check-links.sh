#!/usr/bin/env bash
# Checks every relative link of README.md and docs/*.md: the file it names exists, and its
# `#anchor` (also a bare `#anchor` within the page) names a heading of that file, with
# GitHub's anchor rules (lower case; spaces to `-`; punctuation other than `-` and `_`
# dropped). External links (http:, https:, mailto:) are not fetched. Exit 1 on a broken
# link, each named with its file and line.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
exec python3 - README.md docs/*.md <<'PY'
import os, re, sys

def anchors(path, cache={}):
    if path not in cache:
        seen, out, fence = {}, set(), False
        for line in open(path, encoding="utf-8"):
            if line.lstrip().startswith("```"):
                fence = not fence
                continue
            m = None if fence else re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(2))
            slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
        cache[path] = out
    return cache[path]

bad = 0
for page in sys.argv[1:]:
    fence = False
    for no, line in enumerate(open(page, encoding="utf-8"), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        line = re.sub(r"`[^`]*`", "", line)  # code spans are not links
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if re.match(r"^[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            path = os.path.normpath(os.path.join(os.path.dirname(page), file)) if file else page
            if not os.path.exists(path):
                print(f"{page}:{no}: {target}: no file {path}")
                bad += 1
            elif anchor and (not path.endswith(".md") or anchor not in anchors(path)):
                print(f"{page}:{no}: {target}: no heading #{anchor} in {path}")
                bad += 1
print(f"check-links: {len(sys.argv) - 1} pages, {bad} broken link(s)")
sys.exit(1 if bad else 0)
PY
