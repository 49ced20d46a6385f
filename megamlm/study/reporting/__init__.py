"""The study report: ``report`` writes its text (Markdown) from what exists under the study's root;
``claims_text`` the section answering a paper's claims; ``curves`` reads the validation curves; ``figure_data``
the numbers behind the figures (``megamlm/figures.py`` draws them); ``plateau`` the unigram plateau; ``lr_grid``
every model's scores per fine-tuning LR; ``paired_text`` single-seed arms compared on the same test examples;
``registration`` what was fixed before the run (the study file's commit, seeds, tie rule); and ``report_target``
where a report may be written."""
