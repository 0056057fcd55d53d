"""What crosses between the processes of a group, as data under an HMAC: a command and a step with every kind
of sampling parameter and grammar masks arrive equal; a tampered, replayed or foreign one, a field of the
wrong type and an array larger than it declares are refused by name; node 0's engine config travels as
checked JSON; the shared secret is required over several nodes, by the flag or the variable."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tgi.core.config import EngineConfig
from tgi.core.guided.grammar import Grammar
from tgi.core.interfaces.batch import ScheduledBatch, ScheduledSequence, TokenMasks
from tgi.core.parallel import node_join as nj
from tgi.core.parallel import wire
from tgi.core.parallel.command_channel import CommandReceiver, CommandSender, decode_command
from tgi.core.parallel.dist_auth import (
    AuthError,
    SecretError,
    command_key,
    load_secret,
    open_sealed,
    require_secret,
    seal,
)
from tgi.core.sampling_params import SamplingParams
from tgi.core.watermark import Watermark

KEY = b"k" * 32
PARAMS = SamplingParams(
    do_sample=True, temperature=0.7, top_k=5, seed=2**63 + 5, stop=("\n\n",), stop_token_ids=(3, 4),
    logit_bias=((7, -100.0), (9, 2.5)), grammar=Grammar.regex("[0-9]+"), watermark=Watermark(0.25, 2.0),
    adapter_id="a", max_new_tokens=None,
)  # fmt: skip


class Wire:
    """`broadcast_bytes` of rank 0 and of one worker, through one list."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []  # not received yet
        self.log: list[bytes] = []  # every message sent

    def broadcast_bytes(self, data, src=0, limit=None):
        if data is not None:
            self.sent.append(data)
            self.log.append(data)
            return data
        return self.sent.pop(0)


def batch() -> ScheduledBatch:
    history = list(range(20))
    seq = ScheduledSequence(
        request_id="r", token_ids=history, start_pos=0, block_table=(1, 2), is_prefill=True, sample=True,
        sampling=PARAMS, seed=11, num_prompt_tokens=20, all_token_ids=history,
    )  # fmt: skip
    masks = TokenMasks(rows=(0,), bitmask=np.arange(4, dtype=np.int32).reshape(1, 4), vocab_size=128)
    return ScheduledBatch(3, [seq], 1, ["gone"], masks)


def test_a_command_and_a_step_arrive_as_they_were_sent():
    link = Wire()
    sender, receiver = CommandSender(link, KEY), CommandReceiver(link, KEY)
    sender.send("warmup", (64, 4))
    assert receiver.receive() == ("warmup", (64, 4))
    sent = batch()
    sender.send("execute", (sent,))
    name, (got,) = receiver.receive()
    assert name == "execute" and got.sequences[0].sampling == PARAMS
    assert list(got.sequences[0].token_ids) == list(sent.sequences[0].token_ids)
    assert got.token_masks.rows == (0,) and (got.token_masks.bitmask == sent.token_masks.bitmask).all()
    assert json.loads(link.log[0].split(b":", 2)[2]) == {"name": "warmup", "args": [64, 4]}


@pytest.mark.parametrize("attack", ["tampered", "replayed", "another key"])
def test_a_command_that_fails_its_check_is_refused_naming_it(attack):
    link = Wire()
    sender, receiver = CommandSender(link, KEY), CommandReceiver(link, KEY)
    sender.send("initialize_cache", (10,))
    if attack == "tampered":
        link.sent[0] = link.sent[0].replace(b"10", b"99")
    elif attack == "replayed":
        first = link.sent[0]
        receiver.receive()
        link.sent.append(first)  # command 0 again, where command 1 is due
    else:
        receiver.key = b"x" * 32
    with pytest.raises(AuthError, match=r"rank 0's command [01] failed its HMAC check"):
        receiver.receive()


@pytest.mark.parametrize(
    ("message", "why"),
    [
        ({"name": "rm -rf", "args": []}, "unknown command"),
        ({"name": "warmup", "args": [1, "2"]}, r"argument 1: '2' is not a int"),
        ({"name": "warmup", "args": [1, True]}, "argument 1: True is not a int"),
        ({"name": "warmup", "args": [1]}, "expected 2 argument"),
    ],
)
def test_a_command_not_of_its_declared_types_is_refused(message, why):
    with pytest.raises(wire.WireError, match=why):
        decode_command(json.dumps(message).encode())


