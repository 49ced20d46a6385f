"""Studies: a grid of encoders written once (a YAML study file), planned as a tree of runs that share their
common prefixes, launched on SLURM or one machine, evaluated, and reported.

Four parts, in the order a study goes through them (each part's docstring names its modules):

- ``planning``: the study file read and checked, its runs, the prefix-sharing plan, its cost and table;
- ``running``: each run's commands, executed here (``local``) or written as chained SLURM jobs (``slurm``);
- ``evidence``: the scores per arm, the statistics, which tasks are informative and the claims' pre-registered
  tests (where a claim's test is chosen: ``evidence/claims.py``);
- ``reporting``: the report's text (``reporting/report.py``), its claims section, curves, figures' numbers and
  where it is written.

A part imports only the parts before it (checked by tests/unit/study/test_modules.py).
"""
