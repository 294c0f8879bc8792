#!/usr/bin/env bash
# Builds once's static binaries into deploy/.build/ and the two images,
# once-manager:dev and once-gate:dev, FROM scratch (nothing is pulled).
#
#   deploy/build.sh                 # from anywhere in the repository
#   ONCE_TAG=v1 deploy/build.sh     # another tag (default: dev)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
tag=${ONCE_TAG:-dev}
out="$here/.build"

echo "== go build (static, -tags hashicorpmetrics) -> deploy/.build/"
mkdir -p "$out/data"
(cd "$root" && CGO_ENABLED=0 GOOS=linux go build -trimpath -tags hashicorpmetrics -o "$out/" ./cmd/gate ./cmd/manager)

build_image() { # name dockerfile
	local name=$1 dockerfile=$2 old new
	old=$(docker image inspect -f '{{.Id}}' "$name" 2>/dev/null || true)
	echo "== docker build $name"
	docker build -q -f "$here/$dockerfile" -t "$name" "$out" >/dev/null
	new=$(docker image inspect -f '{{.Id}}' "$name")
	echo "   $name ${new:7:12}"
	# A rebuild leaves the previous image untagged: remove it (ignored when a
	# container still uses it).
	if [ -n "$old" ] && [ "$old" != "$new" ]; then
		docker image rm "$old" >/dev/null 2>&1 || true
	fi
}
build_image "once-manager:$tag" Dockerfile.manager
build_image "once-gate:$tag" Dockerfile.gate
