"""Chained block hashes and their extra keys (docs/vllm/kv-semantics.md §7)."""

from __future__ import annotations

import pytest

from kvplan.semantics.engine.hashing import RequestBlockHasher, block_extra_keys, none_hash
from kvplan.semantics.engine.request import MultiModalFeature
from tests.references import hash_block_tokens


def hashed(request, block_size: int = 4, seed: str = "0"):
    request.install_block_hasher(RequestBlockHasher(block_size, seed))
    return request


def test_only_full_blocks_are_hashed_and_each_hash_covers_its_prefix(make_request) -> None:
    request = hashed(make_request("a", 10))
    assert len(request.block_hashes) == 2
    parent = none_hash("0")
    for i, block_hash in enumerate(request.block_hashes):
        parent = hash_block_tokens(parent, list(range(4 * i, 4 * i + 4)))
        assert block_hash == parent


def test_generated_tokens_extend_the_hashes_when_a_block_fills(make_request) -> None:
    request = hashed(make_request("a", 7, max_tokens=10))
    assert len(request.block_hashes) == 1
    request.append_output_token()
    assert len(request.block_hashes) == 2
    expected = hash_block_tokens(request.block_hashes[0], [4, 5, 6, 10**9])
    assert request.block_hashes[1] == expected
    assert list(request.token_ids(0, request.num_tokens)) == [*range(7), 10**9]


def test_equal_prefixes_hash_equal_and_any_difference_propagates(make_request) -> None:
    a = hashed(make_request("a", [1, 2, 3, 4, 5, 6, 7, 8, 9]))
    b = hashed(make_request("b", [1, 2, 3, 4, 5, 6, 7, 8, 0]))
    c = hashed(make_request("c", [0, 2, 3, 4, 5, 6, 7, 8]))
    assert a.block_hashes == b.block_hashes[:2]
    assert a.block_hashes[0] != c.block_hashes[0] and a.block_hashes[1] != c.block_hashes[1]


def test_the_seed_changes_every_hash(make_request) -> None:
    seed_0 = hashed(make_request("a", 8), seed="0")
    seed_1 = hashed(make_request("b", 8), seed="1")
    assert seed_0.block_hashes[0] != seed_1.block_hashes[0]


def test_lora_name_is_an_extra_key_on_every_block(make_request) -> None:
    plain = hashed(make_request("p", 8))
    lora = hashed(make_request("l", 8, lora_name="adapter-a"))
    other = hashed(make_request("o", 8, lora_name="adapter-b"))
    assert block_extra_keys(lora, 4, 8) == ("adapter-a",)
    assert len({plain.block_hashes[0], lora.block_hashes[0], other.block_hashes[0]}) == 3
    # Same adapter, same tokens: the hit is shared.
    assert hashed(make_request("l2", 8, lora_name="adapter-a")).block_hashes == lora.block_hashes


def test_cache_salt_is_an_extra_key_on_the_first_block_only(make_request) -> None:
    salted = hashed(make_request("s", 8, cache_salt="tenant-1"))
    assert block_extra_keys(salted, 0, 4) == ("tenant-1",)
    assert block_extra_keys(salted, 4, 8) is None
    plain = hashed(make_request("p", 8))
    # The chain carries the salt: no block of a salted prompt hits an unsalted one.
    assert not set(salted.block_hashes) & set(plain.block_hashes)


def test_multimodal_identifiers_key_the_blocks_they_overlap(make_request) -> None:
    image = MultiModalFeature(identifier="img-hash-1", offset=3, length=3)  # tokens 3, 4, 5
    request = hashed(make_request("m", 12, mm_features=[image]))
    keys = [block_extra_keys(request, start, start + 4) for start in (0, 4, 8)]
    assert keys == [("img-hash-1",), ("img-hash-1",), None]
    other_image = hashed(make_request("n", 12, mm_features=[MultiModalFeature("img-hash-2", 3, 3)]))
    assert request.block_hashes[0] != other_image.block_hashes[0]


def test_extra_keys_combine_in_vllm_order(make_request) -> None:
    request = make_request("x", 8, lora_name="lora", cache_salt="salt",
                           mm_features=[MultiModalFeature("img", 0, 2)])
    assert block_extra_keys(request, 0, 4) == ("lora", "img", "salt")


def test_token_ids_outside_int64_are_refused(make_request) -> None:
    from kvplan.errors import KvplanError

    with pytest.raises(KvplanError, match="64-bit"):
        make_request("big", [2**64, 1, 2, 3])
    with pytest.raises(KvplanError, match="64-bit"):
        hash_block_tokens(none_hash("0"), [2**63])


@pytest.mark.parametrize("second", [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], [1, 2, 3, 4, 5, 6, 7, 0, 9],
                                    [1, 2, 3, 4], [9, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3]])
def test_a_hasher_reusing_the_last_prompts_hashes_gives_what_a_fresh_hasher_gives(make_request, second) -> None:
    hasher = RequestBlockHasher(4, "0")
    make_request("a", [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]).install_block_hasher(hasher)
    reused = make_request("b", second)
    reused.install_block_hasher(hasher)
    assert reused.block_hashes == hashed(make_request("c", second)).block_hashes
    assert len(reused.block_hashes) == len(second) // 4
