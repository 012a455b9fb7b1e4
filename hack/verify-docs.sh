#!/usr/bin/env bash
# Checks that the documentation points at things that exist: every relative
# link in a Markdown file resolves to a file or directory in the repository,
# every "#heading" anchor into a Markdown file matches a heading there,
# every test (`TestX`, `FuzzX`) or package identifier (`plan.X`) named
# in backquotes exists in the Go code, and so does every lower-camel-case
# name in backquotes outside code blocks (`syncHandler`, `handleErr`), unless
# it is an API field name (see below); that every code block marked
# "<!-- quote: PATH -->" still appears in PATH, and every Go block is such
# a quote or marked "<!-- example -->"; that shell blocks run only scripts
# and make targets that exist; and that a klog line quoted from one of our
# files carries a message that file still logs. (External https:// links
# are not checked: CI has no internet.)
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO_ROOT}"

python3 - "$@" <<'PY'
import os, re, subprocess, sys

files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"],
                       capture_output=True, text=True, check=True).stdout.split()
link = re.compile(r'\[[^\]]*\]\(([^)\s]+)\)')

def anchors(path):
    out = set()
    in_code = False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("#"):
            continue
        title = line.lstrip("#").strip().lower()
        slug = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
        out.add(slug)
    return out

bad = 0
for md in files:
    text = open(md, encoding="utf-8").read()
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # links in code blocks are examples
    for target in link.findall(text):
        if re.match(r"^[a-z]+://", target) or target.startswith("mailto:"):
            continue
        path, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
        if not os.path.exists(dest):
            print(f"{md}: link to missing {target}")
            bad += 1
            continue
        if anchor and dest.endswith(".md") and anchor.lower() not in anchors(dest):
            print(f"{md}: link to missing heading {target}")
            bad += 1
# Code the docs name must exist: test functions (`TestX`, `FuzzX`) and
# identifiers of our packages (`plan.X`).
go_files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.go"],
                          capture_output=True, text=True, check=True).stdout.split()
funcs = {}
for g in go_files:
    pkg = os.path.basename(os.path.dirname(g)) or "main"
    for m in re.finditer(r"^(?:func(?: \([^)]*\))?|type|var|const)\s+(\w+)", open(g, encoding="utf-8").read(), re.M):
        funcs.setdefault(m.group(1), set()).add(pkg)
    for m in re.finditer(r"^\t(\w+)\s", open(g, encoding="utf-8").read(), re.M):  # in const/var blocks
        funcs.setdefault(m.group(1), set()).add(pkg)
pkgs = {os.path.basename(os.path.dirname(g)) for g in go_files}
for md in files:
    text = open(md, encoding="utf-8").read()
    for name in set(re.findall(r"`((?:Test|Fuzz)[A-Z]\w*)`", text)):
        if name not in funcs:
            print(f"{md}: names missing test {name}")
            bad += 1
    for pkg, name in set(re.findall(r"`(\w+)\.([A-Z]\w*)`", text)):
        if pkg in pkgs and pkg not in funcs.get(name, set()):
            print(f"{md}: names missing {pkg}.{name}")
            bad += 1

# Lower-camel-case names in backquotes are either our Go identifiers
# (functions, methods, types, variables, constants, struct fields) or API
# field names. A field name passes if our types declare it (a json tag), a
# manifest in the repository uses it as a key, or it is one of the
# Kubernetes names below; anything else must be declared in the Go code, so
# that renaming a function breaks the docs that name it. Code blocks are
# skipped: they hold examples, such as the new code in adding-a-field.md.
field_names = {"blockOwnerDeletion", "deletionTimestamp", "foregroundDeletion", "managedFields",
             "ownerReferences", "resourceVersion", "scaleTargetRef"}
for g in go_files:
    for m in re.finditer(r'json:"(\w+)', open(g, encoding="utf-8").read()):
        field_names.add(m.group(1))
yaml_files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.yaml", "*.yml"],
                            capture_output=True, text=True, check=True).stdout.split()
for y in yaml_files:
    for m in re.finditer(r"^[\s-]*(\w+):", open(y, encoding="utf-8").read(), re.M):
        field_names.add(m.group(1))
for md in files:
    text = re.sub(r"```.*?```", "", open(md, encoding="utf-8").read(), flags=re.S)
    for name in sorted(set(re.findall(r"`([a-z][a-z0-9]*[A-Z]\w*)`", text))):
        if name not in funcs and name not in field_names:
            print(f"{md}: names missing {name}")
            bad += 1

