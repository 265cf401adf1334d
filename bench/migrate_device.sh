#!/bin/bash
# migrate_device.sh: what moving flow groups costs a running service (IX's flow-group
# migration, rt/steer.c): duration of a move, and the latency of requests while groups move.
#
#   bench/migrate_device.sh OUTDIR [BUILD]     (BUILD: a release build, default build/release)
#   env: NS="2 4" (workers each side), RATE_PER_WORKER=40000, REPS=3, MOVE_GAP=0.02 (s between
#        moves), RUN="<loader prefix>", IP=<ip binary run through RUN>, NCORES (dry runs)
#
# Per N: fp-echo spin --native on xdp with N workers (cores 1..N) and fp-loadgen --proto spin
# (1 us fixed service) on xdp with N workers (cores N+1..2N), N queues on each veth end. Two
# modes, interleaved (static, moving, static, ...) REPS times: "static" leaves the groups
# where they are; "moving" runs fp-ctl in a loop during the measured part, each group in
# turn moved to the next worker, MOVE_GAP apart. Per run: the loadgen's JSON, the server's
# stats (moves, connections moved, frames held, the longest move), fp-ctl's log (each
# move's time from command to arrival). Reported by bench/migrate_report.py OUTDIR.
set -u
out=${1:?usage: migrate_device.sh OUTDIR [BUILD]}
B=${2:-build/release}
R=${RUN:-}
mkdir -p "$out"
log() { echo "[$(date -u +%H:%M:%S)] $*"; }
ncores=${NCORES:-$(nproc)}
{ date -u; uname -a; nproc; lscpu 2>/dev/null | grep -E 'Model name|Hypervisor' || true; } >"$out/machine.txt"
IPC=(ip)
[ -n "${IP:-}" ] && IPC=($R "$IP")
ipc() { "${IPC[@]}" "$@"; }
S=fpmg-s C=fpmg-c
down() { ipc netns del $S 2>/dev/null; ipc netns del $C 2>/dev/null; true; }
trap down EXIT
wrap() { local c o=""; for c in $(seq "$1" "$2"); do o+="${o:+,}$((c % $(nproc)))"; done; echo "$o"; }
for n in ${NS:-2 4}; do
	if (( 2 * n + 1 > ncores )); then log "n=$n: needs $((2 * n + 1)) cores"; continue; fi
	down
	ipc netns add $S && ipc netns add $C &&
	ipc link add fpmg-s0 netns $S numtxqueues "$n" numrxqueues "$n" type veth peer name fpmg-c0 \
		netns $C numtxqueues "$n" numrxqueues "$n" || { log "n=$n: veth failed"; continue; }
	for ns in $S $C; do ipc -n $ns link set lo up; done
	ipc -n $S link set fpmg-s0 up
	ipc -n $C link set fpmg-c0 up
	rate=$(( ${RATE_PER_WORKER:-40000} * n ))
	for rep in $(seq "${REPS:-3}"); do
		for mode in static moving; do
			tag="n${n}_${mode}_r${rep}"
			log "$tag: $rate req/s"
			"${IPC[@]}" netns exec $S $R "$B/apps/echo/fp-echo" spin --native --port 7 \
				--if fpmg-s0 --ip 10.90.0.1/24 --workers "$n" --cores "$(wrap 1 "$n")" \
				--idle poll --stats "fpmg-$tag" >"$out/$tag.server.log" 2>&1 &
			spid=$!
			sleep 1
			timeout 60 "${IPC[@]}" netns exec $C $R "$B/apps/loadgen/fp-loadgen" \
				--server 10.90.0.1:7 --proto spin --service fixed:1us --rate "$rate" \
				--duration 3 --warmup 0.5 --conns $((16 * n)) --if fpmg-c0 \
				--ip 10.90.0.2/24 --workers "$n" --cores "$(wrap $((n + 1)) $((2 * n)))" \
				--idle poll --stats none --max-slip-us 100000 --json "$out/$tag.json" \
				>"$out/$tag.lg.log" 2>&1 &
			lpid=$!
			: >"$out/$tag.ctl.log"
			if [ "$mode" = moving ]; then
				sleep 0.6   # past the warm-up
				g=0
				own=(); for k in $(seq 0 127); do own[k]=$((k % n)); done
				while kill -0 $lpid 2>/dev/null; do
					to=$(( (own[g] + 1) % n ))
					$R "$B/ctl/fp-ctl" move "fpmg-$tag" $g $to >>"$out/$tag.ctl.log" 2>&1 &&
						own[g]=$to
					g=$(( (g + 1) % 128 ))
					sleep "${MOVE_GAP:-0.02}"
				done
			fi
			wait $lpid || log "$tag: loadgen failed"
			$R "$B/tools/fp-stats" --name "fpmg-$tag" --totals >"$out/$tag.stats.json" 2>&1
			kill -TERM $spid; wait $spid
		done
	done
done
log "done"
