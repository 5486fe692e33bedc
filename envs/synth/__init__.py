"""Synthetic scenarios from a multi-step rubric (``rubric-grpo synth``).

``plan`` (routes covering every branch) -> ``prompts`` (requests and strict schemas) -> ``generate``
(endpoint or local backend) -> ``item`` (one item: ``validate`` with one repair, ``regrade``) -> ``dedupe``
-> ``report`` and ``outputs``; ``pipeline`` runs them concurrently and resumably, ``cli`` is the glue.
"""
