"""Which GGUF file of a hub repository a name `owner/repo[:TAG]` means (no hub, no torch here: file names in,
a choice out), by the rules llama.cpp's `-hf owner/repo:TAG` follows, so that a name picks the same file in
both:

- a model file is a `.gguf` whose base name names no side file (`mmproj` vision projectors, `imatrix`
  importance matrices, draft heads);
- the tag is matched case-insensitively against each model file's path, followed by `.` or `-`
  (`Q4_K_M` matches `model-Q4_K_M.gguf` and `Q4_K_M/model-Q4_K_M-00001-of-00002.gguf`), in the listing's
  order; no tag: `Q4_K_M`, then `Q8_0`, then the first model file;
- a model split in parts (`name-00001-of-00003.gguf`) is chosen by its first part, and the choice holds every
  part of the same name and count;
- a file's own tag is the last `-` or `.` separated word of its name (split suffix and `.gguf` removed),
  upper-cased: the tags listed when a tag matches nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: the tags tried in order when a name has none (llama.cpp's default, then its fallback)
DEFAULT_TAGS = ("Q4_K_M", "Q8_0")
#: words in a base name that mark a side file rather than a model
SIDE_FILE_WORDS = ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-")

_SPLIT = re.compile(r"^(.+)-(\d{5})-of-(\d{5})$", re.IGNORECASE)
_FILE_TAG = re.compile(r"[-.]([A-Z0-9_]+)$", re.IGNORECASE)
_TAG_CHARS = re.compile(r"^[A-Za-z0-9_.-]+$")


class GGUFTagError(LookupError):
    """No model file of the repository matches the name; `available` lists the tags it has."""

    def __init__(self, message: str, available: tuple[str, ...]) -> None:
        super().__init__(message)
        self.available = available


@dataclass(frozen=True)
class SplitInfo:
    prefix: str  # the path without `.gguf` and the split suffix (the tag included)
    tag: str  # the file's own tag, upper-cased ("" when its name has none)
    index: int  # 1-based part number (1 for a file in one part)
    count: int  # number of parts (1 for a file in one part)


@dataclass(frozen=True)
class GGUFChoice:
    """The file a name means: `files` are its parts in order (one for a file in one part)."""

    tag: str  # the chosen file's own tag (upper-cased), or the asked tag where the name has no tag word
    files: tuple[str, ...]
    mmproj: str | None = None  # the repository's vision projector beside it, if any (not downloaded)

    @property
    def primary(self) -> str:
        return self.files[0]


def split_name(name: str) -> tuple[str, str | None]:
    """`owner/repo:TAG` -> ("owner/repo", "TAG"); no `:` -> (name, None). `ValueError` for an empty or odd tag."""
    if ":" not in name:
        return name, None
    repo, tag = name.rsplit(":", 1)
    if not repo or not tag or not _TAG_CHARS.match(tag):
        raise ValueError(
            f"{name!r}: a model name is owner/repo or owner/repo:TAG, the tag a quantization such as Q4_K_M"
        )
    return repo, tag


def split_info(path: str) -> SplitInfo | None:
    """What a `.gguf` path's name says (None for a file that is no `.gguf`)."""
    if not path.lower().endswith(".gguf"):
        return None
    prefix, index, count = path[: -len(".gguf")], 1, 1
    m = _SPLIT.match(prefix)
    if m is not None:
        prefix, index, count = m.group(1), int(m.group(2)), int(m.group(3))
    t = _FILE_TAG.search(prefix.rsplit("/", 1)[-1])
    return SplitInfo(prefix, t.group(1).upper() if t else "", index, count)


def is_model_file(path: str) -> bool:
    """A `.gguf` holding a model, not a side file (vision projector, importance matrix, draft head)."""
    base = path.rsplit("/", 1)[-1].lower()
    return base.endswith(".gguf") and not any(word in base for word in SIDE_FILE_WORDS)


def _first_parts(files: list[str]) -> list[str]:
    """The model files that start a model: files in one part, and the first part of split ones."""
    out = []
    for f in files:
        info = split_info(f)
        if info is not None and is_model_file(f) and info.index == 1:
            out.append(f)
    return out


def available_tags(files: list[str]) -> tuple[str, ...]:
    """The tags of the repository's model files, in listing order, each once."""
    tags: dict[str, None] = {}
    for f in _first_parts(files):
        tag = split_info(f).tag  # type: ignore[union-attr]
        if tag:
            tags.setdefault(tag, None)
    return tuple(tags)


def _parts(files: list[str], primary: str) -> tuple[str, ...]:
    info = split_info(primary)
    assert info is not None
    if info.count == 1:
        return (primary,)
    by_index = {}
    for f in files:
        other = split_info(f)
        if other is not None and other.prefix == info.prefix and other.count == info.count:
            by_index[other.index] = f
    missing = [i for i in range(1, info.count + 1) if i not in by_index]
    if missing:
        raise GGUFTagError(
            f"{primary} is part 1 of {info.count}, and the repository lacks part(s) {missing}",
            available_tags(files),
        )
    return tuple(by_index[i] for i in range(1, info.count + 1))


def _mmproj(files: list[str], primary: str) -> str | None:
    folder = primary.rsplit("/", 1)[0] if "/" in primary else ""
    for f in files:
        f_folder = f.rsplit("/", 1)[0] if "/" in f else ""
        if f.lower().endswith(".gguf") and "mmproj" in f.rsplit("/", 1)[-1].lower() and f_folder == folder:
            return f
    return None


def choose(files: list[str], tag: str | None, repo: str = "the repository") -> GGUFChoice:
    """The model file `tag` means among `files` (a repository's paths, in its listing order); `GGUFTagError`
    when none matches, listing the tags there are."""
    candidates = _first_parts(files)
    for t in (tag,) if tag else DEFAULT_TAGS:
        pattern = re.compile(re.escape(t) + r"[.-]", re.IGNORECASE)
        for f in candidates:
            if pattern.search(f):
                own = split_info(f).tag or t.upper()  # type: ignore[union-attr]
                return GGUFChoice(own, _parts(files, f), _mmproj(files, f))
    if not tag and candidates:
        f = candidates[0]
        return GGUFChoice(split_info(f).tag, _parts(files, f), _mmproj(files, f))  # type: ignore[union-attr]
    tags = available_tags(files)
    if not candidates:
        raise GGUFTagError(f"{repo} holds no GGUF model file", tags)
    raise GGUFTagError(
        f"{repo} has no GGUF file of quantization {tag!r}; its tags: {', '.join(tags) or '(none in the names)'}",
        tags,
    )
