"""Token spans of a prompt whose image placeholders the model's processor expanded (`/tokenize`, `/chat_tokenize`)."""

import difflib
from typing import Any


def aligned_spans(pairs: list[tuple[int, Any]], ids: list[int], placeholder: int) -> list[tuple[int, Any]]:
    """`ids` (a prompt as the model's processor expanded it) as (token id, offsets) pairs: a token of the
    text's own tokenization (`pairs`) keeps its offsets; the run of tokens the processor wrote in place of
    a `placeholder` token (image tokens, tile markers, newlines) covers that placeholder's characters; a
    token added elsewhere, the empty span where it stands."""
    # a placeholder matches nothing, so that its whole expansion is what replaces it
    text_ids = [-1 if pair[0] == placeholder else pair[0] for pair in pairs]
    out: list[tuple[int, Any]] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=text_ids, b=ids, autojunk=False).get_opcodes():
        if tag == "equal":
            out += pairs[i1:i2]
            continue
        if i2 > i1:
            span = (pairs[i1][1][0], pairs[i2 - 1][1][1])
        else:
            at = pairs[i1][1][0] if i1 < len(pairs) else (pairs[-1][1][1] if pairs else 0)
            span = (at, at)
        out += [(token, span) for token in ids[j1:j2]]
    return out
