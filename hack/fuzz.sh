#!/usr/bin/env bash
# Runs every fuzz target of the module for FUZZTIME (default 30s) with the default engine flags,
# one after another, and reports each one's executions per second over the whole run (baseline
# coverage included): the issue's goal is at least 1,000/s in every run. The rate is reported,
# not asserted — a noisy machine must not turn it into a flake.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-30s}
status=0
report=()
while IFS=: read -r file _ decl; do
	name=${decl#func }; name=${name%%(*}
	pkg=./$(dirname "${file#./}")
	echo "fuzz: $name ($pkg) for $fuzztime"
	log=$(mktemp)
	if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$pkg" 2>&1 | tee "$log"; then
		status=1
	fi
	# The engine's last progress line: "fuzz: elapsed: 30s, execs: 79938 (0/sec), ...".
	last=$(grep -E '^fuzz: elapsed: [0-9]+s, execs: ' "$log" | tail -1 || true)
	secs=$(sed -E 's/^fuzz: elapsed: ([0-9]+)s.*/\1/' <<<"$last")
	execs=$(sed -E 's/.*execs: ([0-9]+) .*/\1/' <<<"$last")
	if [ -n "$last" ] && [ "${secs:-0}" -gt 0 ]; then
		report+=("$(printf '%-22s %9s execs in %4ss = %6s/s' "$name" "$execs" "$secs" $((execs / secs)))")
	else
		report+=("$(printf '%-22s no progress line (see above)' "$name")")
	fi
	rm -f "$log"
done < <(grep -rnE '^func Fuzz[A-Za-z0-9_]*\(' --include='*_test.go' . | sort)
echo
echo "fuzz: executions per second over each whole run (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
printf '  %s\n' "${report[@]}"
exit $status
