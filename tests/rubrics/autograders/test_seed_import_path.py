"""``rubrics.autograders``: the seed documents' import path of the graders, kept as an alias."""

from __future__ import annotations

import rubrics.autograders as seed_path
import rubrics.criteria.autograders as home


def test_the_seed_import_path_gives_the_same_graders() -> None:
    # the source documents write ``from rubric.autograders import ...``; the graders live under criteria
    assert seed_path.__all__ == home.__all__
    for name in home.__all__:
        assert getattr(seed_path, name) is getattr(home, name)
