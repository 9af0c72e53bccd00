"""An LLM as the verifier: it reads the evidence and the sentence and answers Yes or No.

P(supported) is the judge's probability of "Yes" among Yes/No on its first reply token
(`fspo_lite.scoring.llm`), so one forward pass per pair suffices. A server without log-probs gives
1.0 / 0.0 from the parsed reply, and None when the reply is neither (counted by the backend).

The judge prompt (JUDGE_PROMPT below, documented in docs/verifiers.md) asks whether the evidence
states or directly implies the sentence; the system message fixes the reply to one word.
The local default is the bundled SmolLM2-135M-Instruct, which runs offline but is a weak judge;
point `verifier.model` at a stronger local model or `verifier.server_url` at a vLLM server.
"""

from __future__ import annotations

from fspo_lite.scoring.llm import ChatModel, ChatModelSettings, build_chat_model
from fspo_lite.scoring.verifiers.base import Verifier, batches

JUDGE_SYSTEM = "You check statements against evidence. Reply with one word: Yes or No."
JUDGE_PROMPT = (
    "Evidence:\n{evidence}\n\n"
    "Statement: {sentence}\n\n"
    "Does the evidence state or directly imply the statement? Answer Yes or No."
)


def judge_messages(evidence: str, sentence: str, max_evidence_words: int = 400) -> list[dict]:
    """The chat messages sent to the judge for one pair (evidence cut to `max_evidence_words` words)."""
    cut = " ".join(evidence.split()[:max_evidence_words])
    return [{"role": "system", "content": JUDGE_SYSTEM},
            {"role": "user", "content": JUDGE_PROMPT.format(evidence=cut, sentence=sentence.strip())}]


class LLMJudgeVerifier(Verifier):
    """P(supported) = P(Yes) of a chat model asked whether the evidence supports the sentence."""

    name = "llm"

    def __init__(self, chat_model: ChatModel, batch_size: int = 8, max_evidence_words: int = 400, **kwargs):
        super().__init__(**kwargs)
        self.chat_model = chat_model
        self.batch_size = batch_size
        self.max_evidence_words = max_evidence_words

    @classmethod
    def from_config(cls, config) -> "LLMJudgeVerifier":
        chat_model = build_chat_model(config.model, ChatModelSettings.of(config), config.batch_size)
        return cls(chat_model, batch_size=config.batch_size, max_evidence_words=config.max_evidence_tokens)

    def _score(self, evidence: list[str], sentences: list[str]) -> list[float | None]:
        result: list[float | None] = [None] * len(sentences)
        checkable = [i for i, s in enumerate(sentences) if s.strip() and evidence[i].strip()]
        for chunk in batches(checkable, self.batch_size):
            prompts = [judge_messages(evidence[i], sentences[i], self.max_evidence_words) for i in chunk]
            for i, p in zip(chunk, self.chat_model.yes_probability(prompts)):
                result[i] = p
        return result
