#!/bin/bash
# steer_device.sh: what a hand-over between workers costs (rt/steer.c), on a many-core
# machine. Two parts, results in OUTDIR:
#
#   micro.txt        fp-micro's steer cases: classify a frame; hand it over on one thread;
#                    hand it over between two cores
#   <tag>.json, <tag>.stats.json, <tag>.server.log
#                    end to end, if the machine lets us make namespaces and a veth: fp-echo
#                    on xdp with N workers, fp-loadgen on xdp with N workers on other cores,
#                    N queues on each end of the veth. The loadgen picks source ports in
#                    its own worker's groups by the default table (group g -> g % N), so
#                    with the server's default table no frame is handed over ("mod"); with
#                    --steer-weights 1,1,..,1 the server's table is contiguous blocks
#                    ("blocks"), and a frame lands on its owner only for 1 group in N:
#                    (N-1)/N of all frames are handed over. Same load, interleaved
#                    (mod, blocks, mod, ...), REPS times. The server's busy time per
#                    request, difference over handed-over frames, is the cost end to end.
#
#   bench/steer_device.sh OUTDIR [BUILD]      (BUILD: a release build, default build/release)
#   env: NS="2 4 7" (workers), RATE_PER_WORKER=40000, REPS=3, RUN="<loader prefix>",
#        IP=<an ip binary, run through RUN> where the machine has no iproute2
# Reported by bench/steer_report.py OUTDIR.
set -u
out=${1:?usage: steer_device.sh OUTDIR [BUILD]}
B=${2:-build/release}
R=${RUN:-}
mkdir -p "$out"
log() { echo "[$(date -u +%H:%M:%S)] $*"; }
ncores=${NCORES:-$(nproc)}   # NCORES=16 on a small machine: a dry run (cores wrap)
{ date -u; uname -a; nproc; lscpu 2>/dev/null | grep -E 'Model name|Hypervisor' || true; } >"$out/machine.txt"

log "micro"
$R "$B/bench/fp-micro" --only steer --cpu 1 >"$out/micro.txt" 2>&1 || log "fp-micro failed"

IPC=(ip)
[ -n "${IP:-}" ] && IPC=($R "$IP")
ipc() { "${IPC[@]}" "$@"; }
S=fpst-s C=fpst-c
down() { ipc netns del $S 2>/dev/null; ipc netns del $C 2>/dev/null; true; }
down
if ! ipc netns add $S 2>"$out/e2e_skipped.txt"; then
	log "no network namespaces here: end-to-end part skipped"
	exit 0
fi
down
rm -f "$out/e2e_skipped.txt"
trap down EXIT
for n in ${NS:-2 4 7}; do
	if (( 2 * n + 1 > ncores )); then log "n=$n: needs $((2 * n + 1)) cores"; continue; fi
	down
	ipc netns add $S && ipc netns add $C &&
	ipc link add fpst-s0 netns $S numtxqueues "$n" numrxqueues "$n" type veth peer name fpst-c0 \
		netns $C numtxqueues "$n" numrxqueues "$n" || { log "n=$n: veth failed"; continue; }
	for ns in $S $C; do
		ipc -n $ns link set lo up
		ipc netns exec $ns sysctl -qw net.ipv6.conf.all.disable_ipv6=1 2>/dev/null || true
	done
	ipc -n $S link set fpst-s0 up
	ipc -n $C link set fpst-c0 up
	wrap() { local c out=""; for c in $(seq "$1" "$2"); do out+="${out:+,}$((c % $(nproc)))"; done; echo "$out"; }
	srv_cores=$(wrap 1 "$n")
	lg_cores=$(wrap $((n + 1)) $((2 * n)))
	ones=$(printf '1,%.0s' $(seq "$n")); ones=${ones%,}
	rate=$(( ${RATE_PER_WORKER:-40000} * n ))
	for rep in $(seq "${REPS:-3}"); do
		for table in mod blocks; do
			tag="n${n}_${table}_r${rep}"
			extra=()
			[ "$table" = blocks ] && extra=(--steer-weights "$ones")
			log "$tag: server cores $srv_cores, loadgen cores $lg_cores, $rate req/s"
			"${IPC[@]}" netns exec $S $R "$B/apps/echo/fp-echo" server --port 7 --if fpst-s0 \
				--ip 10.89.0.1/24 --workers "$n" --cores "$srv_cores" --idle poll \
				--stats "fpst-$tag" "${extra[@]}" >"$out/$tag.server.log" 2>&1 &
			spid=$!
			sleep 1
			timeout 60 "${IPC[@]}" netns exec $C $R "$B/apps/loadgen/fp-loadgen" \
				--server 10.89.0.1:7 --proto echo --rate "$rate" --duration 2 --warmup 0.5 \
				--conns $((16 * n)) --if fpst-c0 --ip 10.89.0.2/24 --workers "$n" \
				--cores "$lg_cores" --idle poll --stats none --max-slip-us 100000 \
				--json "$out/$tag.json" >"$out/$tag.lg.log" 2>&1 || log "$tag: loadgen failed"
			$R "$B/tools/fp-stats" --name "fpst-$tag" --totals >"$out/$tag.stats.json" 2>&1
			# TERM, not INT: a background job of a script ignores SIGINT
			kill -TERM $spid; wait $spid
		done
	done
done
log "done"
