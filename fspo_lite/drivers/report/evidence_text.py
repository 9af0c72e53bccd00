"""The evidence-in-the-prompt readings in words (summary.md): the answer to H1 and to the strict arm's question in
plain words, the tables of the differences they read, the caveats and the multiplicity note registered with them
(docs/statistics.md, "Evidence in the prompt, and the flip's escape closed"). Pure: reads the dict that
`fspo_lite.drivers.report.evidence_readings.evidence_section` makes (as summary.json holds it).
"""

from __future__ import annotations

import math
from typing import Sequence

from fspo_lite.drivers.report.evidence_readings import CTXEVAL
from fspo_lite.drivers.report.study import format_interval

CAVEAT = ("Open-book training measures faithfulness to evidence the model sees, not what the model knows; FSPO's "
          "paper is closed-book. A *yes* here would say that the flip needs reachable supported sentences, not that "
          "FSPO makes a closed-book 135M model more factual.")
MULTIPLICITY = ("These are about ten readings; one in twenty can fall outside its interval by chance, so a single "
                "reading that resolves is weak evidence alone. Welch's interval over seed values is beside each.")
LABELS = {"step_hallucination": "step hallucination", "supported_per_response": "supported sentences / response",
          "padding_per_response": "padding: supported sentences without the answer / response",
          "copied_share": "copying: sentences copied from the evidence", "bare_name": "bare name: no checkable sentence",
          "accuracy": "accuracy", "sentences_per_response": "reasoning sentences / response",
          "not_attempted": "not attempted (Unknown)", "malformed": "malformed answers",
          "near_duplicates_per_response": "near-duplicate sentences / response",
          "uncheckable_per_response": "sentences the judge cannot check / response", "cut_at_limit": "cut at the limit"}
SHARES = ("step_hallucination", "copied_share", "bare_name", "accuracy", "not_attempted", "malformed", "cut_at_limit")


def label(metric: str) -> str:
    """A metric's name in the tables: what it counts, with its judge."""
    name, _, judge = metric.partition("@")
    return LABELS.get(name, name) + (f" ({judge})" if judge else "")


def number(metric: str, value, low=math.nan, high=math.nan, signed: bool = False) -> str:
    """A value (with its interval when given) in the metric's unit: % (points for differences) or a count."""
    value, low, high = (math.nan if v is None else float(v) for v in (value, low, high))
    return format_interval("accuracy" if metric.split("@")[0] in SHARES else "count", value, low, high, signed)


def difference(metric: str, row: dict | None) -> str:
    """'-3.1 [-5.0, -1.2] (down; seeds, Welch [-6.0, -0.1])' for a difference row; 'n/a' without one."""
    if not row or row.get("diff") is None or math.isnan(float(row["diff"])):
        return "n/a"
    text = f"{number(metric, row['diff'], row['low'], row['high'], True)} ({row.get('move', 'n/a')}"
    if row.get("welch_low") is not None and not math.isnan(float(row["welch_low"])):
        text += (f"; seeds, Welch [{number(metric, row['welch_low'], signed=True)}, "
                 f"{number(metric, row['welch_high'], signed=True)}]")
    return text + ")"


def h1_words(h1: dict) -> str:
    """H1's answer in plain words."""
    rows, judge = h1["rows"], "kb"
    rate, supported = (f"{k}@{judge}" for k in ("step_hallucination", "supported_per_response"))
    said = (f"kb step hallucination {difference(rate, rows.get(rate))}, kb-supported sentences per response "
            f"{difference(supported, rows.get(supported))}")
    answer = h1["answer"]
    if answer == "inconclusive":
        return (f"**Inconclusive**, as registered: {'; '.join(h1['reasons'])}. Described only, read by no rule: "
                f"fspo+ctx - grpo+ctx, {said}.")
    if answer == "refuted":
        return (f"**Refuted**: with the evidence in the prompt, FSPO still writes fewer kb-supported sentences per "
                f"response than GRPO ({difference(supported, rows.get(supported))}): the evidence does not stop it "
                f"from saying less (kb step hallucination {difference(rate, rows.get(rate))}).")
    if answer.startswith("yes"):
        named = [judge, *h1["second_judges"]]
        judges = ", ".join(named[:-1]) + " and " + named[-1]
        text = (f"**{answer[0].upper() + answer[1:]}**: with the evidence in the prompt, FSPO's step hallucination "
                f"falls against GRPO's under {judges}, and its kb-supported sentences per response do not fall ({said}; "
                f"kb at matched length: {difference(rate, h1.get('matched'))}).")
        if h1["guards_up"]:
            up = h1["guards_up"]
            text += (f" But {' and '.join(up)} {'moves' if len(up) == 1 else 'move'} up against grpo+ctx: the gain "
                     "comes at least partly that way, not only from stating the asked attribute faithfully.")
        return text
    return f"**No**: H1's rule is not met ({'; '.join(h1['why_not']) or 'see the table'}). ({said}.)"


