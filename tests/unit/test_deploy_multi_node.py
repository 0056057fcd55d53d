"""The Helm chart's multi-node switch: a LeaderWorkerSet whose leader serves HTTP and whose workers run
`--headless` (LWS's own variables give each pod --master-addr, --node-rank and --nnodes), the Service on the
leaders only, a NetworkPolicy that keeps the group's ports to its pods, and values that cannot form a group
refused by name."""

from __future__ import annotations

import subprocess

import pytest
from test_deploy import CHART, _helm, needs_helm, render

pytestmark = needs_helm
MULTI = (
    "multiNode.enabled=true",
    "hardware=cuda",
    "multiNode.nodes=2",
    "multiNode.numShard=4",
    "multiNode.secretName=tgi-dist",
)


def _pods(docs: list[dict]) -> tuple[dict, dict]:
    lws = next(d for d in docs if d["kind"] == "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]
    assert lws["size"] == 2 and lws["restartPolicy"] == "RecreateGroupOnPodRestart"
    return lws["leaderTemplate"]["spec"], lws["workerTemplate"]["spec"]


def _env(pod: dict) -> dict[str, str]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in pod["containers"][0]["env"]}


def test_a_leader_worker_set_in_place_of_the_deployment():
    docs = render(*MULTI)
    assert {d["kind"] for d in docs} == {"LeaderWorkerSet", "Service", "NetworkPolicy"}
    leader, worker = _pods(docs)
    assert _env(leader)["NUM_SHARD"] == "4" and _env(leader)["MASTER_PORT"] == "29500"
    assert "HEADLESS" not in _env(leader) and _env(worker)["HEADLESS"] == "true"
    for pod in (leader, worker):  # the shared secret, from the Secret named
        assert _env(pod)["TGI_DIST_SECRET"] == {"secretKeyRef": {"name": "tgi-dist", "key": "secret"}}
    ports = {p["name"]: p["containerPort"] for p in leader["containers"][0]["ports"]}
    assert ports == {"http": 8080, "rendezvous": 29500}
    assert "readinessProbe" in leader["containers"][0]
    (container,) = worker["containers"]
    assert "ports" not in container and "readinessProbe" not in container  # a headless node serves nothing
    for pod in (leader, worker):  # 4 ranks over 2 pods: 2 devices each
        assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 2


def test_the_service_selects_the_leaders_and_the_policy_keeps_the_group_ports_to_its_pods():
    docs = render(*MULTI)
    service = next(d for d in docs if d["kind"] == "Service")["spec"]
    assert service["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
    policy = next(d for d in docs if d["kind"] == "NetworkPolicy")["spec"]
    group, anyone = policy["ingress"]
    assert group["from"][0]["podSelector"]["matchLabels"] == policy["podSelector"]["matchLabels"]
    assert anyone == {"ports": [{"port": 8080, "protocol": "TCP"}]}
    assert "NetworkPolicy" not in {d["kind"] for d in render(*MULTI, "multiNode.networkPolicy=false")}


def test_one_host_stays_a_deployment():
    assert "LeaderWorkerSet" not in {d["kind"] for d in render()}


@pytest.mark.parametrize(
    ("values", "refusal"),
    [
        (("multiNode.numShard=3",), "multiNode.numShard 3 must split evenly over multiNode.nodes 2"),
        (("multiNode.nodes=1",), "multiNode.nodes must be >= 2"),
        (("autoscaling.enabled=true",), "autoscaling.enabled with multiNode.enabled"),
        (
            ("multiNode.secretName=",),
            "multiNode.secretName: the name of a Secret holding the group's shared secret",
        ),
    ],
)
def test_values_that_form_no_group_are_refused_by_name(values, refusal):
    argv = [_helm(), "template", "r", str(CHART)]
    for value in (*MULTI, *values):
        argv += ["--set", value]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and refusal in out.stderr, out.stderr
