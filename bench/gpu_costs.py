"""Per-token costs of turnrl's own generation and training path (the HF agent and the learner core, no vLLM) on a
CUDA GPU and on the CPU, side by side in one process: what docs/SCALING.md projects from.

    python bench/gpu_costs.py                      # both shapes on the GPU, SmolLM2's shape on the CPU
    python bench/gpu_costs.py --shapes 135m 0.5b --batch 64 --new-tokens 256 --bf16

Models of SmolLM2-135M's shape and of Qwen2.5-0.5B's (hidden 896, 24 layers, 14/2 heads; SmolLM2's 49 k vocabulary),
with random weights: the costs depend on the shapes, not the values, and random weights practically never say end
of sequence, so every row generates exactly ``--new-tokens``. Per device and shape it prints: generation tokens/s
(``HFAgent.generate``, a batch of ``--batch`` prompts of ``--prompt-tokens``, sampled at temperature 1), training
tokens/s (forward + backward through ``forward_tokens`` + one AdamW step on the same batch's prompt + response
tokens, fp32 or bf16 autocast) and the weight export to host memory (the copy a rollout worker receives). The CPU
rows (``--cpu-shapes``) run ``--cpu-batch`` prompts and ``--cpu-new-tokens`` so the run stays short: compare their
per-token rates.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

SHAPES = {  # Llama-style shapes; vocabulary: the tokenizer's
    "135m": {
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "tie_word_embeddings": True,
    },
    "0.5b": {
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "tie_word_embeddings": True,
    },
}


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def measure(shape: str, device: str, tokenizer, batch: int, prompt: int, new: int, autocast: bool) -> dict:
    from transformers import LlamaConfig, LlamaForCausalLM

    from turnrl.agents import SamplingParams
    from turnrl.agents.hf import HFAgent
    from turnrl.rl.core.forward import forward_tokens

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=8192, **SHAPES[shape])
    model = LlamaForCausalLM(config).to(device).eval()
    params = sum(p.numel() for p in model.parameters())
    agent = HFAgent(model, tokenizer, batch_size=batch, kv_cache_mb=0)
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(100, len(tokenizer) - 1, (prompt,), generator=gen).tolist() for _ in range(batch)]
    sp = SamplingParams(temperature=1.0, max_new_tokens=new, seed=0)
    agent.generate(prompts[:2], SamplingParams(temperature=1.0, max_new_tokens=4, seed=0))  # warm-up
    sync(device)
    t0 = time.perf_counter()
    out = agent.generate(prompts, sp)
    sync(device)
    gen_s = time.perf_counter() - t0
    generated = sum(len(c.token_ids) for c in out)

    model.train()
    rows = [p + c.token_ids for p, c in zip(prompts, out)]  # right-padded to the longest (an end of sequence)
    ids = torch.full((batch, max(map(len, rows))), tokenizer.pad_token_id or 0, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, : len(r)], mask[i, : len(r)] = torch.tensor(r), 1
    ids, mask = ids.to(device), mask.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=True)
    micro = max(1, batch // 8)

    def step() -> None:
        for i in range(0, batch, micro):
            with torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16, enabled=autocast):
                logp, _, _ = forward_tokens(model, ids[i : i + micro], mask[i : i + micro])
            (-logp.mean()).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()  # warm-up (allocations, kernels)
    sync(device)
    t0 = time.perf_counter()
    step()
    sync(device)
    train_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
    export_s = time.perf_counter() - t0
    row = {
        "shape": shape,
        "device": device,
        "params_M": round(params / 1e6, 1),
        "batch": batch,
        "prompt_tokens": prompt,
        "new_tokens": new,
        "gen_s": round(gen_s, 2),
        "gen_tok_s": round(generated / gen_s, 1),
        "train_s": round(train_s, 3),
        "train_tok_s": round(int(mask.sum()) / train_s, 1),
        "train_precision": "bf16-autocast" if autocast else "fp32",
        "export_s": round(export_s, 3),
        "export_GB_s": round(sum(v.numel() * v.element_size() for v in state.values()) / 1e9 / export_s, 2),
    }
    if device.startswith("cuda"):
        row["peak_GB"] = round(torch.cuda.max_memory_allocated() / 1e9, 2)
        torch.cuda.reset_peak_memory_stats()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--tokenizer",
        default="smollm2-135m-instruct",
        help="a tokenizer folder, or a model name turnrl loads (default: the built-in SmolLM2's)",
    )
    ap.add_argument("--shapes", nargs="+", default=["135m", "0.5b"], choices=sorted(SHAPES))
    ap.add_argument("--devices", nargs="+", default=["cuda", "cpu"])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--cpu-new-tokens", type=int, default=16)
    ap.add_argument("--cpu-batch", type=int, default=16)
    ap.add_argument(
        "--cpu-shapes",
        nargs="+",
        default=["135m"],
        choices=sorted(SHAPES),
        help="the shapes timed on the CPU (a 0.5B training step there takes minutes)",
    )
    ap.add_argument("--bf16", action="store_true", help="also time training under bf16 autocast on the GPU")
    ap.add_argument("--out", default=None, help="also write the rows as JSON lines here")
    args = ap.parse_args()
    from transformers import AutoTokenizer

    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 as on the CPU; --bf16 shows the fast path
    from turnrl.agents.models import resolve_model_path

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(args.tokenizer))
    rows = []
    for device in args.devices:
        if device.startswith("cuda") and not torch.cuda.is_available():
            print(f"skipping {device}: torch sees no CUDA GPU")
            continue
        gpu = device.startswith("cuda")
        for shape in args.shapes if gpu else [s for s in args.shapes if s in args.cpu_shapes]:
            new, batch = (args.new_tokens, args.batch) if gpu else (args.cpu_new_tokens, args.cpu_batch)
            for autocast in [False, True] if args.bf16 and gpu else [False]:
                row = measure(shape, device, tokenizer, batch, args.prompt_tokens, new, autocast)
                rows.append(row)
                print(json.dumps(row), flush=True)
    if torch.cuda.is_available():
        print(
            "gpu:",
            torch.cuda.get_device_name(0),
            "| torch",
            torch.__version__,
            "| cpu threads",
            torch.get_num_threads(),
        )
    by = {(r["shape"], r["device"], r["train_precision"]): r for r in rows}
    for shape in args.shapes:
        g, c = by.get((shape, "cuda", "fp32")), by.get((shape, "cpu", "fp32"))
        if g and c:
            print(
                f"{shape}: GPU/CPU generation {g['gen_tok_s'] / c['gen_tok_s']:.1f}x, training "
                f"{g['train_tok_s'] / c['train_tok_s']:.1f}x (fp32)"
            )
    if args.out:
        with open(args.out, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
