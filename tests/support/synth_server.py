"""A scripted scenario writer for ``JudgeServer``: answers the synthetic pipeline's requests like a model
that reads them, misbehaving on purpose for chosen scenario numbers.

It reads what a model would read: the scenario number and the planned findings ("N. name: question /
Required answer: X") in the hidden-description request, the hidden description (which it tags
``[case K]``) in the scenario request, the validator's message in a repair request, and the conversation
in a judge's request. Its replies depend only on the request, so a resumed run gets the same answers.

``behaviours`` maps a scenario number (1-based plan index) to one of ``BEHAVIOURS``; others are ``ok``.
``fault_for`` (pass it to ``JudgeServer(fault_for=...)``) injects the server faults some behaviours need.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from collections.abc import Mapping
from typing import Any

BEHAVIOURS = (
    "ok",  # a valid scenario whose ideal replies pass the rules
    "hidden_500",  # every hidden-description request answers 500: hidden_failed
    "scenario_truncated",  # every scenario reply is cut mid-JSON: scenario_failed
    "truncated_once",  # the first scenario reply is cut, the retry is fine: kept
    "malformed",  # every scenario reply is prose, not JSON: scenario_failed
    "invalid",  # an unknown top-level field, also after repair: invalid
    "invalid_repaired",  # an answer outside the domain, fixed by the repair request: kept
    "off_path",  # the last step answered against the plan, also after repair: off_path
    "off_path_repaired",  # the same, fixed by the repair request: kept
    "ideal_fail",  # ideal replies without the findings: regrade_ideal_failed
    "wrong_passes",  # the wrong reply states the right finding: regrade_wrong_passed
    "dup_exact",  # the same prompt as every other dup_exact item: all but the first are duplicate
    "dup_near",  # a long hidden description shared but for the case tag: near duplicate
    "judge_500",  # LLM-judge requests about this case answer 500: regrade_error
)

_FINDING = re.compile(r"^\d+\. (\w+): .*?\n   Required answer: (-?[\d.]+)", re.MULTILINE | re.DOTALL)
_NUMBER = re.compile(r"scenario number (\d+)")
_CASE = re.compile(r"\[case (\d+)\]")
_STEPS = re.compile(r"for steps among \[([^\]]*)\]")
_WRONG = re.compile(r"for step (\w+) that wrongly conclude (-?[\d.]+)")
_NEAR = (
    "A long shared hidden description that two scenarios repeat almost word for word: the caller "
    "reports a person down beside a country road at dusk, a bicycle in the ditch, a dog barking in a "
    "nearby yard, light rain, and a neighbour who saw nothing but heard a loud noise a few minutes ago"
)


def _label(value: str) -> str:
    number = float(value)
    return str(int(number)) if number.is_integer() else repr(number)


class ScenarioWriter:
    """The responder (``writer(body) -> text``) and its fault picker (``writer.fault_for``)."""

    def __init__(
        self,
        phrases: Mapping[tuple[str, str], str],
        behaviours: Mapping[int, str] | None = None,
        questions: Mapping[str, str] | None = None,
    ):
        self.phrases = dict(phrases)
        """``(requirement, answer label) -> sentence`` that the rubric's rules judge as that answer."""
        self.behaviours = dict(behaviours or {})
        """Scenario number -> behaviour."""
        for b in self.behaviours.values():
            if b not in BEHAVIOURS:
                raise ValueError(f"unknown behaviour {b!r}")
        self.questions = dict(questions or {})
        """Requirement question -> name (how a judge request says which requirement it is about)."""
        self.seen: Counter[tuple[int, str]] = Counter()
        """Requests answered, by (case, kind)."""
        self._lock = threading.Lock()

    # -- what the request is -------------------------------------------------------------------------

    @staticmethod
    def kind(body: dict[str, Any]) -> str:
        """``hidden``, ``scenario``, ``repair`` or ``judge``."""
        messages = body.get("messages", [])
        last = str(messages[-1].get("content", "")) if messages else ""
        if last.startswith("That scenario failed validation"):
            return "repair"
        if "Write the hidden description" in last:
            return "hidden"
        if "Hidden description (the truth)" in last:
            return "scenario"
        return "judge"

    @staticmethod
    def case(body: dict[str, Any]) -> int:
        """The scenario number the request is about (0 when none is found)."""
        text = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
        match = _NUMBER.search(text) or _CASE.search(text)
        return int(match.group(1)) if match else 0

    def behaviour(self, body: dict[str, Any]) -> str:
        return self.behaviours.get(self.case(body), "ok")

    # -- faults --------------------------------------------------------------------------------------

    def fault_for(self, body: dict[str, Any]) -> str | None:
        """The server fault for this request, if its case's behaviour asks for one."""
        kind, behaviour, case = self.kind(body), self.behaviour(body), self.case(body)
        with self._lock:
            self.seen[(case, kind)] += 1
            count = self.seen[(case, kind)]
        if kind == "hidden" and behaviour == "hidden_500":
            return "500"
        if kind == "scenario" and behaviour == "scenario_truncated":
            return "truncated"
        if kind == "scenario" and behaviour == "truncated_once" and count == 1:
            return "truncated"
        if kind == "scenario" and behaviour == "malformed":
            return "malformed"
        if kind == "judge" and behaviour == "judge_500":
            return "500"
        return None

    # -- replies -------------------------------------------------------------------------------------

    def __call__(self, body: dict[str, Any]) -> str:
        kind = self.kind(body)
        if kind == "hidden":
            return self.hidden(body)
        if kind in ("scenario", "repair"):
            return self.scenario(body, repair=kind == "repair")
        return self.verdict(body)

    def hidden(self, body: dict[str, Any]) -> str:
        case = self.case(body)
        findings = _FINDING.findall(body["messages"][-1]["content"])
        if self.behaviour(body) == "dup_near":
            text = f"{_NEAR} [case {case}]."
        else:
            steps = ", ".join(f"{n} is {_label(a)}" for n, a in findings)
            text = f"Case {case} of a roadside call where {steps}. [case {case}]"
        return json.dumps({"description": f"roadside call {case}", "hidden_description": text})

    def scenario(self, body: dict[str, Any], repair: bool) -> str:
        request = next(
            m["content"] for m in body["messages"] if "Hidden description (the truth)" in str(m["content"])
        )
        case = self.case(body)
        behaviour = self.behaviour(body)
        findings = [(n, _label(a)) for n, a in _FINDING.findall(request)]
        steps = _STEPS.search(request)
        reveal_for = [s.strip() for s in steps.group(1).split(",")] if steps else []
        answers = {
            n: {"answer": float(a), "reasoning": f"the hidden description says {n} is {a}"}
            for n, a in findings
        }
        prompt = f"You are called to a roadside incident (case {case}). A person is down. What do you do? [case {case}]"
        if behaviour == "dup_exact":
            prompt = "You are called to a roadside incident. A person is down. What do you do?"
        reply: dict[str, Any] = {
            "prompt": prompt,
            "answers": answers,
            "revealed_info": {
                n: f"After {n} you learn more about case {case}." for n in reveal_for if n in answers
            },
            "ideal_replies": {n: self.phrases[(n, a)] for n, a in findings},
        }
        wrong = _WRONG.search(request)
        if wrong:
            name, value = wrong.group(1), _label(wrong.group(2))
            right = dict(findings)[name]
            reply["wrong_reply"] = self.phrases[(name, right if behaviour == "wrong_passes" else value)]
        last_name, last_answer = findings[-1]
        if behaviour == "invalid" or (behaviour == "invalid_repaired" and not repair):
            if behaviour == "invalid":
                reply["notes"] = "an unknown field"
            else:
                answers[findings[0][0]]["answer"] = 7.0
        if behaviour == "off_path" or (behaviour == "off_path_repaired" and not repair):
            answers[last_name]["answer"] = 1.0 - float(last_answer) if last_answer in ("0", "1") else 0.0
        if behaviour == "ideal_fail":
            reply["ideal_replies"] = {n: "I would handle this step carefully." for n, _ in findings}
        return json.dumps(reply)

    def verdict(self, body: dict[str, Any]) -> str:
        """An LLM judge's verdict: the answer whose phrase the response contains (else 'no')."""
        text = body["messages"][-1]["content"]
        response = text.split("<response>", 1)[-1].split("</response>", 1)[0]
        question = text.split("<question>\n", 1)[-1].split("\n</question>", 1)[0]
        asked = self.questions.get(question.strip())
        for (name, label), phrase in self.phrases.items():
            if name == asked and phrase in response:
                return json.dumps({"reasoning": "the response states it", "answer": float(label)})
        return json.dumps({"reasoning": "not stated", "answer": 0.0})