def strict_words(strict: dict) -> str:
    """The strict arm's answer in plain words."""
    fspo, grpo = strict["versus_fspo"], strict["versus_grpo"]
    bare, supported = "bare_name@kb", "supported_per_response@kb"
    escape = f"bare-name share, fspo+strict - fspo: {difference(bare, fspo.get(bare))}"
    restores = (f"kb-supported sentences per response {difference(supported, fspo.get(supported))} against fspo, "
                f"{difference(supported, grpo.get(supported))} against grpo")
    moved = ", ".join(strict["moved_to"]) or "none of the four registered places moves up"
    if not strict["closed"]:
        return (f"**The escape was not closed** ({escape}). Described only: {restores}; pressure elsewhere: {moved}.")
    return (f"The escape was closed ({escape}). **{strict['answer'][0].upper() + strict['answer'][1:]}**: "
            f"{restores}; pressure elsewhere: {moved}.")


def table(rows: dict, means: dict, arms: Sequence[str], pair: str) -> list[str]:
    """A table of readings: each arm's mean, then the difference with its intervals and where it moves."""
    lines = [f"| reading | {' | '.join(arms)} | {pair} [95% interval] (moves; Welch over seeds) | survives |",
             "|---|" + "---|" * (len(arms) + 2)]
    for metric, row in rows.items():
        if row is None:
            continue
        values = [number(metric, (means.get(metric) or {}).get(arm, math.nan)) for arm in arms]
        lines.append(f"| {label(metric)} | {' | '.join(values)} | {difference(metric, row)} | "
                     f"{row.get('survives', '')} |")
    return lines


def conditions(h1: dict) -> str:
    """The three inconclusive conditions with their measured values."""
    spread, cut = h1["spread"], h1.get("cut_per_arm") or {}
    per = ", ".join(f"{a} {100 * v:.0f}%" for a, v in spread.items() if a != "pooled" and v is not None
                    and not math.isnan(v))
    cuts = ", ".join(f"{a} {100 * v:.1f}%" for a, v in cut.items() if v is not None and not math.isnan(v))
    return (f"Inconclusive conditions, as measured: grpo+ctx's kb step hallucination {number('accuracy', h1['room'])}% "
            f"(inconclusive below 15%); training groups without reward spread "
            f"{number('accuracy', spread.get('pooled'))}% of the ctx arms' steps ({per}; inconclusive above 50%); "
            f"held-out responses cut at the token limit {number('accuracy', h1['cut'])}% ({cuts}; inconclusive above "
            "20%).")


def set_aside_only(section: dict | None) -> bool:
    """Whether the section only names arms set aside from the main tables (no ctx, strict or control run)."""
    return bool(section) and set(section) == {"set_aside"}


def aside_line(arms: Sequence[str], lead: str, why: str) -> str:
    """The sentence that names the arms set aside from the main tables, with why."""
    return (f"{lead}: {', '.join(arms)} (their held-out prompts {why}, so they are not compared with the others "
            "there).")


def evidence_lead(section: dict | None) -> list[str]:
    """One line for the top of summary.md: both answers, or what is not read yet."""
    if not section or set_aside_only(section):
        return []
    h1 = (section.get("h1") or {}).get("answer") or "; ".join(section.get("h1_not_read") or []) or "n/a"
    strict = (section.get("strict") or {}).get("answer") or "; ".join(section.get("strict_not_read") or []) or "n/a"
    return [f"- Evidence in the prompt: H1 (fspo+ctx - grpo+ctx) **{h1}**; closing the bare-name escape "
            f"(fspo+strict) **{strict}**. One reading in twenty can fall outside its interval by chance."]


