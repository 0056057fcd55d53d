"""Which GGUF file a name `owner/repo[:TAG]` means, on repositories' file lists (llama.cpp's `-hf` rules)."""

from __future__ import annotations

import pytest

from tgi.core.loading.gguf_tags import (
    GGUFTagError,
    available_tags,
    choose,
    is_model_file,
    split_info,
    split_name,
)

BARTOWSKI = [
    ".gitattributes",
    "README.md",
    "Model-IQ4_XS.gguf",
    "Model-Q2_K.gguf",
    "Model-Q4_K_M.gguf",
    "Model-Q4_K_S.gguf",
    "Model-Q8_0.gguf",
    "Model-f16.gguf",
    "Model.imatrix",
    "mmproj-Model-f16.gguf",
]


def test_the_tag_is_matched_case_insensitively_and_names_its_file():
    assert choose(BARTOWSKI, "q4_k_m").files == ("Model-Q4_K_M.gguf",)
    assert choose(BARTOWSKI, "Q8_0").tag == "Q8_0"
    assert choose(BARTOWSKI, "F16").files == ("Model-f16.gguf",)
    assert choose(BARTOWSKI, "f16").tag == "F16"  # the file's own tag, upper-cased


def test_a_tag_does_not_match_a_longer_tag():
    with pytest.raises(GGUFTagError):  # Q4_K is neither Q4_K_M nor Q4_K_S: the tag ends with . or -
        choose(BARTOWSKI, "Q4_K")


def test_no_tag_is_q4_k_m_then_q8_0_then_the_first_model_file():
    assert choose(BARTOWSKI, None).files == ("Model-Q4_K_M.gguf",)
    without = [f for f in BARTOWSKI if "Q4_K_M" not in f]
    assert choose(without, None).files == ("Model-Q8_0.gguf",)
    only_others = ["mmproj-m-f16.gguf", "m-Q5_K_M.gguf", "m-Q6_K.gguf"]
    assert choose(only_others, None).files == ("m-Q5_K_M.gguf",)  # a projector is never the model


def test_an_unknown_tag_lists_the_tags_the_repository_has():
    with pytest.raises(GGUFTagError) as info:
        choose(BARTOWSKI, "Q3_K_L", "org/Model-GGUF")
    assert info.value.available == ("IQ4_XS", "Q2_K", "Q4_K_M", "Q4_K_S", "Q8_0", "F16")
    assert "org/Model-GGUF has no GGUF file of quantization 'Q3_K_L'" in str(info.value)
    assert "Q4_K_M, Q4_K_S" in str(info.value)


def test_side_files_are_no_models():
    assert not is_model_file("mmproj-Model-f16.gguf") and not is_model_file("sub/Model-imatrix.gguf")
    assert not is_model_file("README.md") and is_model_file("sub/Model-Q4_0.GGUF")
    with pytest.raises(GGUFTagError, match="holds no GGUF model file"):
        choose(["README.md", "mmproj-x-f16.gguf", "config.json"], None)


def test_the_vision_projector_beside_the_model_is_named():
    assert choose(BARTOWSKI, "Q8_0").mmproj == "mmproj-Model-f16.gguf"
    assert choose(["a/m-Q8_0.gguf", "b/mmproj-f16.gguf"], "Q8_0").mmproj is None  # another folder's


SPLIT = [
    "Q4_K_M/Big-Q4_K_M-00002-of-00003.gguf",
    "Q4_K_M/Big-Q4_K_M-00001-of-00003.gguf",
    "Q4_K_M/Big-Q4_K_M-00003-of-00003.gguf",
    "Big-Q8_0-00001-of-00002.gguf",
    "Big-Q8_0-00002-of-00002.gguf",
    "Big-Q2_K.gguf",
]


def test_a_split_model_is_chosen_by_its_first_part_with_all_its_parts_in_order():
    choice = choose(SPLIT, "q4_k_m")
    assert choice.tag == "Q4_K_M" and choice.primary == "Q4_K_M/Big-Q4_K_M-00001-of-00003.gguf"
    assert choice.files == tuple(f"Q4_K_M/Big-Q4_K_M-0000{i}-of-00003.gguf" for i in (1, 2, 3))
    assert choose(SPLIT, None).files[0] == "Q4_K_M/Big-Q4_K_M-00001-of-00003.gguf"
    assert choose(SPLIT, "Q2_K").files == ("Big-Q2_K.gguf",)
    assert available_tags(SPLIT) == ("Q4_K_M", "Q8_0", "Q2_K")  # each split model once


def test_a_split_model_missing_a_part_is_refused():
    with pytest.raises(GGUFTagError, match=r"part 1 of 2, and the repository lacks part\(s\) \[2\]"):
        choose(["Big-Q8_0-00001-of-00002.gguf"], "Q8_0")


def test_split_info_reads_the_name():
    info = split_info("dir/Model.Q4_1-00002-of-00005.gguf")
    assert (info.prefix, info.tag, info.index, info.count) == ("dir/Model.Q4_1", "Q4_1", 2, 5)
    assert split_info("SmolLM2-135M-Instruct.Q4_1.gguf").tag == "Q4_1"
    assert split_info("model.safetensors") is None


def test_names():
    assert split_name("org/repo-GGUF:Q4_K_M") == ("org/repo-GGUF", "Q4_K_M")
    assert split_name("org/repo") == ("org/repo", None)
    for bad in ("org/repo:", ":Q4_0", "org/repo:Q4 K"):
        with pytest.raises(ValueError, match="owner/repo:TAG"):
            split_name(bad)
