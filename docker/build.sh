#!/bin/sh
# Build tgi's image for one hardware: `docker/build.sh cpu|cuda|rocm|gaudi|neuron|tpu|xpu [docker build args]`
# tags it tgi:<version>-<hardware> (the version of pyproject.toml), from the repository root as the context.
set -eu
hw="${1:?usage: docker/build.sh cpu|cuda|rocm|gaudi|neuron|tpu|xpu [docker build args]}"
shift
root="$(cd "$(dirname "$0")/.." && pwd)"
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/pyproject.toml")"
exec docker build -f "$root/docker/Dockerfile.$hw" -t "tgi:$version-$hw" "$@" "$root"
