"""What a study's scores can show.

``scores`` gathers each arm's downstream scores (per LR, stability, continuation gains); ``statistics`` is the
descriptive table (an arm's values per metric, Welch intervals); ``permutation`` the exact permutation test and its
interval; ``decision`` the decision rule (one pre-registered test per claim, Holm); ``claims`` chooses and runs each
claim's test; ``informative`` decides which tasks can say anything about pretraining.
"""
