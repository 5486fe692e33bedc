"""Evaluation, in one place: run an environment on a model (``run``), summarise and plot what it did
(``summary``), and the ``rubric-grpo eval`` job (``job``)."""

from envs.evaluation.run import evaluate_to_dir, run_eval
from envs.evaluation.summary import EvalSummary, format_summary, plot_summary, summarize

__all__ = ["EvalSummary", "evaluate_to_dir", "format_summary", "plot_summary", "run_eval", "summarize"]
