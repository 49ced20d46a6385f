import numpy as np
import pytest

from megamlm.objectives import IGNORE_INDEX, MaskingSpec, clm_targets, mlm_mask

MASK_ID = 3
SPECIALS = (0, 1, 2, 3)


def spec(ratio=0.4, replace=1.0, random=0.0, keep=0.0) -> MaskingSpec:
    return MaskingSpec(mask_ratio=ratio, replace_prob=replace, random_prob=random, keep_prob=keep,
                       mask_id=MASK_ID, special_ids=SPECIALS, random_vocab_size=1000)


def corpus(n_samples=200, seq=512, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(4, 1000, size=(n_samples, seq))


@pytest.mark.parametrize("ratio", [0.2, 0.4, 0.5])
def test_selected_fraction_matches_mask_ratio_within_one_percent(ratio):
    tokens = corpus()  # 102,400 tokens
    selected = sum(int((mlm_mask(row, k, 7, spec(ratio))[1] != IGNORE_INDEX).sum()) for k, row in enumerate(tokens))
    assert abs(selected / tokens.size - ratio) < 0.01


def test_replacement_split_matches_its_probabilities():
    tokens = corpus()
    s = spec(0.4, 0.8, 0.1, 0.1)
    masked = randomised = kept = 0
    for k, row in enumerate(tokens):
        inputs, targets = mlm_mask(row, k, 11, s)
        sel = targets != IGNORE_INDEX
        masked += int((inputs[sel] == MASK_ID).sum())
        kept += int((inputs[sel] == row[sel]).sum())
        randomised += int(((inputs[sel] != MASK_ID) & (inputs[sel] != row[sel])).sum())
    total = masked + randomised + kept
    assert abs(masked / total - 0.8) < 0.01
    # a random draw equal to the original token counts as kept (1 in ~1000)
    assert abs(randomised / total - 0.1) < 0.01
    assert abs(kept / total - 0.1) < 0.01


def test_default_replaces_every_selected_token_with_the_mask_token():
    row = corpus(1)[0]
    inputs, targets = mlm_mask(row, 0, 1, spec())
    sel = targets != IGNORE_INDEX
    assert (inputs[sel] == MASK_ID).all()
    assert (inputs[~sel] == row[~sel]).all()
    assert (targets[sel] == row[sel]).all()


def test_special_tokens_are_never_selected():
    row = np.tile(np.array([0, 1, 2, 3, 10, 11]), 5000)
    _, targets = mlm_mask(row, 5, 3, spec(0.9))
    assert (targets[np.isin(row, SPECIALS)] == IGNORE_INDEX).all()
    assert (targets[~np.isin(row, SPECIALS)] != IGNORE_INDEX).mean() > 0.85


def test_mask_is_a_pure_function_of_seed_and_sample_index():
    row = corpus(1)[0]
    a = mlm_mask(row, 42, 1234, spec(0.4, 0.8, 0.1, 0.1))
    b = mlm_mask(row.copy(), 42, 1234, spec(0.4, 0.8, 0.1, 0.1))
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    other_sample = mlm_mask(row, 43, 1234, spec())
    other_seed = mlm_mask(row, 42, 1235, spec())
    assert not np.array_equal(a[1] != IGNORE_INDEX, other_sample[1] != IGNORE_INDEX)
    assert not np.array_equal(a[1] != IGNORE_INDEX, other_seed[1] != IGNORE_INDEX)


def test_random_replacements_are_never_special_tokens():
    row = corpus(1)[0]
    inputs, targets = mlm_mask(row, 0, 0, MaskingSpec(0.9, 0.0, 1.0, 0.0, MASK_ID, SPECIALS, 8))
    sel = targets != IGNORE_INDEX
    assert not np.isin(inputs[sel], (0, 1, 2)).any()


def test_clm_targets_are_the_next_token_and_the_last_position_has_none():
    row = np.arange(10, 20)
    inputs, targets = clm_targets(row)
    np.testing.assert_array_equal(inputs, row)
    np.testing.assert_array_equal(targets[:-1], row[1:])
    assert targets[-1] == IGNORE_INDEX
