"""The user's own model, in the shapes a TRL user passes it: a name (hub id, local folder, 'smollm2-135m', 'tiny')
or a transformers model already loaded, with or without its tokenizer.

`model_name_of` says which name the run's config.model.name should carry (so that a checkpoint's config.yaml names the
model it was trained on, and `fspo-lite eval --adapter` loads that model); `prepare_user_policy` turns a loaded model
into the (model, tokenizer) pair training needs: the tokenizer from the model's own folder when none is given, and a
LoRA adapter from config.model when model.lora is on and the model has none yet. A wrong shape is one line, before
anything loads.
"""

from __future__ import annotations

from os import PathLike
from pathlib import Path
from typing import Any

from fspo_lite.models.policy import apply_lora, load_tokenizer, model_source


class UserModelError(TypeError):
    """The model given is not a name, a folder or a loaded transformers model; the message says which it was."""


def loaded_name(model: Any) -> str:
    """The hub id or folder a loaded transformers model came from ('' for one built from a config)."""
    name = getattr(model, "name_or_path", "") or getattr(getattr(model, "config", None), "_name_or_path", "")
    return str(name or "")


def model_name_of(model: Any, current: str) -> str:
    """The config.model.name for a user's `model`: the name itself, the folder of a loaded model (kept as
    `current` when that is the same model, e.g. the bundled one), or `current` for a model with no folder.
    UserModelError in one line for anything that is not a name or a loaded model."""
    if isinstance(model, (str, PathLike)):
        name = str(model)
        if not name.strip():
            raise UserModelError("model: an empty name; give a hub id, a local folder or a loaded transformers model")
        if name.startswith((".", "/", "~")) and not Path(name).expanduser().is_dir():
            raise UserModelError(f"model: {name!r} is not a folder (a local model is a folder holding config.json)")
        return name
    if not (hasattr(model, "generate") and hasattr(model, "parameters")):
        raise UserModelError(f"model: got {type(model).__name__}; expected a hub id, a local folder or a loaded "
                             "transformers model (AutoModelForCausalLM.from_pretrained(...))")
    name = loaded_name(model)
    if not name or str(model_source(current)) == name:
        return current
    return name


def prepare_user_policy(model: Any, tokenizer: Any, model_config) -> tuple[Any, Any]:
    """(model, tokenizer) for training from a loaded model: the tokenizer of the model's folder when `tokenizer` is
    None, left-padded with a pad token; a LoRA adapter from `model_config` when model.lora and the model has no
    adapter yet (a peft model is trained as it is)."""
    if tokenizer is None:
        name = loaded_name(model)
        if not name:
            raise UserModelError("model: a loaded model with no name_or_path to find its tokenizer by; pass "
                                 "tokenizer= too")
        tokenizer = load_tokenizer(name, trust_remote_code=model_config.trust_remote_code)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    if model_config.lora and not hasattr(model, "peft_config"):
        model = apply_lora(model, model_config)
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer
