import numpy as np
import pytest

from data_prep.text import EMPTY, BucketPlan, boundaries_up_to, topped_up


def test_boundaries_end_at_the_longest_length():
    assert boundaries_up_to(40) == (8, 16, 24, 32, 40)
    assert boundaries_up_to(8) == (8,)
    assert boundaries_up_to(5) == (5,)
    assert boundaries_up_to(600)[-3:] == (384, 512, 600)


def test_batch_sizes_spend_the_token_budget_in_multiples_of_eight():
    plan = BucketPlan((8, 16, 24, 40), batch_tokens=2048)
    assert plan.shapes == [(256, 8), (128, 16), (80, 24), (48, 40)]
    assert BucketPlan((512,), batch_tokens=100).shapes == [(8, 512)]  # never below `multiple`
    assert BucketPlan.single(20, 64).shapes == [(64, 20)]
    with pytest.raises(ValueError):
        BucketPlan((16, 8), batch_tokens=100)


@pytest.mark.parametrize("seed", [None, 3])
def test_every_row_in_one_fixed_shape_per_bucket(seed):
    lengths = np.random.default_rng(0).integers(1, 60, size=1000)  # 59 distinct lengths
    plan = BucketPlan((8, 16, 32, 50), batch_tokens=512)
    batches = plan.batches(lengths, seed)
    rows = np.concatenate([indices for _, indices in batches])
    real = rows[rows != EMPTY]
    assert set(real) == set(range(1000))
    assert {(len(indices), plan.boundaries[bucket]) for bucket, indices in batches} \
        <= set(plan.shapes)
    for bucket, indices in batches:  # each row fits its bucket (the longest are cut)
        used = indices[indices != EMPTY]
        assert (np.minimum(lengths[used], 50) <= plan.boundaries[bucket]).all()
        if bucket:
            assert (lengths[used] > plan.boundaries[bucket - 1]).all()
        assert len(set(used)) == len(used)  # no row twice in a batch
    if seed is None:  # evaluation: each row once, top-ups end at most one batch a bucket
        assert len(real) == 1000
        assert sum((indices == EMPTY).any() for _, indices in batches) <= len(plan.boundaries)
    else:  # training: full batches of real rows, a few seen twice
        assert EMPTY not in rows and len(real) - 1000 < sum(s for s, _ in plan.shapes)


def test_a_bucket_smaller_than_a_batch_is_topped_up_with_empty_rows():
    plan = BucketPlan((8,), rows=8)
    ((_, rows),) = plan.batches([3, 4, 5], seed=1)
    assert sorted(rows[rows != EMPTY]) == [0, 1, 2] and (rows == EMPTY).sum() == 5
    assert list(topped_up(np.array([7, 9]), 4)) == [7, EMPTY, 9, EMPTY]  # spread out


def test_seeded_orders_repeat_and_differ_by_seed():
    lengths = np.arange(1, 200) % 40 + 1
    plan = BucketPlan((8, 16, 40), batch_tokens=128)
    first, again, other = (plan.batches(lengths, seed) for seed in (1, 1, 2))
    flat = [np.concatenate([rows for _, rows in order]) for order in (first, again, other)]
    assert (flat[0] == flat[1]).all() and not (flat[0] == flat[2]).all()


def test_padding_share_counts_bucket_and_top_up_padding():
    plan = BucketPlan((4, 8), batch_tokens=16, multiple=1)  # 4 x 4 and 2 x 8
    assert plan.padding_share([4, 4, 4, 4]) == 0.0
    assert plan.padding_share([2, 2, 2, 2]) == 0.5
    assert plan.padding_share([8]) == 0.5  # one row of a batch of two
