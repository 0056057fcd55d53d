"""vLLM's `bad_words` for one row: the tokens it may not take now (the definition:
`tgi.core.interfaces.sampling`, step 0). Plain Python, no framework: samplers of every framework mask what
it returns."""

from __future__ import annotations

from collections.abc import Sequence


def banned_tokens(bad_words_ids: Sequence[Sequence[int]], generated: Sequence[int]) -> set[int]:
    """The last token of each of `bad_words_ids` whose other tokens are the last of `generated` (the row's
    output so far: a prompt never completes a bad word); a one-token word is always banned."""
    banned = set()
    for word in bad_words_ids:
        prefix = len(word) - 1
        if prefix > len(generated):
            continue
        if all(word[k] == generated[len(generated) - prefix + k] for k in range(prefix)):
            banned.add(word[-1])
    return banned
