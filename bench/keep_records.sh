#!/usr/bin/env bash
# Copy the records of preregistered runs into the repository, without their weights (bench/evidence/README.md): each
# run's metrics.jsonl, config.yaml and run.json, every evaluation's and validation's items.jsonl, metrics.json,
# report.md and run.json, and the datasets the runs trained on (*.parquet, *.done); no checkpoint.pt, trajectories,
# TensorBoard files, DeepSpeed folders, plots or logs. Run folders do not outlive the machine that wrote them.
#   bash bench/keep_records.sh runs/e77 bench/evidence/e77 'sft-s*' 'swirl-s*' swirl-base-demos 'swirl-*.parquet'
set -euo pipefail
SRC=$1; DST=$(realpath -m "$2"); shift 2
mkdir -p "$DST"
cd "$SRC"
for pattern in "$@"; do
  for item in $pattern; do
    [ -e "$item" ] || { echo "no $SRC/$item" >&2; exit 1; }
    if [ -d "$item" ]; then
      find "$item" -type f \( -name metrics.jsonl -o -name config.yaml -o -name run.json -o -name items.jsonl \
        -o -name metrics.json -o -name report.md \) -not -path "*/tb/*" -print0 | while IFS= read -r -d '' f; do
        mkdir -p "$DST/$(dirname "$f")"
        cp "$f" "$DST/$f"
      done
    else
      cp "$item" "$DST/$item"
    fi
  done
done
du -sh "$DST"
