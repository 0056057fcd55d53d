from tgi.server.images.sources import ImageRef, split_markdown


def test_markdown_images_are_cut_out_in_order_with_the_text_around_them():
    pieces, refs = split_markdown("a ![](data:image/png;base64,AAAA) b ![cat](https://x.test/c.png)")
    assert pieces == ["a ", " b ", ""]
    assert refs == [
        ImageRef("data:image/png;base64,AAAA", "inputs"),
        ImageRef("https://x.test/c.png", "inputs"),
    ]


def test_text_without_images_is_one_piece():
    assert split_markdown("no [link](x) here") == (["no [link](x) here"], [])
