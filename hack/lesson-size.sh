#!/usr/bin/env bash
# Prints the size of the lesson, beside issue 40's targets: what a reader
# must read to follow one sync of one Foo (the files docs/how-it-works.md's
# "What to read" table names), the root package's non-test Go, the
# Controller struct's fields, syncHandler's length and the longest root
# function. With --check, fails when the table's line counts are not the
# files' own (hack/verify-docs.sh runs it so); a target missed is printed,
# not failed. With --write, puts the files' own counts in the table.
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO_ROOT}"

python3 - "$@" <<'PY'
import glob, re, sys

check = "--check" in sys.argv[1:]
write = "--write" in sys.argv[1:]
bad = []   # the page is wrong: fails --check
over = []  # a target missed: printed

def lines(path):
    with open(path, encoding="utf-8") as f:
        return sum(1 for _ in f)

# The reading path: the rows of the "What to read" table that link a .go
# file, with the line count the page prints.
page = "docs/how-it-works.md"
text = open(page, encoding="utf-8").read()
m = re.search(r"^## What to read\n(.*?)(?=^## )", text, re.M | re.S)
if not m:
    sys.exit(f"{page}: no '## What to read' section")
rows = re.findall(r"^\| \[`([^`]+)`\]\(\.\./([^)]+\.go)\) \|.*\| ([\d,]+) \|$", m.group(1), re.M)
total_row = re.search(r"^\| \*\*(\d+) Go files\*\* \|.*\| \*\*([\d,]+)\*\* \|$", m.group(1), re.M)
if not rows or not total_row:
    sys.exit(f"{page}: the 'What to read' table has no file rows or no total row")
def read_total_now():
    return sum(lines(p) for _, p, _ in rows)

read_total = 0
print("One sync of one Foo, from the README (docs/how-it-works.md, \"What to read\"):")
for name, path, printed in rows:
    n = lines(path)
    read_total += n
    note = "" if int(printed.replace(",", "")) == n else f"   <- the page says {printed}"
    if note:
        bad.append(f"{page}: {path} has {n} lines, the table says {printed}")
    print(f"  {path:32} {n:5}{note}")
files, printed_total = int(total_row.group(1)), int(total_row.group(2).replace(",", ""))
if write:
    section = m.group(1)
    for name, path, printed in rows:
        section = re.sub(r"^(\| \[`" + re.escape(name) + r"`\]\(\.\./" + re.escape(path) + r"\) \|.*\| )[\d,]+( \|)$",
                         lambda mm: f"{mm.group(1)}{lines(path):,}{mm.group(2)}", section, flags=re.M)
    section = re.sub(r"^\| \*\*\d+ Go files\*\* \|(.*)\| \*\*[\d,]+\*\* \|$",
                     lambda mm: f"| **{len(rows)} Go files** |{mm.group(1)}| **{read_total_now():,}** |", section, flags=re.M)
    text = text[:m.start(1)] + section + text[m.end(1):]
    open(page, "w", encoding="utf-8").write(text)
    bad = [b for b in bad if not b.startswith(page)]
    files, printed_total = len(rows), read_total
if files != len(rows) or printed_total != read_total:
    bad.append(f"{page}: the total row says {files} files, {printed_total:,} lines; the rows add up to {len(rows)}, {read_total:,}")
print(f"  {len(rows)} Go files, {read_total:,} lines (target: at most 8 files, 1,500 lines)")
if len(rows) > 8 or read_total > 1500:
    over.append(f"the reading path is {len(rows)} files, {read_total:,} lines: over 8 files or 1,500 lines")

root = sorted(p for p in glob.glob("*.go") if not p.endswith("_test.go"))
root_lines = sum(lines(p) for p in root)
print(f"Root package, non-test Go: {root_lines:,} lines in {len(root)} files (target: at most 1,800)")
if root_lines > 1800:
    over.append(f"root package: {root_lines:,} non-test lines, over 1,800")

src = {p: open(p, encoding="utf-8").read() for p in root}
ctrl = re.search(r"^type Controller struct \{\n(.*?)^\}", src.get("controller.go", ""), re.M | re.S)
fields = 0
if ctrl:
    for line in ctrl.group(1).split("\n"):
        line = line.strip()
        if line and not line.startswith("//"):
            fields += len(line.split()[0].split(",")) if "," in line.split()[0] else 1
print(f"Controller struct: {fields} fields (target: at most 12)")
if fields > 12:
    over.append(f"Controller has {fields} fields, over 12")

longest, sync_len = ("", 0), 0
for p, s in src.items():
    for fm in re.finditer(r"^func (?:\([^)]*\) )?(\w+)[^\n]*\{\n(.*?)^\}", s, re.M | re.S):
        n = fm.group(0).count("\n") + 1
        if n > longest[1]:
            longest = (f"{p}: {fm.group(1)}", n)
        if fm.group(1) == "syncHandler":
            sync_len = n
print(f"syncHandler: {sync_len} lines; longest root function: {longest[0]}, {longest[1]} lines (target: about 80)")
if longest[1] > 90:
    over.append(f"{longest[0]} is {longest[1]} lines, over about 80")

for o in over:
    print("lesson-size: over a target: " + o)
for b in bad:
    print("lesson-size: " + b, file=sys.stderr)
if bad and check:
    sys.exit(1)
PY
