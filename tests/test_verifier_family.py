"""Every verifier behind the one interface: probabilities or None, cache hits, batching = one by one.

The hub verifiers (nli, hhem) run on tiny stand-ins built here: a random-weight BERT classifier
and a model folder with its own code (loaded through trust_remote_code, as HHEM is).
"""

import json
import textwrap

import pytest

from fspo_lite.config import VerifierConfig
from fspo_lite.models.policy import ModelLoadError
from fspo_lite.scoring.verifiers import (VERIFIERS, CrossEncoderVerifier, EmbeddingVerifier, HHEMVerifier, LexicalVerifier,
                                 LLMJudgeVerifier, build_verifier)
from fspo_lite.scoring.verifiers.base import Verifier
from fspo_lite.scoring.verifiers.embedding import bundled_minilm_path, similarity_to_probability
from fspo_lite.scoring.verifiers.llm_judge import JUDGE_PROMPT, judge_messages
from fspo_lite.scoring.verifiers.nli import support_label_index

EVIDENCE = ("Gold is a chemical element with the symbol Au and atomic number 79. It is a dense, soft metal. "
            "Paris is the capital of France.")
SENTENCES = ["Gold has the symbol Au.", "Gold has atomic number 47.", "Paris is the capital of France.",
             "Bananas are a popular fruit in Brazil.", "", "Gold has the symbol Au."]


def check_contract(verifier: Verifier, fresh: Verifier):
    """Scores in [0, 1] or None, cached on the second call, equal when scored one pair at a time."""
    evidence = [EVIDENCE] * len(SENTENCES)
    first = verifier.score(evidence, SENTENCES)
    assert len(first) == len(SENTENCES)
    assert all(p is None or 0.0 <= p <= 1.0 for p in first)
    assert first[4] is None  # an empty sentence is never checkable
    assert first[0] == first[5]
    assert verifier.cache_misses == len(set(SENTENCES))  # the repeated pair was scored once
    hits = verifier.cache_hits
    assert verifier.score(evidence, SENTENCES) == first
    assert verifier.cache_hits == hits + len(SENTENCES) and verifier.cache_misses == len(set(SENTENCES))
    one_by_one = [fresh.score([EVIDENCE], [s])[0] for s in SENTENCES]
    assert one_by_one == pytest.approx(first, abs=1e-5)
    return first


def test_registry_lists_every_family():
    assert set(VERIFIERS) == {"lexical", "embedding", "likelihood", "nli", "hhem", "llm", "kb"}


def test_lexical_contract():
    scores = check_contract(LexicalVerifier(), LexicalVerifier())
    assert scores[0] > 0.5 > scores[1]


@pytest.fixture(scope="session")
def embedding_verifier():
    return EmbeddingVerifier(device="cpu")


def test_bundled_minilm_is_found():
    assert (bundled_minilm_path().rstrip("/") + "/config.json")


def test_embedding_contract(embedding_verifier):
    fresh = EmbeddingVerifier.__new__(EmbeddingVerifier)  # share the loaded encoder, not the caches
    fresh.__dict__.update(embedding_verifier.__dict__)
    Verifier.__init__(fresh)
    fresh.evidence_cache = type(embedding_verifier.evidence_cache)()
    scores = check_contract(embedding_verifier, fresh)
    assert scores[2] > scores[3]  # a sentence copied from the evidence beats an off-topic one
    similarity = embedding_verifier.similarities([EVIDENCE], ["Paris is the capital of France."])[0]
    assert similarity == pytest.approx(1.0, abs=1e-3)
    assert scores[2] == pytest.approx(similarity_to_probability(similarity, fresh.midpoint, fresh.slope))


def test_embedding_caches_evidence_embeddings(embedding_verifier):
    embedding_verifier.score(["Tokyo is the capital of Japan. It is large."] * 2, ["Tokyo is big.", "Japan is an island."])
    assert "Tokyo is the capital of Japan. It is large." in embedding_verifier.evidence_cache
    assert embedding_verifier.evidence_cache["Tokyo is the capital of Japan. It is large."].shape[0] == 2


def test_similarity_to_probability_by_hand():
    assert similarity_to_probability(0.5, 0.5, 10) == 0.5
    assert similarity_to_probability(0.7, 0.5, 10) == pytest.approx(1 / (1 + 2.718281828 ** -2))


