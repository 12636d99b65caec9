#!/usr/bin/env bash
# The product check: tracked text files speak of what the product does, not of how the work on it
# was organised. It reports lines that hold a dated work diary (a dated heading; a date outside the
# figures of README.md and docs/BENCH.md), a numbered or current work sitting, diary wording, an
# issue number without its project or URL, or the lent machines figures were taken on instead of
# the GPU model. tests/fixtures/product-words/bad holds an example of each; good/ the look-alikes
# that pass.
# Skipped: binary files, data files (.json, .jsonl, ...), tests/golden/, this script and its fixture.
# A line holding "product-words: allow" is skipped.
# Usage: scripts/check-product-words.sh [ROOT]   checks ROOT's files that git tracks or would track (default:
#                                                 this repository; a folder outside git: every file under it);
#                                                 exit 1 on a hit
#        scripts/check-product-words.sh --self-test   runs the check on tests/fixtures/product-words:
#                                                 every line under bad/ must be reported, none under good/
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)

check() {  # check ROOT: prints every hit as file:line: text: rule; fix: ...; returns 1 when there is one
  python3 - "$1" <<'PY'
import os, re, subprocess, sys

root = os.path.abspath(sys.argv[1])
SKIP_DIRS = ("tests/golden/", "tests/fixtures/product-words/", ".git/")
SKIP_FILES = {"scripts/check-product-words.sh"}
DATA_EXT = {".json", ".jsonl", ".safetensors", ".bin", ".png", ".jpg", ".jpeg", ".gif", ".pdf", ".gz",
            ".tgz", ".tar", ".zip", ".xz", ".zst", ".parquet", ".arrow", ".npy", ".npz", ".pt", ".pth",
            ".whl", ".so", ".a", ".o"}
FIGURE_FILES = {"README.md", "docs/BENCH.md"}  # where a measured figure's date may stand beside it
HISTORY = "say what the product does; history lives in git"

def listed_files():
    try:
        top = subprocess.run(["git", "-C", root, "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, check=True).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        top = ""
    if top and os.path.samefile(top, root):
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, check=True).stdout
        return sorted(p for p in out.decode("utf-8", "surrogateescape").split("\0") if p)
    files = []
    for d, dirs, names in os.walk(root):
        dirs[:] = [x for x in dirs if x != ".git"]
        for n in names:
            files.append(os.path.relpath(os.path.join(d, n), root).replace(os.sep, "/"))
    return sorted(files)

ORD = ("first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|"
       "fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth|thirtieth|fortieth|fiftieth")
COMPOUND = "(?:twenty|thirty|forty|fifty)-(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth)"
I = re.IGNORECASE
DATE = re.compile(r"\b(?:19|20)\d\d-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])\b")
MD_HEADING = re.compile(r"^\s{0,3}#{1,6}\s")
RULES = [  # (pattern, what it is, fix)
    (re.compile(r"\b(?:%s|%s|\d+(?:st|nd|rd|th)|this|last|next|previous|earlier|later)\s+sessions?\b"
                % (COMPOUND, ORD), I), "a work session", HISTORY),
    (re.compile(r"\bsessions?\s+of\s+(?:the\s+)?work\b|\b(?:last|next|previous|past)\s+(?:two|three|four|"
                r"five|few|several|\d+)\s+sessions\b|\bsession\s+\d+\b", I), "a work session", HISTORY),
    (re.compile(r"\byesterday\b|\b(?:we|I)\s+(?:tried|attempted|decided|agreed)\b|\bwork diary\b|\(no log\)", I),
     "diary wording", HISTORY),
    (re.compile(r"\bnvidia-h\d{3}(?:-x\d+)?\b", I), "a machine kind of the lending tool",
     "name the GPU model (H100, H200 SXM), not the kind it was lent as"),
    (re.compile(r"\bdevice[- ]tool\b|\bdevice machines?\b|\bGPU machines?\b|\bdevice calls?\b|\bGPU calls?\b|"
                r"\b(?:minutes|seconds|hours)\s+of\s+device\s+time\b|\blent\b|\blending\b|\bH\d00 machines?\b|\bmachines?\s+[A-E]\b(?!-)|"
                r"\b(?:fresh|warm)\s+(?:machine|H\d00)s?\b"),
     "the machine a figure was taken on", "name the GPU model (H100, H200 SXM); say what was measured, not where"),
]
RULES += [
    (re.compile(r"\bcalls?\s+\d+\b", I), "a numbered run on a lent machine (a device call)",
     "say what was measured and on which GPU model, not in which call"),
    (re.compile(r"\bdocs/logs\b|\bmutants-last-run\b"), "a run log that is no longer in the tree",
     "cite the result lines in docs/results/ (or the commit in git history)"),
]
ISSUE = re.compile(r"\b(issues?)\s*(#?)\s*\d+\b", I)
NOUN_BEFORE = re.compile(r"(?:^|[(\[#:;,.]|\b(?:the|a|an|this|that|see|per|for|of|in|on|at|by|from|to|and|or|with|"
                         r"its|our|their|as|since|after|before|under|fixed|fixes|closes))\s*$", I)
NOUN_AFTER = re.compile(r"^(?:\s*(?:$|[):,;.'\u2019\]]|\((?!\w+\s)|-|\u2014)|\s+(?:items?|on|in|and|or|of|for|at|is|was|says|"
                        r"asks|names|reports)\b)", I)
STOP = {"the", "a", "an", "this", "that", "see", "per", "for", "of", "in", "on", "at", "by", "from", "to", "and",
        "or", "with", "its", "our", "their", "same", "open", "closed", "project", "github", "gitlab", "an", "as",
        "after", "before", "since", "until", "fixed", "fixes", "fix", "closes", "close", "under", "into"}

def issue_ok(prefix):
    if re.search(r"https?://|github\.com|gitlab\.com", prefix, I):
        return True
    m = re.search(r"([A-Za-z0-9_.+/-]+?)(?:'s)?[\s(\[]*$", prefix)
    if not m or not m.group(1):
        return False
    word = m.group(1)
    if word.lower() in STOP:
        return False
    return bool(re.search(r"[A-Z0-9./]", word))

def excerpt(line, start, end):
    text = line.strip()
    if len(text) <= 140:
        return text
    lead = len(line) - len(line.lstrip())
    a = max(0, start - lead - 60)
    b = min(len(text), end - lead + 60)
    return ("..." if a > 0 else "") + text[a:b] + ("..." if b < len(text) else "")

def hits_in(rel, text):
    md = rel.endswith(".md")
    for n, line in enumerate(text.split("\n"), 1):
        if "product-words: allow" in line:
            continue
        found = None
        d = DATE.search(line)
        if d and md and MD_HEADING.match(line):
            found = (d, "a dated work-diary heading",
                     "name what the section holds; a measured figure's date goes beside the figure")
        elif d and rel not in FIGURE_FILES:
            found = (d, "a dated work record",
                     HISTORY + " (a measured figure's date belongs beside it in docs/BENCH.md)")
        if not found:
            for pat, what, fix in RULES:
                m = pat.search(line)
                if m:
                    found = (m, what, fix)
                    break
        if not found:
            for m in ISSUE.finditer(line):
                plural = m.group(1).lower() == "issues"  # "the forward issues 80 loads": a verb
                noun = (m.group(2) or NOUN_BEFORE.search(line[:m.start()])
                        or (not plural and NOUN_AFTER.search(line[m.end():])))
                if noun and not issue_ok(line[:m.start()]):
                    found = (m, "an issue number without its project",
                             "name the project and link the issue (vLLM issue 123, https://...), or " + HISTORY)
                    break
        if found:
            m, what, fix = found
            yield n, excerpt(line, m.start(), m.end()), what, fix

bad = 0
for rel in listed_files():
    if rel in SKIP_FILES or rel.startswith(SKIP_DIRS) or os.path.splitext(rel)[1].lower() in DATA_EXT:
        continue
    path = os.path.join(root, rel)
    if not os.path.isfile(path) or os.path.islink(path):
        continue
    with open(path, "rb") as f:
        raw = f.read()
    if b"\0" in raw[:8192]:
        continue
    for n, text, what, fix in hits_in(rel, raw.decode("utf-8", "replace")):
        print(f"{rel}:{n}: {text}: {what}; fix: {fix}")
        bad = 1
sys.exit(bad)
PY
}

self_test() {  # every line of the fixture's bad/ tree reported, none of good/ (plus a binary file)
  local fixture="$repo/tests/fixtures/product-words" tmp out rc line file n missing=0
  [ -d "$fixture/bad" ] && [ -d "$fixture/good" ] ||
    { echo "check-product-words self-test: no fixture at $fixture" >&2; return 1; }
  tmp=$(mktemp -d) || return 1
  trap 'rm -rf "$tmp"' RETURN
  cp -r "$fixture/bad" "$fixture/good" "$tmp/"
  printf 'ELF\0\0binary: the twelfth session on nvidia-h200-x2\n' >"$tmp/good/blob.bin.data"
  out=$(check "$tmp/good"); rc=$?
  [ $rc -eq 0 ] && [ -z "$out" ] ||
    { echo "check-product-words self-test: false alarms on good/ (rc=$rc):" >&2; echo "$out" >&2; return 1; }
  out=$(check "$tmp/bad"); rc=$?
  [ $rc -eq 1 ] || { echo "check-product-words self-test: bad/ passed (rc=$rc)" >&2; return 1; }
  while IFS= read -r file; do
    n=0
    while IFS= read -r line || [ -n "$line" ]; do
      n=$((n + 1))
      [ -n "${line//[[:space:]]/}" ] || continue
      if ! grep -q "^${file//./\\.}:$n: .*; fix: " <<<"$out"; then
        echo "check-product-words self-test: not reported: bad/$file:$n: $line" >&2
        missing=1
      fi
    done <"$tmp/bad/$file"
  done < <(cd "$tmp/bad" && find . -type f | sed 's|^\./||' | sort)
  [ $missing -eq 0 ] || return 1
  echo "check-product-words self-test: ok ($(wc -l <<<"$out") bad lines reported, none of good/)"
}

if [ "${1:-}" = "--self-test" ]; then
  self_test
  exit $?
fi
root=${1:-$repo}
[ -d "$root" ] || { echo "check-product-words: no folder $root" >&2; exit 2; }
if check "$root"; then
  echo "check-product-words: ok (the tracked files speak of the product)"
else
  echo "check-product-words: the lines above describe how the work was organised; say what the product does" \
    "(history lives in git)" >&2
  exit 1
fi
