#!/usr/bin/env bash
# The preregistered experiments still to run (bench/preregistered.md), one after the other, each resumable (a
# finished run is skipped, an unfinished one run again whole), each one's records kept in bench/evidence/ as it ends
# (bench/keep_records.sh; commit them: run folders do not outlive the machine). Alone on the machine:
#   nohup bash bench/evidence_next.sh > runs/evidence-next.log 2>&1 &
# Order: SWiRL against SFT (issue 77), the gateway example, the difficulty sampler, solver-critic like for like, PAG
# with its step chosen on validation (77), self-play tic-tac-toe (78). Records of earlier sessions are copied back
# into runs/ first, so their finished runs are not run again.
set -uo pipefail
cd "$(dirname "$0")/.."
keep() { bash bench/keep_records.sh "$@" || echo "keeping $* failed"; }
for d in e77 e78; do
  [ -d bench/evidence/$d ] && mkdir -p runs/$d && cp -rn bench/evidence/$d/. runs/$d/
done
step() { echo "== $1 start $(date -u +%FT%TZ)"; shift; "$@"; echo "== end rc=$? $(date -u +%FT%TZ)"; }
step swirl bash bench/evidence_swirl.sh runs/e77
keep runs/e77 bench/evidence/e77 'sft-s*' 'swirl-s*' swirl-base-demos 'swirl-*.parquet' swirl-steps.done
step gateway bash bench/evidence_gateway.sh runs/e77
keep runs/e77 bench/evidence/e77 'gateway-s*'
step sampler bash bench/evidence_sampler.sh runs/e77
keep runs/e77 bench/evidence/e77 'uniform-s*' 'difficulty-s*'
step solver-critic bash bench/evidence_solver_critic.sh runs/e77
keep runs/e77 bench/evidence/e77 'sc-pair-s*' 'sc-alone-s*'
step pag bash bench/evidence_pag.sh runs/e77
keep runs/e77 bench/evidence/e77 'pag-*'
step selfplay bash bench/evidence_selfplay.sh runs/e78
keep runs/e78 bench/evidence/e78 'ttt-s*'
