"""An Arithmetic environment whose every step waits 0.2–1 s first, as a sandbox or a search API does (for
``bench/ray_placement.py --async``). The wait is drawn from the task and the turn, so every run waits the same."""

from __future__ import annotations

import asyncio
import random

from turnrl.envs.builtin.arithmetic import ArithmeticEnv


class SlowToolArithmetic(ArithmeticEnv):
    """``turnrl/Arithmetic-v0`` with 0.2–1 s of latency before each step is answered."""

    async def _astep(self, action: str):  # the parent's StepResult
        wait = random.Random(f"{getattr(self, 'task', None)}-{len(action)}").uniform(0.2, 1.0)
        await asyncio.sleep(wait)
        return await super()._astep(action)

    def _step(self, action: str):
        import time

        time.sleep(random.Random(f"{getattr(self, 'task', None)}-{len(action)}").uniform(0.2, 1.0))
        return super()._step(action)
