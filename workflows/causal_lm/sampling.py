"""How a language model picks each next token: the settings of a generation, and the
keras-hub sampler they make. Light: the command line reads these before any model loads."""

from dataclasses import dataclass

SAMPLERS = ("greedy", "beam", "random", "top_k", "top_p")
PYFUNC_PARAMS = {"sampler": "greedy", "max_new_tokens": 40, "temperature": 1.0, "top_k": 10,
                 "top_p": 0.9, "num_beams": 4, "seed": -1}  # the logged model's params schema


@dataclass(frozen=True)
class Sampling:
    """How to pick each next token (see keras-hub's samplers)."""

    sampler: str = "greedy"  # greedy | beam | random | top_k | top_p
    max_new_tokens: int = 40
    temperature: float = 1.0
    top_k: int = 10
    top_p: float = 0.9
    num_beams: int = 4
    seed: int | None = None

    def check(self):
        """Raises `ValueError` naming the first setting out of range."""
        rules = ((self.sampler in SAMPLERS, f"sampler must be one of {', '.join(SAMPLERS)}"),
                 (1 <= self.max_new_tokens <= 1024, "max_new_tokens must be from 1 to 1024"),
                 (0 < self.temperature <= 100, "temperature must be above 0 (and at most 100)"),
                 (1 <= self.top_k <= 100000, "top_k must be at least 1"),
                 (0 < self.top_p <= 1, "top_p must be above 0 and at most 1"),
                 (1 <= self.num_beams <= 64, "num_beams must be from 1 to 64"))
        for holds, message in rules:
            if not holds:
                raise ValueError(f"{message}; got {self}.")
        return self

    def make_sampler(self):
        import keras_hub

        common = {"temperature": self.temperature}
        if self.sampler == "greedy":
            return keras_hub.samplers.GreedySampler(**common)
        if self.sampler == "beam":
            return keras_hub.samplers.BeamSampler(num_beams=self.num_beams, **common)
        if self.sampler == "top_k":
            return keras_hub.samplers.TopKSampler(k=self.top_k, seed=self.seed, **common)
        if self.sampler == "top_p":
            return keras_hub.samplers.TopPSampler(p=self.top_p, seed=self.seed, **common)
        return keras_hub.samplers.RandomSampler(seed=self.seed, **common)
