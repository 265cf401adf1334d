#!/bin/bash
# vsim_soak.sh: a seeded search for wrong, lost or late answers in the real dataplane, in
# virtual time: fp-vsim --full runs a mix (fp-kv or the spin server, 2-18 workers,
# partitioned or stealing, interrupts, every batch stolen, up to 5% loss and 20%
# reordering on the wire, loads 0.1-0.8) for each seed; a run that fails, answers wrong or
# out of order, or misses a stored key is printed. tests/vsim/test_vsim.py runs seeds 1-24
# of the same mix (with fewer requests) in every test run.
#
#   bench/vsim_soak.sh [FIRST LAST [BUILD]]     (default 1 160 build/release; build/debug
#                                                runs it under ASan and UBSan)
first=${1:-1} last=${2:-160} B=${3:-build/release}
fails=0; runs=0
for seed in $(seq "$first" "$last"); do
  n=$(( (seed % 5) * 4 + 2 )); sched=$([ $((seed % 2)) = 0 ] && echo steal || echo part)
  extra=""; [ $sched = steal ] && [ $((seed % 3)) = 0 ] && extra="--notify ipi --ipi-after-us 0"
  [ $sched = steal ] && [ $((seed % 5)) = 1 ] && extra="$extra --steal-force"
  app=$([ $((seed % 4)) -lt 3 ] && echo kv || echo spin)
  args="--full --app $app -n $n --sched $sched $extra --loss 0.0$((seed % 6)) --reorder 0.$((seed % 3)) -l 0.$(( seed % 8 + 1 )) --requests 10000 --flows $(( seed * 7 % 500 + 20 )) --seed $seed --batch $(( seed % 7 * 10 + 1 )) -d det --mean-us 0.5 --quiet --format json"
  [ $app = kv ] && args="$args --keys $(( seed * 13 % 2000 + 1 ))"
  runs=$((runs+1))
  out=$(timeout 300 "$B/tools/vsim/fp-vsim" $args 2>"${TMPDIR:-/tmp}/vsim_soak.err"); rc=$?
  if [ $rc != 0 ]; then fails=$((fails+1)); echo "FAIL rc $rc: $args: $(head -1 "${TMPDIR:-/tmp}/vsim_soak.err")"; continue; fi
  flows=$(( seed * 7 % 500 + 20 ))
  echo "$out" | python3 -c "
import json, sys
p = json.load(sys.stdin)['points'][0]
if p['order_errors'] or p.get('kv_misses', 0) or p['conns_closed'] != $flows:
    print('BAD $args:', p['order_errors'], 'out of order,', p.get('kv_misses', 0), 'misses,',
          p['conns_closed'], 'of $flows connections let go')
    sys.exit(1)" || fails=$((fails+1))
done
echo "runs=$runs fails=$fails"
((fails == 0))
