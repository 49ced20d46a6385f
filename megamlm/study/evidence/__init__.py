"""What a study's scores can show.

``scores`` gathers each arm's downstream scores (per LR, stability, continuation gains); ``statistics`` is the
descriptive table (an arm's values per metric, Welch intervals); ``permutation`` the exact permutation and sign-flip
tests and their intervals; ``trunks`` which models share a trunk (one unit of independence); ``decision`` the
decision rule (models averaged per seed of their trunk, one pre-registered test per claim, Holm); ``rules`` the
rules' thresholds and the prose that states them, declared once; ``claims`` chooses and runs each claim's test;
``informative`` decides, on validation, which tasks can say anything about pretraining.
"""
