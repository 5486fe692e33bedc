"""Evaluation, in one place: run an environment on a model (``run``), summarise and plot what it did
(``summary``), its result and folder (``result``), the ``rubric-grpo eval`` job (``job``), and what a stopped
one resumes from (``resumable``)."""

from envs.evaluation.result import EvalFolder, Evaluation, read_evaluation
from envs.evaluation.run import evaluate_to_dir, run_eval
from envs.evaluation.summary import EvalSummary, format_summary, plot_summary, summarize

__all__ = [
    "EvalFolder",
    "EvalSummary",
    "Evaluation",
    "evaluate_to_dir",
    "format_summary",
    "plot_summary",
    "read_evaluation",
    "run_eval",
    "summarize",
]
