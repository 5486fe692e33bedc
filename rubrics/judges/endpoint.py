"""``JudgeEndpoint``: where an LLM judge is asked and how hard, declared once.

The per-prompt criteria graders and the multi-step rubrics' LLM judges are both asked through an
``LLMJudgeClient`` made from one of these (``LLMJudgeClient.from_endpoint``). A multi-step rubric file
writes these fields flat under its judge (``judges: {name: {type: llm, base_url: ..., model: ...}}``),
``rubrics.multistep.judging.LLMRequirementJudge`` holds one, the GUI starts a new judge from
``LOCAL_JUDGE``, and the run config's ``env.judge_*`` keys override its fields (``envs.config``).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

Name = Annotated[StrictStr, Field(min_length=1)]
"""A non-empty string (a URL, a model name, a variable name)."""
Count = Annotated[StrictInt, Field(ge=1)]
"""A whole number >= 1 (``true`` is not one)."""
Seconds = Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0)]
"""A finite number of seconds above zero."""


class JudgeEndpoint(BaseModel):
    """One OpenAI-compatible judge endpoint: its address, model, key variable and request limits."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    base_url: Name
    """Endpoint root, e.g. ``http://127.0.0.1:8000/v1``."""
    model: Name
    """Model name sent with every request."""
    api_key_env: Name | None = None
    """Name of the environment variable that holds the key (never the key); None for a local vLLM judge."""
    max_concurrency: Count = 32
    """Requests in flight at once, for everything asked through one client."""
    timeout_s: Seconds = 60.0
    """Seconds allowed for one request."""
    max_attempts: Count = 5
    """Attempts per verdict, the first included."""

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """The settings an endpoint may leave out, with the values they then take (field order)."""
        return {name: field.default for name, field in cls.model_fields.items() if not field.is_required()}

    def replaced(self, **settings: Any) -> JudgeEndpoint:
        """This endpoint with ``settings`` changed (checked like a new one)."""
        return JudgeEndpoint.model_validate({**self.model_dump(), **settings})


LOCAL_JUDGE = JudgeEndpoint(base_url="http://127.0.0.1:8000/v1", model="judge")
"""A judge served by vLLM on this machine: where a new LLM judge points until it is told otherwise."""
