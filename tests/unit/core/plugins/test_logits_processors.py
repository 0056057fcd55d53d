"""Logits processor plugins: found through the `tgi.logits_processors` entry points of an installed
distribution (a real dist-info folder on `sys.path`, as pip leaves one), loaded only when enabled, every
failure named with its reason; a request may select only enabled ones, with arguments they accept."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
import torch

from tgi.core.config import ConfigError, EngineConfig
from tgi.core.engine_startup import start_engine
from tgi.core.interfaces.batch import ScheduledSequence
from tgi.core.plugins.logits_processors import ENTRY_POINT_GROUP, LogitsProcessorRegistry
from tgi.core.request import ValidationError
from tgi.core.sampling.sampler import TorchSampler
from tgi.core.sampling_params import LogitsProcessorChoice, SamplingParams
from tgi.core.validation import RequestLimits, validate_request

PACKAGE = '''
from tgi.core.sampling.logits_processor import LogitsProcessor

class NoToken(LogitsProcessor):
    """Bans args["token"] (default 5)."""

    def validate_args(self, args):
        if set(args) - {"token"} or not isinstance(args.get("token", 5), int):
            raise ValueError("takes `token`, a token id")

    def apply(self, logits, rows):
        for i, row in enumerate(rows):
            logits[i, row.args.get("token", 5)] = float("-inf")
        return logits

class NotAProcessor:
    pass

def failing():
    raise RuntimeError("no licence for this processor")
'''


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A distribution `tgi-lp-demo` installed in a folder put on `sys.path`: its module and its dist-info
    with the entry points."""
    root = tmp_path_factory.mktemp("site")
    (root / "tgi_lp_demo.py").write_text(PACKAGE)
    info = root / "tgi_lp_demo-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tgi-lp-demo\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        textwrap.dedent(f"""\
            [{ENTRY_POINT_GROUP}]
            tgi_lp_demo_no_token = tgi_lp_demo:NoToken
            tgi_lp_demo_not_one = tgi_lp_demo:NotAProcessor
            tgi_lp_demo_failing = tgi_lp_demo:failing
            tgi_lp_demo_missing = tgi_lp_demo_gone:Missing
            """)
    )
    sys.path.insert(0, str(root))
    yield root
    sys.path.remove(str(root))
    sys.modules.pop("tgi_lp_demo", None)


def test_an_installed_processor_is_found_by_its_entry_point_name_and_used(installed):
    registry = LogitsProcessorRegistry()
    assert "tgi_lp_demo_no_token" in registry.names()
    assert registry.enable(["tgi_lp_demo_no_token"]) == ("tgi_lp_demo_no_token",)
    params = SamplingParams(logits_processors=(LogitsProcessorChoice("tgi_lp_demo_no_token", {"token": 3}),))
    row = ScheduledSequence("r", [1], 1, [0], False, True, params, 0, 1, [1, 2])
    logits = torch.zeros(1, 8)
    logits[0, 3] = 1.0
    assert TorchSampler(processors=registry).sample(logits, [row]).token_ids.tolist() == [0]


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("tgi_lp_demo_nothing", "unknown logits processor 'tgi_lp_demo_nothing' .*tgi_lp_demo_no_token"),
        ("tgi_lp_demo_not_one", "is a NotAProcessor, not a LogitsProcessor"),
        ("tgi_lp_demo_failing", "failed to load: RuntimeError: no licence for this processor"),
        ("tgi_lp_demo_missing", "failed to load: ModuleNotFoundError"),
    ],
)
def test_a_processor_that_cannot_run_is_refused_with_its_reason(installed, name, reason):
    with pytest.raises(ConfigError, match=reason):
        LogitsProcessorRegistry().enable([name])


def test_the_engine_stops_at_start_on_a_processor_that_cannot_load(installed):
    with pytest.raises(ConfigError, match="'tgi_lp_demo_failing'"):
        start_engine(EngineConfig(logits_processors=("tgi_lp_demo_failing",)))


def test_a_request_selects_enabled_processors_with_arguments_they_accept(installed):
    limits = RequestLimits(16, 32, 100, logits_processors=("tgi_lp_demo_no_token",))

    def check(choice: LogitsProcessorChoice) -> None:
        validate_request([1, 2], SamplingParams(max_new_tokens=4, logits_processors=(choice,)), limits)

    check(LogitsProcessorChoice("tgi_lp_demo_no_token", {"token": 3}))
    with pytest.raises(ValidationError, match="'tgi_lp_demo_not_one' is not enabled on this server"):
        check(LogitsProcessorChoice("tgi_lp_demo_not_one"))
    with pytest.raises(ValidationError, match="'tgi_lp_demo_no_token' takes `token`, a token id"):
        check(LogitsProcessorChoice("tgi_lp_demo_no_token", {"token": "three"}))


def test_launch_names_are_unique_and_non_empty():
    with pytest.raises(ConfigError, match="--logits-processors"):
        EngineConfig(logits_processors=("a", "a"))
