"""Text from a trained language model: ``petra.models.generate``.

The sampling is `petra generate`'s (services/engine/text_generation.cc),
draw for draw: the same seed gives the same text from the same export in
Python and in C++. The draws come from MT19937-64, whose sequence the C++
standard fixes (std::mt19937_64), never from torch's global generator.
"""

import math

import torch

__all__ = ["generate"]

_MASK64 = (1 << 64) - 1


class _MT19937_64:
    """std::mt19937_64: seeded as its constructor seeds it."""

    _N, _M = 312, 156

    def __init__(self, seed):
        mt = [seed & _MASK64]
        for i in range(1, self._N):
            prev = mt[-1]
            mt.append((6364136223846793005 * (prev ^ (prev >> 62)) + i)
                      & _MASK64)
        self._mt = mt
        self._index = self._N

    def _twist(self):
        mt, n, m = self._mt, self._N, self._M
        for i in range(n):
            x = (mt[i] & 0xFFFFFFFF80000000) | (mt[(i + 1) % n] & 0x7FFFFFFF)
            mt[i] = mt[(i + m) % n] ^ (x >> 1) ^ (
                0xB5026F5AA96619E9 if x & 1 else 0)
        self._index = 0

    def __call__(self):
        if self._index >= self._N:
            self._twist()
        x = self._mt[self._index]
        self._index += 1
        x ^= (x >> 29) & 0x5555555555555555
        x ^= (x << 17) & 0x71D67FFFEDA60000
        x ^= (x << 37) & 0xFFF7EEE000000000
        x ^= x >> 43
        return x & _MASK64


def generate(model, prompt, max_new_tokens=200, temperature=0.8, top_k=0,
             seed=1):
    """The continuation of `prompt` by a LanguageModel (petra.models.build
    of revlm or gpt, an export loaded).

    prompt: text (str, encoded by the model's tokenizer) or a list of token
    ids. Returns the continuation alone: text for a text prompt, ids for
    ids. The model sees the last seq_len tokens. temperature 0 takes the
    likeliest token each time; otherwise the logits are divided by it and
    a token drawn, among the top_k likeliest (0: all). The same seed gives
    the same continuation, here and in `petra generate`. Raises ValueError
    for an empty prompt, an id outside the vocabulary or a bad option.
    """
    text_prompt = isinstance(prompt, (str, bytes))
    ids = model.encode(prompt) if text_prompt else [int(i) for i in prompt]
    if not ids:
        raise ValueError("prompt: empty")
    bad = [i for i in ids if not 0 <= i < model.vocab]
    if bad:
        raise ValueError(f"prompt: token {bad[0]} is outside the model's "
                         f"vocabulary of {model.vocab}")
    if (isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int)
            or max_new_tokens < 0):
        raise ValueError(f"max_new_tokens: {max_new_tokens!r} must be an "
                         "integer >= 0")
    if (not isinstance(temperature, (int, float)) or isinstance(
            temperature, bool) or not math.isfinite(temperature)
            or temperature < 0):
        raise ValueError(f"temperature: {temperature!r} must be a finite "
                         "number >= 0 (0 = greedy)")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"top_k: {top_k!r} must be an integer >= 0 "
                         "(0 = all tokens)")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed: {seed!r} must be an integer >= 0")
    draws = _MT19937_64(seed)
    was_training = model.training
    model.eval()
    out = []
    try:
        with torch.no_grad():
            for _ in range(max_new_tokens):
                window = ids[-model.seq_len:]
                x = torch.tensor([window], dtype=torch.int64)
                logits = model(x)[0, -1].float().tolist()
                if not all(math.isfinite(v) for v in logits):
                    raise ValueError("the model's logits are not finite "
                                     "(did its training diverge?)")
                # Likeliest first, ties by id (as the C++).
                order = sorted(range(len(logits)),
                               key=lambda i: (-logits[i], i))
                nxt = order[0]
                if temperature > 0:
                    k = min(top_k, len(order)) if top_k > 0 else len(order)
                    top = logits[order[0]]
                    weights = [math.exp((logits[order[i]] - top) / temperature)
                               for i in range(k)]
                    total = 0.0
                    for w in weights:
                        total += w
                    u = (draws() >> 11) * 2.0 ** -53 * total
                    i = 0
                    while i + 1 < k and u >= weights[i]:
                        u -= weights[i]
                        i += 1
                    nxt = order[i]
                ids.append(nxt)
                out.append(nxt)
    finally:
        model.train(was_training)
    return model.decode(out) if text_prompt else out
