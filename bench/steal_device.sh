#!/bin/bash
# steal_device.sh: the runtime's --sched steal against --sched part on a many-core machine,
# end to end over Linux TCP on loopback: fp-echo spin --native with N workers, fp-loadgen
# (spin protocol, open loop) on other cores. One JSON per (service, N, policy) in OUTDIR.
# A service kv:WORKLOAD (SERVICES="kv:usr") runs fp-kv -t N instead, its event server, with
# fp-loadgen's memcache protocol (the keys preloaded first), and memcached -t N on the same
# cores beside it (a third policy, "memcached"; MEMCACHED=none leaves it out).
#
#   bench/steal_device.sh OUTDIR [BUILD]       (BUILD: a release build, default build/release)
#
# Rates are per worker (RATES, default 20k..75k), so every N sees the same load per core.
# Cores: worker i on core i (1..N), fp-loadgen on the next ones; on a machine too small
# for that, SRV_CORES_<N> and LG_CORES_<N> say where (e.g. SRV_CORES_2=0,1 LG_CORES_2=1).
# The policies are interleaved (part, steal[, memcached], part, ...) within each N.
set -u
out=${1:?usage: steal_device.sh OUTDIR [BUILD]}
B=${2:-build/release}
R=${RUN:-}
ECHO="$R $B/apps/echo/fp-echo" LG="$R $B/apps/loadgen/fp-loadgen" KV="$R $B/apps/kv/fp-kv"
MC=${MEMCACHED:-$(command -v memcached || echo none)}
MC_USER=""; [[ $(id -u) == 0 ]] && MC_USER="-u root"
mkdir -p "$out"
log() { echo "[$(date -u +%H:%M:%S)] $*"; }
ncores=$(nproc)
{ date -u; uname -a; nproc; lscpu 2>/dev/null | grep -E 'Model name|Hypervisor' || true; } >"$out/machine.txt"
per=(${RATES:-20000 40000 55000 65000 75000})
port=7300
for svc in ${SERVICES:-bimodal1:10us exp:10us}; do
	for n in ${NS:-1 2 4 8}; do
		lgw=$(( ncores - n - 2 )); ((lgw > 6)) && lgw=6
		srv_cores=$(seq -s, 1 "$n")
		lg_cores=$(seq -s, $((n + 1)) $((n + lgw)))
		# a small machine: say where (SRV_CORES_<N>, LG_CORES_<N>; cores may be shared)
		v=SRV_CORES_$n; srv_cores=${!v:-$srv_cores}
		v=LG_CORES_$n; lg_cores=${!v:-$lg_cores}
		rates=""
		for r in "${per[@]}"; do rates+="${rates:+,}$((r * n))"; done
		scheds="part steal"
		[[ $svc == kv:* && $MC != none ]] && scheds+=" memcached"
		for sched in $scheds; do
			port=$((port + 1))
			tag="${svc%%:*}_n${n}_${sched}"
			log "$tag: server cores $srv_cores, loadgen cores $lg_cores, rates $rates"
			if [[ $sched == memcached ]]; then
				taskset -c "$srv_cores" $MC -U 0 -l 127.0.0.1 -p "$port" -t "$n" \
					-c 16384 -m 256 $MC_USER >"$out/$tag.server.log" 2>&1 &
				proto=(--proto memcache --workload "${svc#kv:}")
			elif [[ $svc == kv:* ]]; then
				$KV --net kernel -l 127.0.0.1 -p "$port" -U 0 --stats none -t "$n" \
					--cores "$srv_cores" --sched "$sched" --idle poll \
					>"$out/$tag.server.log" 2>&1 &
				proto=(--proto memcache --workload "${svc#kv:}")
			else
				$ECHO spin --native --net kernel --ip 127.0.0.1 --port "$port" \
					--stats none --workers "$n" --cores "$srv_cores" --sched "$sched" \
					--idle poll >"$out/$tag.server.log" 2>&1 &
				proto=(--proto spin --service "$svc")
			fi
			spid=$!
			sleep 0.5
			timeout 120 $LG --server "127.0.0.1:$port" "${proto[@]}" \
				--rates "$rates" --duration 1 --warmup 0.3 --conns $((64 * n)) \
				--cores "$lg_cores" --stats none --json "$out/$tag.json" \
				>"$out/$tag.lg.log" 2>&1 || log "$tag: loadgen failed"
			kill -INT $spid; wait $spid
		done
	done
done
log done
