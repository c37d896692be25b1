#!/usr/bin/env bash
# Runs the end-to-end tests (./e2e) as E2E_SHARDS processes at once; `make
# test` calls it after the unit tests. Most of an e2e test's time is spent
# waiting for Consul, Terraform or a timer, so shards overlap well even on
# 2 cores.
#
# The package's test binary is built once (go test -c) and so is the
# ctsync binary the tests run (CTSYNC_E2E_BIN, see e2e/harness_test.go,
# with its policy helper ctsync-policy next to it);
# the binary lists its tests (-test.list) and each shard runs its share
# (-test.run '^(A|B|...)$') with its own -test.timeout. Tests are dealt out
# longest first, each to the shard with the least work so far, by the
# durations in scripts/e2e-durations.txt (a test missing from it counts as
# the median there). After a run, the durations measured are in
# $E2E_OUT/durations.txt: copy it over the table to rebalance.
#
# While the shards run, each test's result line is printed with its shard's
# prefix ([e2e 2/3]); a failed shard's failing tests are printed in full
# afterwards, then one summary line per shard. The exit status is non-zero
# when any shard failed.
#
# E2E_SHARDS       processes (default 3)
# E2E_TIMEOUT      -test.timeout of each shard (default 25m)
# E2E_BUILD_FLAGS  go test -c flags (default -race)
# E2E_RUN          only the tests whose name matches this regexp (default all)
# E2E_OUT          folder for the logs (default a new one under $TMPDIR)
set -uo pipefail
cd "$(dirname "$0")/.."

shards=${E2E_SHARDS:-3}
timeout=${E2E_TIMEOUT:-25m}
build_flags=${E2E_BUILD_FLAGS--race}
only=${E2E_RUN:-}
table=scripts/e2e-durations.txt
out=${E2E_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/ctsync-e2e.XXXXXX")}
mkdir -p "$out"
case $shards in '' | *[!0-9]* | 0) echo "E2E_SHARDS=$shards: want a number >= 1" >&2; exit 2 ;; esac

say() { printf 'e2e: %s\n' "$*"; }
start=$SECONDS

# shellcheck disable=SC2086 # build_flags is a list of flags
if ! go test -c $build_flags -o "$out/e2e.test" ./e2e/; then
	say "building the test binary failed"
	exit 1
fi
if ! go build -o "$out/ctsync" ./cmd/ctsync || ! go build -o "$out/ctsync-policy" ./cmd/ctsync-policy; then
	say "building ctsync and its policy helper failed"
	exit 1
fi

# The tests (benchmarks only run with -test.bench).
if ! (cd e2e && "$out/e2e.test" -test.list '.*') >"$out/list.raw"; then
	say "listing the tests failed"
	cat "$out/list.raw"
	exit 1
fi
grep -E '^(Test|Fuzz|Example)[A-Za-z0-9_]*$' "$out/list.raw" | sort >"$out/tests" || true
if [ -n "$only" ]; then
	grep -E -- "$only" "$out/tests" >"$out/tests.only" || true
	mv "$out/tests.only" "$out/tests"
fi
total=$(wc -l <"$out/tests")
if [ "$total" -eq 0 ]; then
	say "no test to run"
	exit 1
fi
[ "$shards" -gt "$total" ] && shards=$total

# Deal the tests out: longest first, to the shard with the least work.
awk -v table="$table" -v dir="$out" '
	BEGIN {
		while ((getline line < table) > 0) {
			split(line, f, " ")
			if (f[1] ~ /^[A-Za-z]/ && f[2] ~ /^[0-9.]+$/) { d[f[1]] = f[2]; known[++k] = f[2] + 0 }
		}
		# a test not in the table counts as the median of the table
		m = 10
		if (k > 0) {
			for (i = 2; i <= k; i++) for (j = i; j > 1 && known[j] < known[j-1]; j--) { x = known[j]; known[j] = known[j-1]; known[j-1] = x }
			m = known[int((k + 1) / 2)]
		}
	}
	{ print $1, ($1 in d ? d[$1] : m); if (!($1 in d)) u++ }
	END { print u + 0 > (dir "/unknown") }' "$out/tests" |
	sort -k2,2gr -k1,1 |
	awk -v n="$shards" -v dir="$out" '
		BEGIN { for (s = 1; s <= n; s++) load[s] = 0 }
		{
			best = 1
			for (s = 2; s <= n; s++) if (load[s] < load[best]) best = s
			load[best] += $2
			print $1 > (dir "/shard-" best ".tests")
		}
		END { for (s = 1; s <= n; s++) printf "%d %.0f\n", s, load[s] > (dir "/estimates") }'

