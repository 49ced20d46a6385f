"""Planning a study: from a study file to a tree of runs.

``schema`` declares the study file's keys; ``load`` reads it (YAML, ``--set``, ``--scale``) and runs ``checks``;
``claims_table`` reads the paper's claims a study answers (as data); ``settings`` holds the pretrain.py settings a
study sets; ``scaling`` makes a smaller copy; ``naming`` names runs; ``runs`` is one run of a plan;
``phase_arms`` expands the arms that change a recipe's phases; ``arms`` groups runs by arm (a run without its
seed); ``prefixes`` decides which runs share a prefix (from the settings' roles, ``megamlm/config/roles.py``, and
the recipe's phase settings step by step); ``plan`` turns the study into runs with parents and branch steps;
``cost`` prices them and ``table`` prints the plan; ``pilot`` chooses the CPU miniature's settings.
"""
