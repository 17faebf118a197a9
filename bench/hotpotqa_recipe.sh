# Issue 79's HotPotQA recipe, sourced by its pilot (bench/pilot_hotpotqa.sh, read on validation) and its test runs
# (bench/evidence_hotpotqa.sh), so that both pose the same task and train the same way. Needs OUT (the run folder)
# and T (the turnrl command) set. The task: turnrl/HotPotQA-v0 in SWiRL's tags (one passage a search, so the second
# article must be searched for), no demonstrations, at most 3 searches; training reads dev-train, choices
# dev-validation, the test dev-test.
ENV=turnrl/HotPotQA-v0
KW=(--kw tool_style=swirl --kw demos=none --kw max_searches=3)

# hotpotqa_base EVAL_TASKS VALIDATION_TASKS: OUT/base.yaml, every run's base configuration (evaluated on dev-test).
hotpotqa_base() {
  mkdir -p "$OUT"
  cat > "$OUT/base.yaml" <<YAML
model: smollm2-135m-instruct
env:
  id: $ENV
  kwargs: {split: dev-train, tool_style: swirl, demos: none, max_searches: 3}
  eval_kwargs: {split: dev-test}
eval_tasks: $1
validation_tasks: $2
YAML
}

# hotpotqa_rows: the teacher's step rows in OUT/gold-steps.parquet (skipped where they are). The teacher (--agent
# gold) on the 350 dev-train questions: the question as the first search, then a supporting article the first search
# missed, then the gold answer, played in the live environment; the filters keep the paths whose answer a search
# found. No model plays, so the rows are the same on every run.
hotpotqa_rows() {
  [ -f "$OUT/gold.parquet" ] || $T swirl generate --env "$ENV" --agent gold --kw split=dev-train "${KW[@]}" \
    --tasks 350 --samples 1 --temperature 0 --max-new-tokens 200 --out "$OUT/gold.parquet"
  [ -f "$OUT/gold-steps.parquet" ] || { $T swirl filter "$OUT/gold.parquet" --mode both --out "$OUT/gold-kept.parquet" &&
    $T swirl decompose "$OUT/gold-kept.parquet" --out "$OUT/gold-steps.parquet"; }
}

ro='rollout={prompts_per_step: 8, group_size: 4, max_new_tokens: 40, max_context: 2048, temperature: 1.0'
# The SFT warm-up (the recipe of docs/results/methods.md#swirl: 16 step rows a step at 5e-5); add steps= and seed=.
SFT=('algorithm={name: sft}' "data={path: $OUT/gold-steps.parquet, batch_size: 16}" "$ro}"
     'optim={lr: 5.0e-5, minibatch_size: 8, grad_accum: 2}')
# GRPO on the answer's F1 from its end, 8 questions x 4 episodes a step at 1e-5 (add init_from=, steps=, seed=):
# as chains, or as trees (2 children after turns 1 and 2: 4 leaves, the tree advantage).
RL_OPTIM='optim={lr: 1.0e-5, minibatch_size: 8, grad_accum: 4}'
CHAIN=('algorithm={name: grpo}' "$ro}")
TREE=('algorithm={name: grpo, advantage: tree}' "$ro, tree: {branches: [{turn: 1, children: 2}, {turn: 2, children: 2}]}}")
