"""The rubric builder: a Streamlit app to edit a multi-step rubric's DAG, grade a reply and edit scenarios.

``app.py`` is the Streamlit script (``rubric-grpo gui`` starts it); the editing logic lives in plain modules
that import no Streamlit, so it is unit-tested directly: ``workspace`` (file access confined to one folder),
``document`` (the rubric as plain data, edits, rename everywhere, validation), ``editor`` (one requirement's
form fields to and from plain data), ``scenario_doc`` (scenarios as plain data), ``grading`` (grade a reply
under every reward strategy) and ``optional_features`` (the optional probe and synthetic-scenario hooks).
"""
