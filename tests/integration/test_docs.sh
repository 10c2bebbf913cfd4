#!/usr/bin/env bash
# The documentation's links and promises: every relative link and #anchor
# in README.md, docs/*.md and tools/python/README.md leads somewhere that
# exists (a moved section breaks this, not a reader); the README's common
# options are rows of docs/REFERENCE.md's full table, word for word but
# for where their links point; and the README's two commands are the ones
# the Makefile has and .ci/run runs.  No mount: it reads files only.
source "$(dirname "$0")/lib.sh"
DOCS=(README.md docs/*.md tools/python/README.md)

check "every relative link and anchor in ${DOCS[*]} resolves" $PY - "${DOCS[@]}" <<'PY'
import os, re, sys
def slug(h):   # GitHub's heading anchors
    return re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
def anchors(path):
    out, fence = set(), False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            fence = not fence
        elif not fence and line.startswith("#"):
            out.add(slug(line.lstrip("#")))
    return out
bad, n = [], 0
for f in sys.argv[1:]:
    text = re.sub(r"```.*?```", "", open(f, encoding="utf-8").read(), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        n += 1
        path, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
        if not os.path.exists(dest):
            bad.append(f"{f}: {target}: no such file")
        elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
            bad.append(f"{f}: {target}: no such heading in {dest}")
assert n > 50 and not bad, "\n".join(bad) or n
PY

check "the README's common options are rows of REFERENCE.md's table" $PY - <<'PY'
import re
def rows(path, heading):
    text = open(path, encoding="utf-8").read()
    part = text[text.index(heading):]
    part = part[:part.index("\n## ", 1) if "\n## " in part[1:] else len(part)]
    unlink = lambda r: re.sub(r"\]\([^)]*\)", "]", r)
    return [unlink(l) for l in part.splitlines() if l.startswith("| `-")]
common = rows("README.md", "## Common options")
full = rows("docs/REFERENCE.md", "## Mount options")
assert len(common) >= 10, common
missing = [r for r in common if r not in full]
assert not missing, missing
PY

check "the README's two commands are the Makefile's, and .ci/run runs the second" bash -c '
	grep -q "^make demo  " README.md && grep -q "^make test-deps python-deps test  " README.md &&
	grep -q "^demo: deps" Makefile && grep -q "^test-deps: " Makefile &&
	grep -qx "make test-deps python-deps test" .ci/run'
t_end
