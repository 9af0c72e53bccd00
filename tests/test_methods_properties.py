"""Property tests: the reward-family functions that read model text return well-formed values on any
text (tags broken or repeated, empty, unicode with lone surrogates and control characters)."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fspo_lite.scoring.claims import RuleBasedClaimExtractor
from fspo_lite.config import RLFHConfig
from fspo_lite.scoring.methods.caution import contains_answer
from fspo_lite.scoring.methods.klcf import claim_overlap, dedupe_claims
from fspo_lite.scoring.methods.rlfh import RuleBasedInformativeness, is_hedged, place_rewards
from fspo_lite.scoring.methods.statements import extract_statements, response_sentences

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PIECES = st.sampled_from(["<think>", "</think>", "<answer>", "</answer>", "Paris is the capital of France. ",
                          "I think it may be 42; ", ", and Berlin is big", "Dr. Smith", "\n", " ", ".", "\ud800",
                          "\x00", "東京は首都です。", "Unknown"])
TEXT = st.one_of(st.text(st.characters(exclude_categories=()), max_size=200),
                 st.lists(st.one_of(PIECES, st.text(max_size=6)), max_size=30).map("".join))


@SETTINGS
@given(TEXT)
def test_sentences_and_statements_stay_inside_the_text(text):
    spans = response_sentences(text)
    assert all(0 <= s < e <= len(text) for s, e in spans)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    [sentences], [statements] = extract_statements([text], RuleBasedClaimExtractor())
    assert sentences == spans
    for statement in statements:
        start, end = spans[statement.sentence]
        assert statement.end is None or start < statement.end <= end


@SETTINGS
@given(TEXT, TEXT)
def test_scorers_return_defined_values(text, other):
    assert isinstance(contains_answer(text, [other, "Paris"]), bool)
    assert isinstance(is_hedged(text, RLFHConfig().hedge_words), bool)
    assert RuleBasedInformativeness().score(other, [text], [text, other]) in ([a, b] for a in range(1, 6) for b in range(1, 6))
    assert 0.0 <= claim_overlap(text, other) <= 1.0
    assert dedupe_claims([text, other, text], 0.8)[0] == text


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50)), max_size=12), st.integers(0, 12),
       st.lists(st.integers(0, 60), max_size=5))
def test_placement_never_loses_or_invents_reward(offsets, length, ends):
    offsets = [(min(a, b), max(a, b)) for a, b in offsets]
    length = min(length, len(offsets))
    sentences = [(max(0, e - 3), e) for e in sorted(set(ends))]
    values, unlocated, unplaced = place_rewards(offsets, length, sentences, [], [], [1.0] * len(sentences))
    assert len(values) == length and unlocated == 0
    assert sum(values) + unplaced == len(sentences)  # every unit of reward is on a token or counted