def evidence_markdown(section: dict | None) -> list[str]:
    """summary.md's section on the registered readings (none when no ctx, strict or control run exists; only the
    set-aside arms named when they are all it holds)."""
    if not section:
        return []
    if set_aside_only(section):
        return ["", "## Arms asked with another held-out prompt", "",
                aside_line(section["set_aside"], "Not in the tables above", "differ from the baseline's in showing "
                           "the evidence")]
    lines = ["", "## Evidence in the prompt, and the flip's escape closed", "",
             "Registered before these runs (docs/statistics.md, \"Evidence in the prompt, and the flip's escape "
             "closed\"). Primary judge kb. Each difference is the study's paired bootstrap over questions (as "
             "clusters) and seeds, with Welch's interval over seed values beside it; it *moves down* or *up* when "
             "its 95% interval lies below or above 0, and *holds 0* otherwise. A reading is made only when all "
             f"{len(section.get('seeds') or [])} registered seeds of every arm it reads are in.", ""]
    if section.get("set_aside"):
        lines += [aside_line(section["set_aside"], "Not in the tables above, read here only",
                             "show the evidence and the baseline's do not"), ""]
    pre = section.get("preflight")
    if pre:
        lines += [f"Pre-flight (the base model with the evidence prompt): {pre['supported']} of {pre['sentences']} "
                  f"second reasoning sentences kb-supported, {100 * pre['share']:.1f}% [{100 * pre['low']:.1f}, "
                  f"{100 * pre['high']:.1f}] (gate 30%, point estimate: {'passed' if pre['passes'] else 'not passed'}).",
                  ""]
    else:
        lines += [f"Pre-flight: no reading found ({section.get('preflight_path')}).", ""]
    lines += ["### H1: with the evidence visible, does FSPO's step hallucination fall against GRPO's while its "
              "supported sentences do not?", ""]
    h1 = section.get("h1")
    if not h1:
        lines += [f"- {line}." for line in section.get("h1_not_read") or []]
    else:
        lines += [h1_words(h1), "", *table(h1["rows"], h1["means"], ["fspo+ctx", "grpo+ctx"], "fspo+ctx - grpo+ctx"),
                  f"| {label('step_hallucination@kb')}, matched length | | | {difference('step_hallucination@kb', h1['matched'])} | "
                  f"{(h1['matched'] or {}).get('survives', '')} |", "", conditions(h1), "",
                  "Guards (a guard that moves up turns a yes into \"yes by a guarded route\"): padding, copying and "
                  "bare name, rows above.", ""]
        if section.get("interaction"):
            lines.append("The interaction (fspo+ctx - grpo+ctx) - (fspo - grpo), described (H1 is read on the ctx pair "
                         "alone): " + "; ".join(f"{label(r['metric'])} {difference(r['metric'], r)}"
                                                for r in section["interaction"]) + ".")
        else:
            lines += [f"- Interaction: {line}." for line in section.get("interaction_not_read") or []]
    lines += ["", "### fspo+strict: does closing the bare-name escape restore supported sentences or move the "
              "pressure elsewhere?", ""]
    strict = section.get("strict")
    if not strict:
        lines += [f"- {line}." for line in section.get("strict_not_read") or []]
    else:
        lines += [strict_words(strict), "", *table(strict["versus_fspo"], strict["means"], ["fspo+strict", "fspo", "grpo"],
                                                   "fspo+strict - fspo")]
        row = strict["versus_grpo"].get("supported_per_response@kb")
        lines.append(f"| {label('supported_per_response@kb')}, fspo+strict - grpo | | | | "
                     f"{difference('supported_per_response@kb', row)} | {(row or {}).get('survives', '')} |")
    lines += control_markdown(section)
    return lines + ["", f"Multiplicity: {MULTIPLICITY}", "", f"What it can and cannot show: {CAVEAT}"]


def control_markdown(section: dict) -> list[str]:
    """The evaluation-only control, described (no rule reads it): each arm's means, then the differences."""
    control = section.get("control")
    waiting = section.get("control_not_read") or []
    if not control and not any(section.get("arms", {}).get(a) for a in CTXEVAL):
        return []
    lines = ["", "### The evaluation-only control: closed-book adapters asked with the evidence shown", "",
             "Described, read by no rule: grpo+ctxeval and fspo+ctxeval train as grpo and fspo do (closed-book) and "
             "are asked their held-out questions with the evidence in the prompt, which shows what the prompt does "
             "without training with it. Its differences are more readings beside the ten above, so more of them can "
             "fall outside their intervals by chance.", ""]
    if not control:
        return lines + [f"- {line}." for line in waiting]
    same = control.get("same_training") or {}
    seeds = len(section.get("seeds") or [])
    repeated = ", ".join(f"{a} {len(v)} of {seeds}" for a, v in same.items())
    lines += [f"Seeds whose training logged the closed-book arm's rewards step for step: {repeated}. Where fewer than "
              "all, the control's adapters are new draws of the same training, not the closed-book arms' own, and a "
              "control - closed-book difference holds that draw too (the seed resampling covers it).", ""]
    arms, means = control["arms"], control["means"]
    lines += [f"| reading | {' | '.join(arms)} |", "|---|" + "---|" * len(arms)]
    lines += [f"| {label(m)} | {' | '.join(number(m, values.get(a, math.nan)) for a in arms)} |"
              for m, values in means.items()]
    metrics = list(control["pairs"][0]["rows"]) if control["pairs"] else []
    lines += ["", f"| difference | {' | '.join(label(m) for m in metrics)} |", "|---|" + "---|" * len(metrics)]
    lines += [f"| {p['arm']} - {p['reference']} | {' | '.join(difference(m, p['rows'].get(m)) for m in metrics)} |"
              for p in control["pairs"]]
    return lines


