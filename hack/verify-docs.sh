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
import os, re, shlex, subprocess, sys

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
    # A subtest path (`TestX/case`) names TestX.
    for name in set(re.findall(r"`((?:Test|Fuzz)[A-Z]\w*)(?:/[^`]*)?`", text)):
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
field_names = {"blockOwnerDeletion", "deletionTimestamp", "foregroundDeletion", "generateName", "managedFields",
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
        m = re.match(r"^(\s*)(```|~~~)\s*([\w-]*)", lines[i])
        if not m:
            i += 1
            continue
        fence, lang, start = m.group(2), m.group(3).lower(), i
        lang = {"golang": "go", "shell": "sh", "zsh": "sh", "bash": "sh", "shell-session": "console"}.get(lang, lang)
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
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
        # Tests they run (-run 'TestA|TestB') must exist too.
        if lang in ("sh", "console"):
            targets = set(re.findall(r"^([\w-]+):", open("Makefile", encoding="utf-8").read(), re.M))
            for line in block:
                cmd = line[2:] if lang == "console" and line.startswith("$ ") else line
                if lang == "console" and not line.startswith("$ "):
                    continue
                cmd = cmd.split(" #", 1)[0]  # not the comment
                for script in re.findall(r"(?<![\w/.])(?:\./)?(hack/[\w./-]*\w)", cmd):
                    if not os.path.exists(script):
                        print(f"{md}:{start + 1}: runs missing {script}")
                        bad += 1
                for rest in re.findall(r"\bmake (.*)", cmd):
                    try:
                        args = shlex.split(rest)
                    except ValueError:
                        args = rest.split()
                    for target in args:
                        if target in ("|", ";", "&&", "||"):
                            break
                        if target.startswith("-") or "=" in target:
                            continue
                        if target not in targets:
                            print(f"{md}:{start + 1}: runs missing make target {target}")
                            bad += 1
                for name in re.findall(r"\b((?:Test|Fuzz)[A-Z]\w*)", cmd):
                    if name not in funcs:
                        print(f"{md}:{start + 1}: runs missing test {name}")
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
# Keys come from the call or from the logger it was given (LoggerWithValues).
context_keys = set()
for g in sum(ours.values(), []):
    for line in open(g, encoding="utf-8"):
        if "WithValues(" in line:
            context_keys.update(re.findall(r'"(\w+)"', line))
for md in files:
    for n, line in enumerate(open(md, encoding="utf-8"), 1):
        for base, msg, rest in re.findall(r"\b([a-z_]+\.go):\d+\] \"((?:[^\"\\]|\\.)*)\"(.*)", line):
            if base not in ours:
                continue  # client-go's own (reflector.go, round_trippers.go, ...)
            lit = '"' + msg + '"'
            # In code, not in a comment: the line with the message, and
            # the next few of the same call, hold its keys.
            calls = []
            for g in ours[base]:
                src = open(g, encoding="utf-8").read().split("\n")
                for k, l in enumerate(src):
                    if lit in l and not l.strip().startswith("//"):
                        calls.append("\n".join(src[k:k + 4]))
            if not calls:
                print(f"{md}:{n}: log line from {base} with a message it no longer logs: {msg}")
                bad += 1
                continue
            for key in re.findall(r"(?:^|\s)(\w+)=", rest):
                if key not in context_keys and not any(f'"{key}"' in c for c in calls):
                    print(f"{md}:{n}: log line from {base}: {msg!r} is no longer logged with {key}=")
                    bad += 1

if bad:
    sys.stdout.flush()
    sys.exit(f"verify-docs: {bad} broken reference(s)")
print(f"verify-docs: {len(files)} Markdown files, all relative links and code references resolve, {quotes} quoted snippets match")
PY

# The line counts docs/how-it-works.md prints for the reading path of one
# sync are the files' own.
"${REPO_ROOT}/hack/lesson-size.sh" --check >/dev/null
