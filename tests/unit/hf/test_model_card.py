"""The model card's LM-head section (issue 42: fill-mask on an MNTP-adapted export predicted the token after the
mask, and nothing said its head is shifted)."""

from megamlm.hf.model_card import head_objectives, head_section


def test_the_objective_that_last_trained_the_head_is_the_last_phase_or_each_input_of_a_merge():
    assert head_objectives("mlm,clm,mlm", None) == ["mlm"]
    assert head_objectives("mntp,mlm", None) == ["mlm"] and head_objectives("mlm,mntp", None) == ["mntp"]
    assert head_objectives("clm_then_mlm", None, steps=0, imported_type="llama") == ["clm"]  # an import: its source's
    assert head_objectives("clm_then_mlm", None, steps=0, imported_type="eurobert") == ["mlm"]
    merged = [{"objective": "mntp", "steps": 30}, {"objective": "clm_then_mlm", "steps": 0, "imported_type": "llama"}]
    assert head_objectives("mntp", merged) == ["mntp", "clm"]


def test_the_section_says_how_fill_mask_reads_each_head():
    shifted = " ".join(head_section(["mntp"], merge=False))
    assert "last trained by MNTP, which trains a shifted head" in shifted and "mask_index - 1" in shifted
    same = " ".join(head_section(["mlm"], merge=False))
    assert "predicts the token there" in same and "shifted" not in same
    mixed = " ".join(head_section(["mlm", "clm"], merge=True))
    assert "of each input was last trained by CLM and MLM" in mixed and "CLM at the position before it" in mixed
    assert head_section([], merge=False) == []
