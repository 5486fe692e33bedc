"""Judges: LLM judges on any OpenAI-compatible endpoint and rule judges, behind one protocol."""

from rubrics.judges.base import Judge, JudgeError, render_messages, response_text
from rubrics.judges.client import LLMJudgeClient, StructuredReply
from rubrics.judges.endpoint import LOCAL_JUDGE, JudgeEndpoint
from rubrics.judges.faults import MalformedVerdictError
from rubrics.judges.formats import (
    BinaryJudgeResponseFormat,
    ContinuousJudgeResponseFormat,
    DiscreteJudgeResponseFormat,
    JudgeFormatError,
    JudgeResponse,
    JudgeResponseFormat,
    UnitVectorJudgeResponseFormat,
    binary_judge_response_format,
    continuous_judge_response_format,
    extract_json_object,
    format_from_dict,
)
from rubrics.judges.llm import DEFAULT_JUDGE_SYSTEM_PROMPT, LLMJudge, build_judge_messages
from rubrics.judges.rubric import JudgeRubric
from rubrics.judges.rules import CallableJudge, KeywordJudge, RegexJudge, RulesJudge
from rubrics.judges.stats import JudgeClientStats

__all__ = [
    "DEFAULT_JUDGE_SYSTEM_PROMPT",
    "LOCAL_JUDGE",
    "BinaryJudgeResponseFormat",
    "CallableJudge",
    "ContinuousJudgeResponseFormat",
    "DiscreteJudgeResponseFormat",
    "Judge",
    "JudgeClientStats",
    "JudgeEndpoint",
    "JudgeError",
    "JudgeFormatError",
    "JudgeResponse",
    "JudgeResponseFormat",
    "JudgeRubric",
    "KeywordJudge",
    "LLMJudge",
    "LLMJudgeClient",
    "MalformedVerdictError",
    "RegexJudge",
    "RulesJudge",
    "StructuredReply",
    "UnitVectorJudgeResponseFormat",
    "binary_judge_response_format",
    "build_judge_messages",
    "continuous_judge_response_format",
    "extract_json_object",
    "format_from_dict",
    "render_messages",
    "response_text",
]
