import pytest

from hicache.runtime.config import CacheConfig, HostLayout, PrefetchPolicy, WritePolicy


@pytest.mark.parametrize("kwargs, field", [
    ({"page_size": 0}, "page_size"),
    ({"device_pages": -1}, "device_pages"),
    ({"host_pages": -2}, "host_pages"),
    ({"write_policy": "write_sometimes"}, "write_policy"),
    ({"prefetch_policy": "eventually"}, "prefetch_policy"),
    ({"host_layout": "diagonal"}, "host_layout"),
    ({"dtype": "float128"}, "dtype"),
    ({"kv_kind": "gqa"}, "kv_kind"),
    ({"kv_kind": "mla", "heads": 2}, "heads"),
    ({"write_policy": "write_back", "device_pages": 8, "host_pages": 4}, "host_pages"),
    ({"prefetch_host_fraction": 0.0}, "prefetch_host_fraction"),
])
def test_bad_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError) as exc:
        CacheConfig(**kwargs)
    assert str(exc.value).startswith(field + ":")


def test_strings_become_enums():
    c = CacheConfig(write_policy="write_back", device_pages=4, host_pages=4,
                    prefetch_policy="timeout", host_layout="page_first")
    assert c.write_policy is WritePolicy.WRITE_BACK
    assert c.prefetch_policy is PrefetchPolicy.TIMEOUT
    assert c.host_layout is HostLayout.PAGE_FIRST


def test_prefetch_timeout_formula():
    c = CacheConfig(page_size=64, prefetch_timeout_base_s=0.5, prefetch_timeout_per_ki_token_s=0.25)
    # base + pages * (ps / 1024) * per_ki_token
    assert c.prefetch_timeout(32) == 0.5 + 32 * (64 / 1024) * 0.25
    assert c.prefetch_timeout(0) == 0.5


def test_mla_has_one_plane():
    assert CacheConfig(kv_kind="mla", heads=1).kv == 1
    assert CacheConfig().kv == 2


def test_engines_whose_pages_hold_other_bytes_share_no_storage_key():
    """The key namespace named only the model and salt: an engine in bfloat16 prefetched a
    float16 engine's pages from a shared store and read them as its own (wrong KV, no
    error). The page format is part of the namespace now; equal configs still share."""
    import dataclasses

    from hicache.runtime.cache import HiCache

    def seed_of(cfg):
        cache = HiCache(cfg)
        cache.close()
        return cache.tree.seed
    base = CacheConfig(page_size=4, device_pages=8, host_pages=8, model="llama", metadata_only=True)
    seed = seed_of(base)
    assert seed_of(dataclasses.replace(base)) == seed
    for change in (dict(dtype="bfloat16"), dict(layers=3), dict(heads=4), dict(head_dim=16),
                   dict(kv_kind="mla", heads=1), dict(host_layout="page_first"), dict(salt="s")):
        assert seed_of(dataclasses.replace(base, **change)) != seed, change
    # what does not change a page's bytes does not split the namespace
    assert seed_of(dataclasses.replace(base, device_pages=16, host_pages=4)) == seed