@pytest.mark.parametrize("labels, expected", [
    ({0: "contradiction", 1: "entailment", 2: "neutral"}, 1),
    ({0: "ENTAILMENT", 1: "NEUTRAL", 2: "CONTRADICTION"}, 0),
    ({0: "not_entailment", 1: "entailment"}, 1),
    ({0: "consistent", 1: "inconsistent"}, 0),
    ({0: "LABEL_0", 1: "LABEL_1"}, 1),
    ({0: "LABEL_0"}, None),
])
def test_support_label_index(labels, expected):
    assert support_label_index(labels) == expected


def test_support_label_index_refuses_to_guess():
    with pytest.raises(ValueError, match="cannot tell"):
        support_label_index({0: "a", 1: "b", 2: "c"})


@pytest.fixture(scope="module")
def tiny_nli_dir(tmp_path_factory):
    """A random-weight BERT NLI classifier with the MiniLM tokenizer, saved like a hub model."""
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    path = tmp_path_factory.mktemp("tiny-nli")
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512,
                        id2label={0: "contradiction", 1: "entailment", 2: "neutral"},
                        label2id={"contradiction": 0, "entailment": 1, "neutral": 2})
    BertForSequenceClassification(config).save_pretrained(path)
    AutoTokenizer.from_pretrained(bundled_minilm_path()).save_pretrained(path)
    return str(path)


def test_nli_contract_and_probability(tiny_nli_dir):
    import torch

    config = VerifierConfig(name="nli", model=tiny_nli_dir, device="cpu", batch_size=4, max_evidence_tokens=32)
    verifier = build_verifier(config)
    assert isinstance(verifier, CrossEncoderVerifier) and verifier.label_index == 1
    check_contract(verifier, build_verifier(config))
    encoded = verifier.tokenizer([EVIDENCE], [SENTENCES[1]], truncation="only_first", max_length=32 + 64,
                                 return_tensors="pt")
    with torch.no_grad():
        expected = torch.softmax(verifier.model(**encoded).logits, dim=-1)[0, 1].item()
    fresh = build_verifier(config)
    assert fresh.score([EVIDENCE], [SENTENCES[1]])[0] == pytest.approx(expected, abs=1e-5)
    long_evidence = " ".join([EVIDENCE] * 200)  # far beyond 512 tokens: truncated, not an error
    assert 0.0 <= fresh.score([long_evidence], [SENTENCES[0]])[0] <= 1.0


def test_nli_unreachable_model_is_a_clear_error(tmp_path):
    with pytest.raises(ModelLoadError, match="could not load"):
        build_verifier(VerifierConfig(name="nli", model=str(tmp_path / "missing-model"), device="cpu"))


STUB_CODE = textwrap.dedent('''
    import torch
    from transformers import PretrainedConfig, PreTrainedModel


    class StubHHEMConfig(PretrainedConfig):
        model_type = "stub-hhem"


    class StubHHEM(PreTrainedModel):
        """Stands in for HHEM: predict(pairs) -> share of hypothesis words found in the premise."""

        config_class = StubHHEMConfig

        def __init__(self, config):
            super().__init__(config)
            self.scale = torch.nn.Parameter(torch.ones(1))
            self.post_init()

        def predict(self, pairs):
            scores = []
            for premise, hypothesis in pairs:
                words = set(hypothesis.lower().strip(".").split())
                scores.append(len(words & set(premise.lower().replace(".", "").split())) / max(1, len(words)))
            return torch.tensor(scores) * self.scale.detach()
''')


