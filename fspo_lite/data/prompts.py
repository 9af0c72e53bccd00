"""Prompts: the <think>/<answer> format rendered through the tokenizer's chat template.

Closed-book by default, as in the FSPO paper: the evidence goes to the verifier, not to the
policy. `evidence_in_prompt=True` shows it (open-book), which is useful as an upper bound.

Small models (SmolLM2-135M) rarely use the tags from an instruction alone. Two aids, both
config values: `few_shot` worked examples as earlier chat turns, and `response_prefix`, text
that opens the assistant turn (default "<think>") so the reply starts inside the reasoning.
docs/prompting.md gives the measured format rates of each choice on the bundled model.
"""

from __future__ import annotations

from fspo_lite.data.examples import QAExample

QA_DEMONSTRATIONS = (
    ("Who wrote the novel Moby-Dick?",
     "<think>Moby-Dick is an American novel published in 1851. It was written by Herman Melville.</think>\n"
     "<answer>Herman Melville</answer>"),
    ("What is the largest ocean on Earth?",
     "<think>The oceans are the Pacific, Atlantic, Indian, Southern and Arctic. The Pacific Ocean is the largest."
     "</think>\n<answer>Pacific Ocean</answer>"),
)
MATH_DEMONSTRATIONS = (
    ("Tom has 3 boxes with 4 apples each. He eats 2 apples. How many apples are left?",
     "<think>3 boxes with 4 apples each hold 3 * 4 = 12 apples. After eating 2, 12 - 2 = 10 remain.</think>\n"
     "<answer>10</answer>"),
    ("What is 15% of 80?",
     "<think>15% of 80 is 0.15 * 80 = 12.</think>\n<answer>12</answer>"),
)


def user_message(example: QAExample, evidence_in_prompt: bool = False) -> str:
    if evidence_in_prompt and example.evidence:
        return f"Evidence:\n{example.evidence}\n\nQuestion: {example.question}"
    return example.question


def build_messages(
    example: QAExample, system_prompt: str | None, evidence_in_prompt: bool = False, few_shot: int = 0
) -> list[dict]:
    """System prompt, `few_shot` demonstration turns, then the question."""
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    demonstrations = MATH_DEMONSTRATIONS if example.task == "math" else QA_DEMONSTRATIONS
    for question, reply in demonstrations[:few_shot]:
        messages += [{"role": "user", "content": question}, {"role": "assistant", "content": reply}]
    messages.append({"role": "user", "content": user_message(example, evidence_in_prompt)})
    return messages


def render_prompt(tokenizer, messages: list[dict], response_prefix: str = "") -> str:
    """Prompt text for generation (a plain 'Role: text' layout when there is no chat template)."""
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    else:
        text = "\n\n".join(f"{m['role'].capitalize()}: {m['content']}" for m in messages) + "\n\nAssistant: "
    return text + response_prefix


def prompt_text(tokenizer, example: QAExample, data_config) -> str:
    """The full generation prompt for an example under a DataConfig."""
    messages = build_messages(example, data_config.system_prompt, data_config.evidence_in_prompt, data_config.few_shot)
    return render_prompt(tokenizer, messages, data_config.response_prefix)
