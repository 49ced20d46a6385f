"""Studies: a grid of encoders written once (a YAML study file), planned as a tree of runs that share their
common prefixes, launched on SLURM or one machine, evaluated, and reported.

``schema`` reads and checks the study file; ``naming`` names runs; ``plan`` turns the study into runs (parents,
branch steps, pretrain.py flags); ``cost`` prices them and ``table`` prints the plan; ``commands`` gives each
run's pretraining, export and evaluation commands, which ``slurm`` writes as chained sbatch scripts and ``local``
executes here; ``report`` writes the Markdown report with its figures from what exists.
"""