say "$total tests in $shards shards, each with -test.timeout $timeout; logs in $out"
unknown=$(cat "$out/unknown")
[ "$unknown" -gt 0 ] && say "$unknown tests not in $table count as its median duration"
while read -r s est; do
	say "shard $s/$shards: $(wc -l <"$out/shard-$s.tests") tests, about $((est / 60))m$((est % 60))s by $table"
done <"$out/estimates"

# Each shard in a process group of its own (job control on), which an
# interrupt stops as a whole: the test binary and the Consul agents and
# daemons it started.
set -m
pids=()
stop() {
	trap - INT TERM
	set +m # no job notices
	for p in "${pids[@]}"; do kill -TERM -- "-$p" 2>/dev/null; done
	wait
	say "interrupted; logs in $out"
	exit 130
}
trap stop INT TERM

for s in $(seq 1 "$shards"); do
	regexp="^($(paste -sd'|' "$out/shard-$s.tests"))\$"
	(
		begin=$SECONDS
		cd e2e || exit 1
		CTSYNC_E2E_BIN="$out/ctsync" "$out/e2e.test" -test.run "$regexp" -test.count=1 \
			-test.timeout "$timeout" -test.v >"$out/shard-$s.log" 2>&1
		echo "$? $((SECONDS - begin))" >"$out/shard-$s.rc"
	) &
	pids+=($!)
	# Results as they come: a top-level test's result line.
	tail -n +1 -F --pid=$! "$out/shard-$s.log" 2>/dev/null |
		grep --line-buffered -E '^(--- (PASS|FAIL|SKIP)|panic:|FAIL$|ok )' |
		sed -u "s|^|[e2e $s/$shards] |" &
done
for p in "${pids[@]}"; do wait "$p"; done
wait # the tails
set +m

# A failed shard: the output of its failing tests (everything from a
# test's "=== RUN" line to the next top-level test's), and when the binary
# panicked (a test timed out, say) the output of the test it was in and the
# panic's first lines.
failed=0
for s in $(seq 1 "$shards"); do
	read -r rc _ <"$out/shard-$s.rc"
	[ "$rc" -eq 0 ] && continue
	failed=1
	echo
	say "---- shard $s/$shards failed (exit $rc); its log: $out/shard-$s.log ----"
	awk '
		/^=== RUN   [^\/]+$/ { if (keep) printf "%s", block; block = ""; keep = 0 }
		/^panic: / { printf "%s", block; block = ""; keep = 0; tail = 25 }
		tail > 0 { print; if (--tail == 0) exit; next }
		{ block = block $0 "\n" }
		/^--- FAIL: / { keep = 1 }
		END { if (keep) printf "%s", block }' "$out/shard-$s.log" | sed "s|^|[e2e $s/$shards] |"
done

# The durations measured, in the table's format.
cat "$out"/shard-*.log | sed -nE 's/^--- (PASS|FAIL|SKIP): ([A-Za-z0-9_]+) \(([0-9.]+)s\)$/\2 \3/p' | sort >"$out/durations.txt"

echo
say "ten slowest tests:"
sort -k2,2gr "$out/durations.txt" | head -n 10 | awk '{ printf "e2e:   %-50s %7.1fs\n", $1, $2 }'
for s in $(seq 1 "$shards"); do
	read -r rc secs <"$out/shard-$s.rc"
	n=$(wc -l <"$out/shard-$s.tests")
	# the tests that failed, and the one a panic stopped
	fails=$(sed -nE -e 's/^--- FAIL: ([A-Za-z0-9_]+) .*/\1/p' -e '/^panic: /,/^$/s/^\t\t([A-Za-z0-9_]+) \(.*/\1 (panic)/p' \
		"$out/shard-$s.log" | paste -sd' ' -)
	if [ "$rc" -eq 0 ]; then
		say "shard $s/$shards: ok    $n tests in $((secs / 60))m$((secs % 60))s"
	else
		say "shard $s/$shards: FAIL  $n tests in $((secs / 60))m$((secs % 60))s; failed: ${fails:-(see the log)}; log $out/shard-$s.log"
	fi
done
rm -f "$out/e2e.test" "$out/ctsync" "$out/ctsync-policy"
el=$((SECONDS - start))
if [ "$failed" -ne 0 ]; then
	say "FAIL after $((el / 60))m$((el % 60))s (durations measured: $out/durations.txt)"
	exit 1
fi
say "ok after $((el / 60))m$((el % 60))s (durations measured: $out/durations.txt; copy it to $table to rebalance)"
