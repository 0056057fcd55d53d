"""The table's sharding flags: tensor parallelism over `--num-shard` ranks, on one host or split evenly over
`--nnodes` hosts (vLLM's and SGLang's names; LeaderWorkerSet's variables). Which of them need which others is
checked in `tgi.server.flags.checks.check_sharding`."""

from __future__ import annotations

from tgi.core.parallel.topology import DEFAULT_DIST_TIMEOUT_S, DEFAULT_MULTI_NODE_PORT
from tgi.server.flags import value_checks
from tgi.server.flags.parsers import on_off
from tgi.server.flags.spec import LAUNCHER, Engine, Flag

AS_TGI = "as TGI"
SHARDING = "sharding"
RENDEZVOUS = "the shards' `torch.distributed` rendezvous (default: 127.0.0.1 and a free port)"

SHARDING_FLAGS = (
    Flag(
        ("--num-shard",),
        "tensor-parallel shards (vLLM's --tensor-parallel-size): the ranks of the whole group, all hosts "
        "together, or of each stage with --pipeline-parallel-size; the group's ranks split evenly over --nnodes "
        "hosts",
        SHARDING,
        Engine("num_shard"),
        env=("NUM_SHARD",),
        parse=int,
        default=1,
        tgi=AS_TGI,
        example="2",
    ),
    Flag(
        ("--pipeline-parallel-size",),
        "pipeline stages (vLLM's): the decoder layers split in contiguous stages, each --num-shard ranks "
        "wide, activations sent stage to stage, a step cut in micro-batches; the group is --num-shard × this "
        "ranks (Llama family; refused with LoRA adapters, speculation, --quantize)",
        SHARDING,
        Engine("pipeline_parallel_size"),
        env=("PIPELINE_PARALLEL_SIZE",),
        parse=int,
        default=1,
        example="2",
    ),
    Flag(
        ("--sharded",),
        "true: shard over --num-shard (> 1) processes; false: --num-shard must be 1",
        SHARDING,
        LAUNCHER,
        env=("SHARDED",),
        parse=on_off,
        metavar="{true,false}",
        tgi="`true` needs `--num-shard` > 1 (devices are not counted for you), `false` needs 1",
        example="false",
    ),
    Flag(
        ("--master-addr",),
        "address of rank 0's torch.distributed rendezvous, the TCP store node 0 listens on (bound to this "
        "address only); required with --nnodes > 1 (node 0's address, the same on every node); a "
        "non-loopback address makes the store reachable from the network; default: 127.0.0.1",
        SHARDING,
        Engine("master_addr"),
        env=("MASTER_ADDR", "LWS_LEADER_ADDRESS"),
        tgi=RENDEZVOUS,
        example="10.0.0.1",
    ),
    Flag(
        ("--master-port",),
        "port of that rendezvous, a TCP store bound to --master-addr only; default: a private file store on "
        "this host (or a free port of a non-loopback --master-addr); with --nnodes > 1, "
        f"{DEFAULT_MULTI_NODE_PORT}",
        SHARDING,
        Engine("master_port"),
        env=("MASTER_PORT",),
        parse=int,
        tgi=RENDEZVOUS,
        example="29500",
    ),
    Flag(
        ("--nnodes",),
        "hosts of one group (vLLM's, SGLang's): each runs --num-shard × --pipeline-parallel-size / --nnodes "
        "ranks; "
        "node 0 serves HTTP, the others run with --headless",
        SHARDING,
        Engine("nnodes"),
        env=("NNODES", "LWS_GROUP_SIZE"),
        parse=int,
        default=1,
        example="2",
        example_needs=("--num-shard", "2", "--master-addr", "127.0.0.1"),
    ),
    Flag(
        ("--node-rank",),
        "this host's place in a group of --nnodes hosts: its ranks are node-rank × ranks per node onwards; "
        "0 serves HTTP, any other needs --headless",
        SHARDING,
        Engine("node_rank"),
        env=("NODE_RANK", "LWS_WORKER_INDEX"),
        parse=int,
        default=0,
        example="1",
        example_needs=("--nnodes", "2", "--num-shard", "2", "--master-addr", "127.0.0.1", "--headless"),
    ),
    Flag(
        ("--headless",),
        "a node other than 0 of a multi-host group: binds no HTTP port, starts its node's ranks, which follow "
        "rank 0's steps; exits when the group ends (1 when a rank, or the leader, died)",
        SHARDING,
        LAUNCHER,
        env=("HEADLESS",),
        default=False,
        kind="switch",
        example="true",
        example_needs=("--nnodes", "2", "--node-rank", "1", "--num-shard", "2", "--master-addr", "127.0.0.1"),
    ),
    Flag(
        ("--dist-timeout",),
        "seconds every node may take to join the group, and a collective may wait for a rank that is alive "
        "but silent (a rank or node that dies is noticed within seconds); "
        f"default: {DEFAULT_DIST_TIMEOUT_S:g}",
        SHARDING,
        Engine("dist_timeout_s"),
        env=("DIST_TIMEOUT",),
        parse=float,
        check=value_checks.deadline,
        example="30",
    ),
    Flag(
        ("--dist-secret-file",),
        "file holding the secret every node of a group over several hosts shares (required with --nnodes > 1, "
        "the same on every node; else the variable TGI_DIST_SECRET holds the secret itself; a node without one "
        "is refused at start): it authenticates each node's join and every message of the group with "
        "HMAC-SHA256; make one with `openssl rand -hex 32 > secret`",
        SHARDING,
        Engine("dist_secret_file"),
        env=("TGI_DIST_SECRET_FILE",),
        env_help="TGI_DIST_SECRET_FILE; or TGI_DIST_SECRET, the secret itself",
        example="secret",
        example_needs=("--nnodes", "2", "--num-shard", "2", "--master-addr", "127.0.0.1"),
    ),
)
