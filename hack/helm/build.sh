#!/usr/bin/env bash
# Builds the helm CLI (helm.sh/helm/v3/cmd/helm, the version hack/helm/go.mod pins) into
# .cache/helm/<version>/helm and prints its path; an existing build is reused.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
version=$(awk '$1=="helm.sh/helm/v3" {print $2}' "$here/go.mod")
[ -n "$version" ] || { echo "helm: no helm.sh/helm/v3 in $here/go.mod" >&2; exit 1; }
out="$root/.cache/helm/$version"
if [ ! -x "$out/helm" ]; then
  echo "helm: building helm $version (a cold build takes minutes on 2 cores)..." >&2
  mkdir -p "$out"
  (cd "$here" && CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$version" \
    -o "$out/helm.tmp" helm.sh/helm/v3/cmd/helm)
  mv "$out/helm.tmp" "$out/helm"
fi
echo "$out/helm"