# Code quoted from the repository must still be there. A fenced block right
# after a "<!-- quote: PATH -->" line is a quote of PATH: its lines must
# appear in PATH in order and next to each other, compared without leading
# and trailing whitespace, except where a line "// …" (or "# …") marks an
# elision. A Go block must be a quote, or say "<!-- example -->" to be
# taken as new code that exists nowhere yet. So a page cannot go on
# showing code that has changed or gone.
def quote_fragments(block):
    frags, cur = [], []
    for line in block:
        if line.strip() in ("// …", "# …", "…"):
            frags.append(cur)
            cur = []
        else:
            cur.append(line.strip())
    frags.append(cur)
    return [f for f in frags if f]

def find_in_order(frags, lines):
    """None if every fragment is found, in order; else the first quoted
    line that differs, at the place where most of its fragment matched."""
    pos = 0
    for frag in frags:
        best, best_at = -1, pos
        for i in range(pos, len(lines)):
            n = 0
            while n < len(frag) and i + n < len(lines) and lines[i + n] == frag[n]:
                n += 1
            if n == len(frag):
                pos = i + n
                break
            if n > best:
                best, best_at = n, i
        else:
            return frag[max(best, 0)], best_at + max(best, 0) + 1
    return None

quotes = 0
for md in files:
    lines = open(md, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)```(\w*)", lines[i])
        if not m:
            i += 1
            continue
        lang, start = m.group(2), i
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith("```"):
            j += 1
        block = lines[start + 1:j]
        prev = next((lines[k].strip() for k in range(start - 1, -1, -1) if lines[k].strip()), "")
        q = re.match(r"^<!-- quote: (\S+) -->$", prev)
        if q:
            src = q.group(1)
            if not os.path.isfile(src):
                print(f"{md}:{start + 1}: quotes missing file {src}")
                bad += 1
            else:
                have = [l.strip() for l in open(src, encoding="utf-8").read().split("\n")]
                missing = find_in_order(quote_fragments(block), have)
                if missing is not None:
                    line, near = missing
                    where = f" (the lines before it match, up to {src}:{near - 1})" if near > 1 and have[near - 2] != "" else ""
                    print(f"{md}:{start + 1}: quote no longer in {src}: {line!r} is not there{where}")
                    bad += 1
                quotes += 1
        elif lang == "go" and prev != "<!-- example -->":
            print(f"{md}:{start + 1}: a Go block must be a quote (<!-- quote: PATH -->) or an <!-- example -->")
            bad += 1
        # Commands in shell blocks must name scripts and make targets that exist.
        if lang in ("sh", "console", "bash"):
            targets = set(re.findall(r"^([\w-]+):", open("Makefile", encoding="utf-8").read(), re.M))
            for line in block:
                cmd = line[2:] if lang == "console" and line.startswith("$ ") else line
                if lang == "console" and not line.startswith("$ "):
                    continue
                for script in re.findall(r"(?<![\w/.])(hack/[\w./-]+\.(?:sh|py))", cmd):
                    if not os.path.isfile(script):
                        print(f"{md}:{start + 1}: runs missing {script}")
                        bad += 1
                for t in re.findall(r"\bmake((?: [\w-]+(?=\s|$))+)", cmd):
                    for target in t.split():
                        if "=" not in target and target not in targets:
                            print(f"{md}:{start + 1}: runs missing make target {target}")
                            bad += 1
        i = j + 1

# Log excerpts must come from the code as it is: in a klog line
# `file.go:NN] "Message"`, when file.go is one of ours, the message must
# still be logged in that file (the line number is the capture's, and is
# not checked). This catches excerpts from before a file was split.
ours = {}
for g in go_files:
    if g.endswith("_test.go") or g.startswith("pkg/generated/") or os.path.basename(g).startswith("zz_generated"):
        continue
    ours.setdefault(os.path.basename(g), []).append(g)
for md in files:
    for n, line in enumerate(open(md, encoding="utf-8"), 1):
        for base, msg in re.findall(r"\b([a-z_]+\.go):\d+\] \"((?:[^\"\\]|\\.)*)\"", line):
            if base not in ours:
                continue  # client-go's own (reflector.go, round_trippers.go, ...)
            lit = '"' + msg + '"'
            if not any(lit in open(g, encoding="utf-8").read() for g in ours[base]):
                print(f"{md}:{n}: log line from {base} with a message it no longer logs: {msg}")
                bad += 1

if bad:
    sys.stdout.flush()
    sys.exit(f"verify-docs: {bad} broken reference(s)")
print(f"verify-docs: {len(files)} Markdown files, all relative links and code references resolve, {quotes} quoted snippets match")
PY
