"""An environment class written for TRL's `GRPOTrainer(environment_factory=...)` — nothing of turnrl in the class or
its reward function — played and trained by turnrl as it is: `trl:trl_guess:GuessNumber` (see "TRL environment
classes" in docs/bring-your-environment.md).

`python examples/trl_guess.py` plays one episode with a scripted player that bisects; `turnrl train trl-guess.yaml`
(from this folder) trains SmolLM2 on it.
"""


class GuessNumber:
    """Guess a secret number from 1 to 9 with the `guess` tool; each answer says higher, lower or right."""

    def __init__(self):
        self.reward = 0.0
        self.done = False

    def reset(self, **kwargs) -> str | None:
        self.secret = int(kwargs["secret"])
        self.reward, self.done, self.guesses = 0.0, False, 0
        return "The secret number is from 1 to 9. Call the guess tool until it says right, then say the number."

    def guess(self, number: int) -> str:
        """Guess the secret number.

        Args:
            number: the number you guess, from 1 to 9.

        Returns:
            higher, lower, or right.
        """
        if self.done:
            raise ValueError("Game over: the number was found.")
        self.guesses += 1
        if number == self.secret:
            self.done = True
            self.reward = 1.0 / self.guesses  # found sooner, paid more
            return "right"
        return "higher" if number < self.secret else "lower"


def reward_func(environments, **kwargs):
    return [env.reward for env in environments]


if __name__ == "__main__":
    import json

    import turnrl

    rows = [{"prompt": "Let's play.", "secret": s} for s in range(1, 10)]
    env = turnrl.make("trl:trl_guess:GuessNumber", data=rows, reward="trl_guess:reward_func", max_turns=6)
    obs, info = env.reset(seed=0, options={"index": 6})
    print(obs[-1].content)
    low, high = 1, 9
    while True:
        mid = (low + high) // 2
        call = json.dumps({"name": "guess", "arguments": {"number": mid}})
        out, reward, terminated, truncated, info = env.step(f"<tool_call>{call}</tool_call>")
        print(f"guess {mid}: {out[0].content}")
        if out[0].content == "right":
            break
        low, high = (mid + 1, high) if out[0].content == "higher" else (low, mid - 1)
    out, reward, terminated, truncated, info = env.step(f"The number is {mid}.")
    print(f"reward {reward} (found in {env.instance.guesses} guesses), terminated={terminated}")
