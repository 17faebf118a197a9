#!/usr/bin/env bash
# Pilot for issue 79's trees against chains on Arithmetic level 5 (bench/preregistered.md, "trees against chains on
# Arithmetic — the pilot first"): bench/pilot_trees.sh on that testbed (its header says what the runs are), validation
# only. Records of its run: bench/evidence/pilot79a.
#   bash bench/pilot_trees_arith.sh runs/pilot79a        (alone on the machine: about 25 minutes)
exec env TESTBED=arithmetic bash "$(dirname "$0")/pilot_trees.sh" "$@"
