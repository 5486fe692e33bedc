"""The per-prompt criteria environment (``environment``: ``CriteriaEnv``) and its datasets: the reader
(``data``: ``load_criteria_examples``), the record formats it converts (``formats``: native, HealthBench,
RaR) and the records as read from local files (``records``)."""