def h1_context(section: dict) -> str:
    """Beside H1's answer, in words: each inconclusive condition's value beside its line, and the interaction of
    the two-by-two in kb-supported sentences (described, no rule reads it); '' without a reading."""
    h1 = section.get("h1")
    if not h1:
        return ""
    text = (f"Inconclusive lines: grpo+ctx's kb step hallucination {number('accuracy', h1['room'])}% (line 15%), "
            f"groups without reward spread {number('accuracy', h1['spread'].get('pooled'))}% (line 50%), responses "
            f"cut at the token limit {number('accuracy', h1['cut'])}% (line 20%).")
    row = next((r for r in section.get("interaction") or [] if r["metric"] == "supported_per_response@kb"), None)
    if row:
        said = {"up": "fewer supported sentences against GRPO than it does closed-book",
                "down": "more supported sentences against GRPO than it does closed-book",
                "holds 0": "about as many supported sentences against GRPO as it does closed-book"}
        gone = ("; open-book, FSPO's supported sentences do not fall against GRPO's"
                if row.get("move") == "up" and h1.get("supported") != "down" else "")
        text += (f" Described, read by no rule: the 2x2 interaction in kb-supported sentences per response, "
                 f"(fspo+ctx - grpo+ctx) - (fspo - grpo), is {difference(row['metric'], row)}: with the evidence "
                 f"shown, FSPO gives up {said.get(row.get('move'), 'n/a')}{gone}.")
    return text


def control_words(section: dict) -> str:
    """The evaluation-only control in two sentences, for the README: what the prompt does to each closed-book
    adapter, what training with the evidence adds, and how many of the control's responses hit the token limit;
    '' until it is read."""
    control = section.get("control")
    if not control:
        return ""
    pairs = {(p["arm"], p["reference"]): p["rows"] for p in control["pairs"]}

    def said(arm: str, reference: str, metric: str) -> str:
        row = (pairs.get((arm, reference)) or {}).get(metric)
        return "n/a" if not row else f"{number(metric, row['diff'], row['low'], row['high'], True)} ({row['move']})"

    rate, supported = "step_hallucination@kb", "supported_per_response@kb"
    cut = control["means"].get("cut_at_limit") or {}
    return (f"The evaluation-only control (described, no rule): shown the evidence at test only, the closed-book "
            f"adapters' kb step hallucination changes by {said('grpo+ctxeval', 'grpo', rate)} points (grpo) and "
            f"{said('fspo+ctxeval', 'fspo', rate)} (fspo), with {number('accuracy', cut.get('grpo+ctxeval'))}% and "
            f"{number('accuracy', cut.get('fspo+ctxeval'))}% of their responses cut at the token limit; training "
            f"with the evidence changes kb-supported sentences per response by {said('grpo+ctx', 'grpo+ctxeval', supported)} "
            f"(grpo) and {said('fspo+ctx', 'fspo+ctxeval', supported)} (fspo) over showing it at test only.")


def evidence_paragraph(section: dict | None) -> str:
    """Both answers in one paragraph with the caveat, for a README block ('' when there is no reading)."""
    if not section or set_aside_only(section):
        return ""
    h1 = (f"{h1_words(section['h1'])} {h1_context(section)} {control_words(section)}".rstrip() if section.get("h1")
          else "; ".join(section.get("h1_not_read") or []) + ".")
    strict = (strict_words(section["strict"]) if section.get("strict")
              else "; ".join(section.get("strict_not_read") or []) + ".")
    return (f"**Evidence in the prompt (H1, fspo+ctx - grpo+ctx).** {h1} **Closing the bare-name escape "
            f"(fspo+strict - fspo).** {strict} {MULTIPLICITY} {CAVEAT}")