@pytest.fixture(scope="module")
def stub_hhem_dir(tmp_path_factory):
    import importlib.util

    path = tmp_path_factory.mktemp("stub-hhem")
    (path / "stub_hhem.py").write_text(STUB_CODE)
    spec = importlib.util.spec_from_file_location("stub_hhem", path / "stub_hhem.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.StubHHEM(module.StubHHEMConfig()).save_pretrained(path)
    config = json.loads((path / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "stub_hhem.StubHHEMConfig",
                          "AutoModelForSequenceClassification": "stub_hhem.StubHHEM"}
    (path / "config.json").write_text(json.dumps(config))
    return str(path)


def test_hhem_needs_explicit_trust_remote_code(stub_hhem_dir):
    with pytest.raises(ModelLoadError, match="trust_remote_code"):
        build_verifier(VerifierConfig(name="hhem", model=stub_hhem_dir))


def test_hhem_uses_the_models_predict(stub_hhem_dir):
    config = VerifierConfig(name="hhem", model=stub_hhem_dir, trust_remote_code=True, device="cpu", batch_size=2)
    verifier = build_verifier(config)
    assert isinstance(verifier, HHEMVerifier)
    scores = check_contract(verifier, build_verifier(config))
    assert scores[2] == pytest.approx(1.0)  # every word of the sentence is in the evidence
    assert scores[3] == pytest.approx(1 / 7)  # only "in"


class FixedJudge:
    """A chat model whose P(Yes) is 0.8 when the statement appears verbatim in the evidence, else 0.1."""

    def __init__(self):
        self.prompts = []

    def yes_probability(self, prompts):
        self.prompts += prompts
        out = []
        for messages in prompts:
            text = messages[-1]["content"]
            evidence = text.split("Evidence:\n", 1)[1].split("\n\nStatement: ", 1)[0]
            statement = text.split("Statement: ", 1)[1].split("\n\n", 1)[0]
            out.append(0.8 if statement in evidence else 0.1)
        return out


def test_llm_judge_contract_and_prompt():
    judge = LLMJudgeVerifier(FixedJudge(), batch_size=2)
    scores = check_contract(judge, LLMJudgeVerifier(FixedJudge(), batch_size=1))
    assert scores[2] == 0.8 and scores[1] == 0.1
    messages = judge_messages("word " * 1000, "A claim.", max_evidence_words=5)
    assert messages[0]["role"] == "system"
    assert messages[1]["content"] == JUDGE_PROMPT.format(evidence="word word word word word", sentence="A claim.")


def test_llm_judge_on_the_tiny_local_model(tiny_policy):
    from fspo_lite.scoring.llm import LocalChatModel

    model, tokenizer = tiny_policy
    was_training = model.training
    judge = LLMJudgeVerifier(LocalChatModel(model, tokenizer, batch_size=4))
    scores = judge.score([EVIDENCE] * 3, SENTENCES[:3])
    model.train(was_training)
    assert all(0.0 < p < 1.0 for p in scores)


def test_mean_gain_by_hand():
    import torch

    from fspo_lite.scoring.verifiers.likelihood import mean_gain

    with_evidence = torch.tensor([[-1.0, -2.0, -9.0], [-0.5, -0.5, -0.5]])
    without = torch.tensor([[-3.0, -2.5, -1.0], [-1.0, -1.0, -1.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    assert mean_gain(with_evidence, without, mask).tolist() == pytest.approx([(2.0 + 0.5) / 2, 0.5])


def test_likelihood_gains_are_the_same_with_a_shared_evidence_pass(tiny_policy):
    from fspo_lite.scoring.verifiers import LikelihoodVerifier

    model, tokenizer = tiny_policy
    evidence = [EVIDENCE, EVIDENCE, "Gold has the symbol Au.", EVIDENCE]  # repeats, and one of another length
    sentences = [SENTENCES[0], SENTENCES[1], "Gold is Au.", SENTENCES[0] + " Indeed."]
    gains = [LikelihoodVerifier(model, tokenizer, batch_size=4, share_evidence=share).gains(evidence, sentences)
             for share in (False, True)]
    assert gains[1] == pytest.approx(gains[0], abs=1e-5)


def test_likelihood_scores_a_sentence_repeated_with_the_same_evidence_once(tiny_policy):
    """Four sampled answers to one question often share a sentence: each (evidence, sentence) pair runs once, and
    every row asking for it gets the reference gain; the same sentence with other evidence is scored again."""
    from fspo_lite.scoring.verifiers import LikelihoodVerifier

    model, tokenizer = tiny_policy
    other = "Gold has the symbol Au."

    def traced(evidence, sentences):  # gains, and the rows of every forward pass (a fresh verifier each time)
        rows = []
        hook = model.get_input_embeddings().register_forward_hook(lambda m, args, out: rows.append(args[0].shape))
        gains = LikelihoodVerifier(model, tokenizer, batch_size=8).gains(evidence, sentences)
        hook.remove()
        return gains, rows

    evidence = [EVIDENCE, EVIDENCE, EVIDENCE, other, EVIDENCE]
    sentences = [SENTENCES[0], SENTENCES[1], "  " + SENTENCES[0], SENTENCES[0], SENTENCES[1]]
    gains, rows = traced(evidence, sentences)
    reference = LikelihoodVerifier(model, tokenizer, share_evidence=False).gains(evidence, sentences)
    assert gains == pytest.approx(reference, abs=1e-5)
    assert gains[0] == gains[2] and gains[1] == gains[4]
    assert gains[3] != pytest.approx(gains[0], abs=1e-4)  # other evidence, another gain
    # the model does exactly the work of the three distinct pairs
    unique_gains, unique_rows = traced([EVIDENCE, EVIDENCE, other], [SENTENCES[0], SENTENCES[1], SENTENCES[0]])
    assert rows == unique_rows and unique_gains == [gains[0], gains[1], gains[3]]


def test_evidence_states_keep_the_most_recently_used_within_their_bytes():
    import torch

    from fspo_lite.scoring.verifiers.likelihood import EvidenceStates

    def entry(floats):  # one layer's keys and values of `floats` float32 each, and a 2-float next-token row
        return [(torch.zeros(floats), torch.zeros(floats))], torch.zeros(2)

    states = EvidenceStates(max_mb=(2 * 10 + 2) * 4 * 2 / 2**20)  # room for two entries of 10 + 10 + 2 floats
    assert EvidenceStates.size(entry(10)) == 88
    states.put("a", entry(10))
    states.put("b", entry(10))
    assert states.bytes == 176 and list(states.entries) == ["a", "b"]
    assert states.get("a") is not None  # "a" is now the most recently used ...
    states.put("c", entry(10))  # ... so "b" makes room
    assert list(states.entries) == ["a", "c"] and states.bytes == 176
    assert states.get("b") is None and (states.hits, states.misses) == (1, 1)
    states.put("huge", entry(100))  # larger than the whole budget: not kept, nothing dropped for it
    assert list(states.entries) == ["a", "c"]
    nothing = EvidenceStates(max_mb=0)
    nothing.put("a", entry(1))
    assert nothing.entries == {} and nothing.bytes == 0


def test_likelihood_keeps_each_evidence_state_between_calls(tiny_policy):
    from fspo_lite.scoring.verifiers import LikelihoodVerifier

    model, tokenizer = tiny_policy
    was_training = model.training
    other = "Gold has the symbol Au."
    evidence, sentences = [EVIDENCE, other, EVIDENCE], [SENTENCES[0], "Gold is Au.", SENTENCES[2]]
    verifier = LikelihoodVerifier(model, tokenizer, batch_size=2)
    first = verifier.gains(evidence, sentences)
    assert (verifier.evidence_states.hits, verifier.evidence_states.misses) == (0, 2)  # each context encoded once
    again = verifier.gains([other, EVIDENCE], ["Gold is Au.", SENTENCES[1]])
    assert (verifier.evidence_states.hits, verifier.evidence_states.misses) == (2, 2)  # and not again
    reference = LikelihoodVerifier(model, tokenizer, share_evidence=False)
    assert first == pytest.approx(reference.gains(evidence, sentences), abs=1e-5)
    assert again == pytest.approx(reference.gains([other, EVIDENCE], ["Gold is Au.", SENTENCES[1]]), abs=1e-5)
    assert again[0] == pytest.approx(first[1], abs=1e-6)
    model.train(was_training)


def test_a_judge_loaded_by_name_is_loaded_once_per_process(monkeypatch, tiny_policy):
    import fspo_lite.models.policy
    from fspo_lite.scoring.verifiers import LikelihoodVerifier
    from fspo_lite.scoring.verifiers import likelihood

    model, tokenizer = tiny_policy
    loads = []
    monkeypatch.setattr(likelihood, "_SHARED", {})
    monkeypatch.setattr(fspo_lite.models.policy, "load_model", lambda config: loads.append(config.name) or model)
    monkeypatch.setattr(fspo_lite.models.policy, "load_tokenizer", lambda name: tokenizer)
    was_training = model.training
    first, second = LikelihoodVerifier(name="judge-a", device="cpu"), LikelihoodVerifier(name="judge-a", device="cpu")
    third = LikelihoodVerifier(name="judge-b", device="cpu")
    model.train(was_training)
    assert loads == ["judge-a", "judge-b"]
    assert second.evidence_states is first.evidence_states and third.evidence_states is not first.evidence_states


def test_likelihood_contract_on_the_tiny_model(tiny_policy):
    from fspo_lite.scoring.verifiers import LikelihoodVerifier

    model, tokenizer = tiny_policy
    was_training = model.training
    verifier = LikelihoodVerifier(model, tokenizer, batch_size=4, max_evidence_tokens=16)
    check_contract(verifier, LikelihoodVerifier(model, tokenizer, batch_size=1, max_evidence_tokens=16))
    gain = verifier.gains([EVIDENCE], [SENTENCES[0]])[0]
    model.train(was_training)
    assert verifier.score([EVIDENCE], [SENTENCES[0]])[0] == pytest.approx(
        1 / (1 + 2.718281828459045 ** (-verifier.slope * (gain - verifier.midpoint))), abs=1e-6)
