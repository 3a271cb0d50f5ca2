#!/usr/bin/env bash
# CI stage "tsa" (docs/testing.md): Clang's thread-safety analysis over every translation unit of
# the tree (the kvgate sources and the tests, CUDA off). The locks are common/mutex.h's Mutex and
# SharedMutex, the members they protect are GUARDED_BY them and the methods that expect them held
# REQUIRES them (common/thread_annotations.h); GCC ignores those attributes, so this stage is what
# checks them. It configures a clang-16 tree (build-tsa, compile commands only: nothing is built)
# and runs `clang++-16 -fsyntax-only -Wthread-safety -Werror=thread-safety` with each file's own
# flags, in parallel, with Clang's other warnings off. Syntax-only is enough: the analysis runs in
# the front end. Only the sources that include common/thread_annotations.h (directly or through
# the tree's headers) are checked: without it no code carries a capability attribute, so the
# analysis could find nothing there.
# Fails when any file has a finding, and prints them all.
#   KVGATE_TSA_BUILD_DIR (default build-tsa), KVGATE_CI_JOBS (default nproc)
#   arguments: check only the sources whose path contains one of them (e.g. telemetry/ router/)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${KVGATE_TSA_BUILD_DIR:-$ROOT/build-tsa}
JOBS=${KVGATE_CI_JOBS:-$(nproc)}

# CMakeLists.txt adds the std::expected shim clang 16 needs with libstdc++ 12 (as for build-fuzz).
if [ ! -f "$BUILD/compile_commands.json" ]; then
  CC=clang-16 CXX=clang++-16 cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DKVGATE_TESTS=ON -DKVGATE_CUDA=OFF > /dev/null
fi

python3 - "$ROOT" "$BUILD" "$JOBS" "$@" <<'EOF'
import concurrent.futures, json, os, re, shlex, subprocess, sys
root, build, jobs, only = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
include = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
annotations = os.path.join(root, "common/thread_annotations.h")
seen = {}

def annotated(path):  # whether `path` includes common/thread_annotations.h, maybe indirectly
    if path not in seen:
        seen[path] = False  # (an include cycle adds nothing)
        with open(path, errors="replace") as f:
            text = f.read()
        for name in include.findall(text):
            for base in (root, os.path.dirname(path)):  # -I<root>, then the includer's folder
                candidate = os.path.normpath(os.path.join(base, name))
                if os.path.isfile(candidate):
                    if candidate == annotations or annotated(candidate):
                        seen[path] = True
                    break
            if seen[path]:
                break
    return seen[path]

sources = [e for e in json.load(open(f"{build}/compile_commands.json"))
           # Generated sources (the embedded dashboard) hold data, not locks.
           if e["file"].startswith(root + "/") and not e["file"].startswith(build + "/")
           and (not only or any(o in e["file"] for o in only))]
entries = [e for e in sources if annotated(e["file"])]

def check(entry):
    args = shlex.split(entry["command"])
    out, i = [], 0
    while i < len(args):  # drop the object output and the optimizer/debug flags: nothing is built
        a = args[i]
        if a == "-o":
            i += 2
            continue
        if a == "-c" or a.startswith("-O") or a.startswith("-g"):
            i += 1
            continue
        out.append(a)
        i += 1
    # This stage checks the locks only: Clang's other warnings (the GCC build has its own -Werror)
    # are off, so that it fails on a thread-safety finding and nothing else.
    out += ["-fsyntax-only", "-Wno-everything", "-Wthread-safety", "-Werror=thread-safety"]
    p = subprocess.run(out, cwd=entry["directory"], capture_output=True, text=True)
    return entry["file"], p.returncode, p.stderr

failed = []
with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
    for path, rc, err in pool.map(check, entries):
        if rc != 0 or err:
            sys.stdout.write(err)
        if rc != 0:
            failed.append(path[len(root) + 1:])
print(f"tsa: {len(entries)} translation units checked ({len(sources) - len(entries)} without "
      f"annotations skipped), {len(failed)} failed")
for path in failed:
    print(f"  {path}")
sys.exit(1 if failed else 0)
EOF
