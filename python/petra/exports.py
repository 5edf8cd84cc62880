"""Loading an export as the network it holds, with nothing else to say.

Every export `petra` writes carries its network's spec (``input.model``,
the job's ModelSpec as JSON) and a language model's SentencePiece model
(``input.tokenizer``), so ``petra.models.load("job-1.pt")`` builds the
network, loads the weights strictly and returns it in eval mode. An export
written before ``input.model`` existed is refused, saying to build the
network by hand.
"""

import json

import torch


def load(export, map_location="cpu"):
    """The network of `export` (a path, or the state_dict torch.load gave),
    its weights loaded strictly, in eval mode. Raises ValueError when the
    export does not say its network."""
    from . import models  # this module is part of petra.models' API

    state = (export if isinstance(export, dict) else torch.load(
        export, map_location=map_location))
    described = state.get("input.model")
    if not isinstance(described, torch.Tensor) or described.numel() == 0:
        raise ValueError(
            "the export does not say its network (it predates input.model): "
            "build it with petra.models.build(...) with the sizes it was "
            "trained with, then load_state_dict(torch.load(path))")
    try:
        model_spec = json.loads(bytes(described.tolist()).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"the export's input.model is not JSON: {e}") from e
    spec = {"model": model_spec}
    tokenizer = state.get("input.tokenizer")
    arch = str(model_spec.get("architecture", "")).lower()
    if arch.endswith(models.LANGUAGE_MODELS):
        sentencepiece = isinstance(tokenizer, torch.Tensor) and bool(
            tokenizer.numel())
        spec["dataset"] = {"kind": "DATASET_KIND_TEXT", "text": {
            "tokenizer": "TOKENIZER_SENTENCEPIECE" if sentencepiece
            else "TOKENIZER_BYTES"}}
    network = models.from_spec(spec)
    network.load_state_dict(state, strict=True)
    return network.eval()
