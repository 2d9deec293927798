#!/usr/bin/env bash
# setup.sh: what `make e2e-node` needs on this machine, installed only when missing (idempotent):
# Debian's containerd, runc, CNI plugins, iptables and conntrack; and kubelet, kube-scheduler and
# kube-proxy built from the control plane's tools module (hack/controlplane) into its cache.
# CoreDNS is not needed: neither the webhook nor the writers resolve a name (they reach the API
# server through the kubernetes Service's ClusterIP from the in-cluster environment).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ "$(id -u)" = 0 ] || { echo "localnode: setup needs root (apt-get, namespaces, cgroups)" >&2; exit 1; }
missing=()
for pair in containerd:containerd ctr:containerd runc:runc iptables:iptables conntrack:conntrack; do
  command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}")
done
[ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/host-local ] && [ -x /usr/lib/cni/loopback ] || missing+=(containernetworking-plugins)
if [ ${#missing[@]} -gt 0 ]; then
  pkgs=$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')
  echo "localnode: installing Debian packages: $pkgs"
  apt-get update -qq
  # The machine starts no services: policy-rc.d, where present, keeps containerd's unit from starting.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
else
  echo "localnode: containerd, runc, CNI plugins, iptables, conntrack present"
fi
"$here/../controlplane/build.sh" kubelet kube-scheduler kube-proxy
