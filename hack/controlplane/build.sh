#!/usr/bin/env bash
# Builds the local control plane binaries from the Go module proxy into a cache folder keyed by
# the Kubernetes version and the tools module's go.sum, so a change of pins rebuilds and an
# unchanged tree costs nothing. Usage: build.sh [component...]   (default: the control plane)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
version=$(awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3}' "$here/go.mod")
# The key hashes the files' contents only (sha256sum also prints their paths, which differ per clone).
key=$(cat "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-12)
out=${CONTROLPLANE_DIR:-$root/.cache/controlplane/$version-$key}
mkdir -p "$out"

components=("$@")
[ ${#components[@]} -gt 0 ] || components=(etcd kube-apiserver kube-controller-manager)

pkg_of() {
  case "$1" in
    etcd) echo go.etcd.io/etcd/server/v3 ;;
    kube-apiserver|kube-controller-manager|kube-scheduler|kube-proxy|kubelet) echo "k8s.io/kubernetes/cmd/$1" ;;
    *) echo "unknown component $1" >&2; return 1 ;;
  esac
}

ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(echo "$version" | cut -d. -f2)"
i=0
for c in "${components[@]}"; do
  i=$((i + 1))
  if [ -x "$out/$c" ]; then
    echo "controlplane: [$i/${#components[@]}] $c $version cached"
    continue
  fi
  pkg=$(pkg_of "$c")
  echo "controlplane: [$i/${#components[@]}] building $c $version (cold builds take minutes on 2 cores)..."
  start=$(date +%s)
  (cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/$c.tmp" "$pkg") &
  pid=$!
  # Progress every 30 s; the check itself is every second, so a quick build is not held up.
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    elapsed=$(( $(date +%s) - start ))
    if [ $((elapsed % 30)) -eq 0 ] && kill -0 "$pid" 2>/dev/null; then
      echo "controlplane:       ... $c still building (${elapsed}s)"
    fi
  done
  wait "$pid"
  mv "$out/$c.tmp" "$out/$c"
  echo "controlplane: [$i/${#components[@]}] built $c in $(( $(date +%s) - start ))s"
done
mkdir -p "$root/.cache/controlplane"
ln -sfn "$out" "$root/.cache/controlplane/current"
echo "controlplane: binaries in $out"
