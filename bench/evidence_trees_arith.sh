#!/usr/bin/env bash
# Issue 79's trees against chains on Arithmetic level 5, as fixed in bench/preregistered.md ("trees against chains on
# Arithmetic"): bench/evidence_trees.sh's comparison on that testbed (its header says what the runs are).
#   bash bench/evidence_trees_arith.sh [OUT]       (default runs/e79a; about 35 minutes a seed on 2 CPU cores)
# then: python bench/evidence_report.py OUT --arms chain tree
exec env TESTBED=arithmetic bash "$(dirname "$0")/evidence_trees.sh" "$@"
