from tgi.server.images.token_spans import aligned_spans


def test_a_processor_expanded_prompt_is_listed_whole_with_the_placeholders_characters():
    """`/chat_tokenize` with images: every id the processor made, in order; a text token keeps its offsets,
    the tokens put in place of a placeholder cover its characters, an insertion the empty span where it
    stands."""
    text = [(1, (0, 2)), (9, (2, 9)), (2, (9, 11))]  # "ab<image>cd": 9 is the placeholder token
    expanded = [1, 7, 8, 9, 9, 7, 2]  # markers around two image tokens, as Idefics3 writes a tile
    assert aligned_spans(text, expanded, 9) == [(1, (0, 2))] + [(t, (2, 9)) for t in (7, 8, 9, 9, 7)] + [
        (2, (9, 11))
    ]
    assert aligned_spans(text, [1, 9, 2, 5], 9) == [*text, (5, (11, 11))]  # appended: empty span at the end
    assert aligned_spans(text, [id_ for id_, _ in text], 9) == text
