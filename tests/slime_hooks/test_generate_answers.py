"""The generate hook reads SGLang's ``/generate`` answers as the env client and the openai policy read theirs:
up to a cap (``MAX_GENERATE_BYTES``), as JSON objects; anything else is an ``SGLangError`` (a technical
failure of the sample), never a growing process."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from hostile_model import HostileServer, serving

from shopsimrl.slime.policy import MAX_GENERATE_BYTES, SGLangError, SGLangSettings, SGLangTokenPolicy


@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileServer]:
    with serving() as server:
        yield server


@pytest.mark.parametrize(("case", "says"), [
    ("body-endless", f"goes on past {MAX_GENERATE_BYTES:,} bytes, the most an SGLang server may send"),
    ("body-deep", "answer is not a JSON object"),
    ("body-list", "answer is not a JSON object"),
])
async def test_an_sglang_answer_too_long_or_of_another_shape_is_an_sglang_error(hostile: HostileServer, case: str,
                                                                                says: str) -> None:
    settings = SGLangSettings(generate_url=f"{hostile.url}/{case}/generate", sampling_params={"max_new_tokens": 8})
    async with httpx.AsyncClient(timeout=30) as http:
        policy = SGLangTokenPolicy(settings, template=None, http=http)  # type: ignore[arg-type]  # generate() only
        with pytest.raises(SGLangError, match=says):
            await policy.generate([1, 2, 3], 8)
