"""Studies: a grid of encoders written once (a YAML study file), planned as a tree of runs that share their
common prefixes, launched on SLURM or one machine, evaluated, and reported.

``schema`` reads and checks the study file; ``plan`` turns it into runs (parents, branch steps, pretrain.py
flags); ``cost`` prices them; ``slurm`` and ``local`` execute them; ``evaluation`` exports and fine-tunes a
run; ``report`` writes the Markdown report with its figures (``figures``) from what exists.
"""
