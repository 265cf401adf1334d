#!/bin/bash
# vsim_device.sh: fp-vsim's real world on a many-core machine, to check the virtual world's
# many-core predictions against real cores (docs/results.md, "The many-core simulator").
#
#   bench/vsim_device.sh OUTDIR [FP_VSIM]
#
# Calibrates the cost model on 1 and 2 real workers, then sweeps partitioned, stealing and
# stealing with interrupts on 2, 8 and (allowed cores - 2) workers (NS="..." to choose),
# REPS times interleaved (default 3), the generator on a core of its own.
# Everything it measures goes to OUTDIR as fp-vsim's JSON and --costs files; compare with
# bench/vsim_validate.py --real-dir OUTDIR. Needs no root, no network, no GPU.
set -u
out=${1:?usage: vsim_device.sh OUTDIR [FP_VSIM]}
B=${2:-build/release/tools/vsim/fp-vsim}
mkdir -p "$out"
log() { echo "[$(date -u +%H:%M:%S)] $*"; }

allowed=$(awk '/Cpus_allowed_list/ {print $2}' /proc/self/status)
cores=()
IFS=, read -ra parts <<<"$allowed"
for p in "${parts[@]}"; do
	if [[ $p == *-* ]]; then for ((c = ${p%-*}; c <= ${p#*-}; c++)); do cores+=("$c"); done
	else cores+=("$p"); fi
done
ncores=${#cores[@]}
log "cores allowed: $allowed ($ncores)"
{
	date -u; uname -a; nproc; echo "allowed: $allowed"
	lscpu 2>/dev/null | grep -E 'Model name|Socket|Thread|Core|NUMA|MHz|Hypervisor' || true
	grep -E '^cpu ' /proc/stat
} >"$out/machine.txt"

# Workers on cores[1..n], the generator on cores[n+1]; cores[0] is left to the OS.
list() {
	local n=$1 s=""
	for ((i = 1; i <= n + 1; i++)); do s+="${s:+,}${cores[$i]}"; done
	echo "$s"
}

log "calibration"
"$B" --real -n 1 --cores "$(list 1)" --sched part -l 0.5 --requests 100000 --quiet \
	--calibrate "$out/costs_n1.txt" --format json -o "$out/calib_n1.json" || log "calib n1 failed"
"$B" --real -n 2 --cores "$(list 2)" --sched steal --notify ipi -l 0.5 --requests 200000 \
	--quiet --calibrate "$out/costs_n2.txt" --format json -o "$out/calib_n2.json" ||
	log "calib n2 failed"

# Sweeps, interleaved: every (n, policy) once per repetition, so a slow patch of the
# host touches all of them alike.
maxn=$((ncores - 2))
ns=(${NS:-2 8})
((maxn > 8)) && [ -z "${NS:-}" ] && ns+=("$maxn")
reps=${REPS:-3}
for ((k = 1; k <= reps; k++)); do
	for n in "${ns[@]}"; do
		((n > maxn)) && continue
		for s in part steal steal-ipi; do
			args=(--sched "${s%-ipi}")
			[ "$s" = steal-ipi ] && args+=(--notify ipi)
			log "rep $k: real n=$n $s"
			"$B" --real -n "$n" --cores "$(list "$n")" "${args[@]}" --sweep 0.3:0.9:0.1 \
				--requests $((50000 * n)) --quiet --format json \
				-o "$out/real_${s}_n${n}_r${k}.json" ||
				log "real n=$n $s failed"
		done
	done
done
grep -E '^cpu ' /proc/stat >>"$out/machine.txt"
log "done"