def test_an_array_must_hold_the_bytes_its_shape_declares_within_the_cap():
    data = wire.array_to_data(np.zeros((2, 3), dtype=np.int32))
    assert wire.array_from_data(data, "a").shape == (2, 3)
    with pytest.raises(wire.WireError, match="bytes for a int32 array of shape"):
        wire.array_from_data({**data, "shape": [3, 3]}, "a")
    with pytest.raises(wire.WireError, match="more than the 16 allowed"):
        wire.array_from_data(data, "a", limit=16)
    with pytest.raises(wire.WireError, match="refused"):
        wire.array_from_data({**data, "dtype": "object"}, "a")


def test_node_0s_config_travels_as_checked_json_and_never_its_secret_path():
    config = EngineConfig(num_shard=2, nnodes=2, master_addr="10.0.0.1", rope_scaling=("linear", 2.0),
                          lora_adapters=(("a", "/x"),), cuda_graphs=(1, 2), dist_secret_file="/s")  # fmt: skip
    reason, got = nj.read_verdict(nj.verdict(None, config))
    assert reason is None and got.rope_scaling == ("linear", 2.0) and got.lora_adapters == (("a", "/x"),)
    assert got.dist_secret_file is None and got.num_shard == 2
    assert nj.read_verdict(nj.verdict("its model is x", config)) == ("its model is x", None)
    bad = json.loads(nj.verdict(None, config))
    bad["config"]["num_shard"] = "2"
    with pytest.raises(wire.WireError, match=r"config.num_shard: '2' is not a int"):
        nj.read_verdict(json.dumps(bad).encode())
    bad["config"] = {**json.loads(nj.verdict(None, config))["config"], "evil": 1}
    with pytest.raises(wire.WireError, match=r"unknown field\(s\) \['evil'\]"):
        nj.read_verdict(json.dumps(bad).encode())


def test_a_join_is_read_only_under_the_same_secret_and_session():
    record = {"host": "h", "pid": 5, "nonce": "n"}
    sealed = seal(KEY, nj.join_context("s1", 1), nj.encode(record))
    assert nj.read_join(sealed, KEY, "s1", 1) == (record, None)
    _, why = nj.read_join(sealed, b"o" * 32, "s1", 1)
    assert "failed its HMAC check" in why and "--dist-secret-file / TGI_DIST_SECRET" in why
    assert "failed its HMAC check" in nj.read_join(sealed, KEY, "s2", 1)[1]  # an earlier group's
    assert "failed its HMAC check" in nj.read_join(sealed, KEY, "s1", 2)[1]  # another node's
    _, why = nj.read_join(seal(None, "", nj.encode(record)), KEY, "s1", 1)
    assert why.startswith("it has no shared secret") and "TGI_DIST_SECRET" in why
    with pytest.raises(AuthError, match="x failed its HMAC check"):
        open_sealed(KEY, "c", seal(KEY, "c", b"p") + b"!", "x")


def test_the_secret_is_required_over_several_nodes_from_the_flag_or_the_variable(tmp_path):
    with pytest.raises(SecretError, match=r"--nnodes 2: .*--dist-secret-file PATH or TGI_DIST_SECRET"):
        require_secret(None, 2, env={})
    assert require_secret(None, 1, env={}) is None
    assert require_secret(None, 2, env={"TGI_DIST_SECRET": "s" * 32}) == b"s" * 32
    path = tmp_path / "secret"
    path.write_text("f" * 64 + "\n")
    assert load_secret(str(path), env={"TGI_DIST_SECRET": "s" * 32}) == b"f" * 64  # the flag wins
    path.write_text("short")
    with pytest.raises(SecretError, match="shorter than 16 bytes"):
        load_secret(str(path), env={})
    with pytest.raises(SecretError, match="cannot read it"):
        load_secret(str(tmp_path / "none"), env={})
    assert command_key(b"s" * 32, "x") == command_key(b"s" * 32, "x") != command_key(b"s" * 32, "y")
    assert command_key(None, "x") != command_key(None, "x")  # one host: random
