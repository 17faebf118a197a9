"""Environment classes written the way TRL's docs show (`GRPOTrainer(environment_factory=...)`), with nothing of
turnrl in them: tests/envs/test_trl_env.py plays and trains them as turnrl environments."""


class GuessNumber:
    """Guess a secret number with the `guess` tool; feedback says higher or lower."""

    def __init__(self):
        self.reward = 0.0
        self.done = False

    def reset(self, **kwargs) -> str | None:
        self.secret = int(kwargs["secret"])
        self.seen = dict(kwargs)
        self.reward, self.done, self.guesses = 0.0, False, 0
        return "Find the secret number (1 to 9) with the guess tool."

    def guess(self, number: int) -> str:
        """Guess the secret number.

        Args:
            number: the number you guess.

        Returns:
            higher, lower, or right.
        """
        if self.done:
            raise ValueError("Game over.")
        self.guesses += 1
        if number == self.secret:
            self.reward, self.done = 1.0, True
            return "right"
        return "higher" if number < self.secret else "lower"

    def _private(self) -> None:
        """Not a tool: private methods are hidden, as in TRL."""


def reward_func(environments, **kwargs):
    return [env.reward for env in environments]


def fewer_guesses(environments, **kwargs):
    """A second reward: a penalty per guess past the first (None where the game was not won)."""
    return [-(env.guesses - 1) * 0.1 if env.done else None for env in environments]


class SayHello:
    """No tools at all: the reward reads the completion (TRL passes it to reward functions)."""

    def reset(self, **kwargs) -> None:
        return None


def says_hello(environments, completions, **kwargs):
    return [1.0 if "hello" in c[-1]["content"].lower() else 0.0 for c in completions]


class NoReset:
    def guess(self, number: int) -> str:
        """Guess.

        Args:
            number: a number.
        """
        return "?"


class NeedsArgs:
    def __init__(self, url):
        self.url = url

    def reset(self, **kwargs):
        return None


def broken_reward(environments, **kwargs):
    raise KeyError("score")


class Quirky(GuessNumber):
    """TRL's tool rule at its edges: a static method and a callable attribute are not tools, a close() that needs an
    argument is a tool (TRL exposes it) and is not called when the environment closes; rewards as numpy scalars."""

    helper = staticmethod(lambda x: x)
    formatter = str

    @staticmethod
    def version() -> str:
        """Not a tool: a static method."""
        return "1"

    def close(self, reason: str) -> str:
        """End the game.

        Args:
            reason: why.
        """
        self.done = True
        return "closed"


CALLS = []


def numpy_reward(environments, **kwargs):
    import numpy as np

    CALLS.append(1)
    return [np.float32(env.reward) for env in environments]
