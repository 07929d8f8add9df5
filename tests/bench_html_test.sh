#!/usr/bin/env bash
# bench_html_test.sh SERVER BENCH OUTDIR — rkv-bench's HTML report in a real
# browser. A real server and two real runs (open loop with --html, closed
# loop), then --compare of both plus a hand-written report of another
# system with a "note" (the shape perf/compare.sh writes); headless
# Chromium loads each page from a file and the test checks, in the DOM
# Chromium built, the three SVG charts with their lines and the tables, and
# that the page logged nothing to the console. A control page with a script
# error must be caught by the same check, so a Chromium that stops
# reporting console messages fails this test instead of passing it.
# Screenshots go to OUTDIR (the build directory), never the repository.
# Exit 77 (skip) only when no Chromium is installed
# (scripts/install-deps.sh installs Debian's `chromium`).
set -uo pipefail
SERVER=$1 BENCH=$2 OUTDIR=$3
CHROME=$(command -v chromium || command -v chromium-browser || true)
if [[ -z $CHROME ]]; then
    echo "SKIP: no chromium in PATH; install it (apt-get install --no-install-recommends chromium," \
         "or scripts/install-deps.sh) to run the browser test" >&2
    exit 77
fi
# shellcheck source=e2e.sh
. "$(dirname "$0")/e2e.sh"
e2e_init html
mkdir -p "$OUTDIR"

e2e_server "$SERVER" --memory 64M --log-level warn
e2e_started

"$BENCH" -s "shm://$SOCK" -q --rate 4000 --duration 2 --keys 1000 --json "$TMP/open.json" \
    --html "$TMP/run.html" >"$TMP/open.txt" 2>&1 || { cat "$TMP/open.txt" >&2; fail "open-loop run"; }
"$BENCH" -s "shm://$SOCK" -q --requests 20000 --keys 1000 --threads 2 --get-ratio 0.5 \
    --json "$TMP/closed.json" >"$TMP/closed.txt" 2>&1 || { cat "$TMP/closed.txt" >&2; fail "closed-loop run"; }
e2e_server_stop

# Another system's numbers as compare.sh writes them: no transport counters,
# a distribution rebuilt from a coarse histogram, and a note saying so.
cat >"$TMP/other.json" <<'JSON'
{"tool": "memaslap", "label": "memcached <test>", "loop": "closed", "threads": 1, "window": 1,
 "note": "latency distribution rebuilt from memaslap's log2 histogram: each count sits at its power-of-two bucket's upper bound (interpolated)",
 "ops_per_sec": 50000, "duration_s": 2,
 "get": {"ops": 90000, "ops_per_sec": 45000, "p50_us": 16, "p99_us": 64, "max_us": 128,
         "distribution": [[8000, 1000], [16000, 60000], [32000, 28000], [64000, 900], [128000, 100]]},
 "put": {"ops": 10000, "ops_per_sec": 5000, "p50_us": 16, "p99_us": 64, "max_us": 64,
         "distribution": [[16000, 9000], [32000, 900], [64000, 100]]},
 "timeseries": []}
JSON
"$BENCH" --compare "$TMP/open.json" "$TMP/closed.json" "$TMP/other.json" --html "$TMP/compare.html" \
    2>"$TMP/compare.err" || { cat "$TMP/compare.err" >&2; fail "--compare"; }

printf '<!DOCTYPE html><html><body><p>control</p><script>notDefinedAnywhere();</script></body></html>\n' \
    >"$TMP/control.html"

# load NAME: Chromium's DOM of $TMP/NAME.html into $TMP/NAME.dom, its log into
# $TMP/NAME.log, a screenshot into OUTDIR.
load() {
    local name=$1 rc
    timeout 120 "$CHROME" --headless --no-sandbox --disable-gpu --no-first-run \
        --user-data-dir="$TMP/profile-$name" --enable-logging=stderr --v=0 \
        --dump-dom "file://$TMP/$name.html" >"$TMP/$name.dom" 2>"$TMP/$name.log"
    rc=$?
    (( rc == 0 )) || { tail -5 "$TMP/$name.log" >&2; fail "$name: chromium --dump-dom exit $rc"; }
    timeout 120 "$CHROME" --headless --no-sandbox --disable-gpu --no-first-run \
        --user-data-dir="$TMP/profile-$name" --window-size=1100,2600 \
        --screenshot="$OUTDIR/bench-html-$name.png" "file://$TMP/$name.html" >/dev/null 2>&1 ||
        fail "$name: chromium --screenshot failed"
    [[ -s $OUTDIR/bench-html-$name.png ]] || fail "$name: no screenshot"
}
console_errors() { grep -E ':CONSOLE|Uncaught' "$TMP/$1.log"; }

load control
grep -q '<p>control</p>' "$TMP/control.dom" || fail "control: chromium did not render the page"
console_errors control >/dev/null ||
    fail "control: the script error was not seen in chromium's log; console checking is broken"

for page in run compare; do
    load "$page"
    dom=$TMP/$page.dom
    for id in latency-by-percentile throughput-over-time p99-over-time; do
        grep -q "<svg id=\"$id\"" "$dom" || fail "$page: no <svg id=\"$id\"> in the DOM"
    done
    for id in summary parameters transport; do
        grep -q "<table id=\"$id\"" "$dom" || fail "$page: no table $id"
    done
    lines=$(grep -o '<polyline class="series"' "$dom" | wc -l)
    want=3; [[ $page == compare ]] && want=10
    (( lines >= want )) || fail "$page: $lines chart lines, expected at least $want"
    if console_errors "$page"; then fail "$page: the page logged console messages (above)"; fi
    # Self-contained: nothing to fetch (the SVG namespace is a name, not a fetch).
    if grep -Eo '(src|href)=|url\(|@import|<script|<link' "$TMP/$page.html"; then
        fail "$page: the page references something outside itself (above)"
    fi
done
grep -q 'memcached &lt;test&gt;' "$TMP/compare.dom" || fail "compare: the third run's label is missing or unescaped"
grep -q 'interpolated' "$TMP/compare.dom" || fail "compare: the other system's note is missing"
grep -q 'open loop, target 4000 ops/s' "$TMP/run.dom" || fail "run: the open-loop line is missing"

if (( FAILS > 0 )); then echo "$FAILS check(s) failed" >&2; exit 1; fi
echo "browser checks passed ($(basename "$CHROME"): $("$CHROME" --version 2>/dev/null | head -c 60)); screenshots in $OUTDIR"
