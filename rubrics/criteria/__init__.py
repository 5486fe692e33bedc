"""Per-prompt weighted criteria: the criterion and its reports (``criterion``), ``CriteriaRubric`` and its
loaders (``rubric``), a prompt carrying its own criteria (``example``), HealthBench-style results by tag
(``tag_scores``) and the LLM autograders that give the verdicts (``autograders``).

Nothing is imported here: the autograders import the criterion types, so the package stays a namespace and
each name is imported from its module.
"""
