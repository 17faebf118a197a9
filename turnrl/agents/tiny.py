"""Tiny random models with small byte-level tokenizers and real chat templates, for fast CPU tests.

``tiny_tokenizer(template="chatml")`` trains a byte-level BPE tokenizer (any text encodes, nothing is unknown)
on a small built-in corpus in well under a second; ``tiny_model(tokenizer)`` builds a randomly initialized Llama
with a few thousand parameters per layer. Four chat templates cover the shapes real models use: ChatML
(SmolLM2), Llama 3 headers, Qwen 2.5 with tools, and Gemma (no system role, "model" for the assistant).
"""

from __future__ import annotations

from typing import Any

CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

LLAMA3 = (
    "{{ '<|begin_of_text|>' }}{% for m in messages %}"
    "{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\n\n' + m['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

QWEN_TOOLS = (
    "{% if tools %}{{ '<|im_start|>system\n' }}"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] + '\n\n' }}{% endif %}"
    "{{ '# Tools\n<tools>' }}{% for t in tools %}{{ '\n' + (t | tojson) }}{% endfor %}"
    '{{ \'\n</tools>\nCall a tool with <tool_call>{"name": ..., "arguments": ...}</tool_call><|im_end|>\n\' }}'
    "{% elif messages[0]['role'] == 'system' %}{{ '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}"
    "{% endif %}"
    "{% for m in messages %}"
    "{% if m['role'] == 'user' or (m['role'] == 'system' and not loop.first) %}"
    "{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}"
    "{% elif m['role'] == 'assistant' %}{{ '<|im_start|>assistant\n' + m['content'] }}"
    "{% if m.tool_calls %}{% for c in m.tool_calls %}"
    "{{ '\n<tool_call>\n' + ({'name': c.function.name, 'arguments': c.function.arguments} | tojson) + '\n</tool_call>' }}"
    "{% endfor %}{% endif %}{{ '<|im_end|>\n' }}"
    "{% elif m['role'] == 'tool' %}"
    "{% if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}{{ '<|im_start|>user' }}{% endif %}"
    "{{ '\n<tool_response>\n' + m['content'] + '\n</tool_response>' }}"
    "{% if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}{{ '<|im_end|>\n' }}{% endif %}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

GEMMA = (
    "{{ '<bos>' }}{% set sys = '' %}{% if messages[0]['role'] == 'system' %}"
    "{% set sys = messages[0]['content'] + '\n\n' %}{% endif %}"
    "{% for m in messages %}{% if m['role'] != 'system' %}"
    "{% set role = 'model' if m['role'] == 'assistant' else 'user' %}"
    "{{ '<start_of_turn>' + role + '\n' }}{% if loop.index0 <= 1 and role == 'user' %}{{ sys }}{% endif %}"
    "{{ m['content'] | trim + '<end_of_turn>\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)

TEMPLATES: dict[str, tuple[str, str]] = {  # name -> (template, end-of-turn token)
    "chatml": (CHATML, "<|im_end|>"),
    "llama3": (LLAMA3, "<|eot_id|>"),
    "qwen_tools": (QWEN_TOOLS, "<|im_end|>"),
    "gemma": (GEMMA, "<end_of_turn>"),
}
SPECIAL_TOKENS = [
    "<pad>",
    "<|im_start|>",
    "<|im_end|>",
    "<|begin_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<bos>",
    "<start_of_turn>",
    "<end_of_turn>",
]
_CORPUS = [
    "What is 12 + 7? The answer is \\boxed{19}. Let me compute 3 * 4 = 12.",
    "You are a helpful assistant. Solve the problem step by step. Put your final answer within \\boxed{}.",
    '<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}</tool_call> <calculator>1</calculator>',
    "That is not correct. Try again. The answer is correct. The answer is wrong. Check the solution.",
    "system user assistant tool model 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ",
]


def tiny_tokenizer(template: str = "chatml", vocab_size: int = 512) -> Any:
    """A small byte-level BPE tokenizer with special tokens and one of :data:`TEMPLATES` as chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if template not in TEMPLATES:
        raise ValueError(f"unknown template {template!r}; choose one of {sorted(TEMPLATES)}")
    chat_template, eot = TEMPLATES[template]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eot, pad_token="<pad>")
    fast.chat_template = chat_template
    return fast


def tiny_model(
    tokenizer: Any, *, hidden: int = 32, layers: int = 2, heads: int = 4, kv_heads: int | None = None, seed: int = 0
) -> Any:
    """A randomly initialized Llama sized for tests (fp32, eval mode); ``kv_heads`` < ``heads``: grouped-query
    attention (as SmolLM2's 9 query heads over 3 key/value heads)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads or heads,
        max_position_embeddings=4096,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng():  # the init draws from torch's global RNG: seed it without leaking the seed
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model.eval()
