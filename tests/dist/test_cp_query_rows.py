"""How a request's new tokens are split into query rows across CP ranks (pure, exhaustive)."""
import pytest

from hicache.dist.engine import cp_query_rows


@pytest.mark.parametrize("cp", range(1, 7))
def test_shares_partition_the_rows_and_ranks_past_the_last_row_get_none(cp):
    for m in range(0, 3 * cp + 2):
        shares = [cp_query_rows(r, m, cp) for r in range(cp)]
        assert sorted(i for s in shares for i in s) == list(range(m))
        # rank 0's share is the widest: the all-gather's padded width fits every share
        assert max(len(s) for s in shares) == len(shares[0]) == -(-m // cp)
        assert [r for r, s in enumerate(shares) if not s] == list(range(min(m, cp), cp))


@pytest.mark.parametrize("cp_rank, m, cp", [(-1, 4, 2), (2, 4, 2), (0, -1, 2), (0, 4, 0)])
def test_misuse_is_refused(cp_rank, m, cp):
    with pytest.raises(ValueError, match="cp_rank"):
        cp_query_rows(cp_rank, m, cp)
