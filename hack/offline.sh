#!/usr/bin/env bash
# offline.sh CMD...: runs CMD in a network namespace of its own that has only a loopback device,
# so nothing it starts — API server, webhook, writers, tests — can send a packet off this machine.
# Modules must already be in the Go module cache (the caller builds or vets first); inside, the
# module proxy is switched off so a missing module fails at once instead of hanging.
set -euo pipefail
inner='ip link set lo up && export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=readonly" GOPROXY=off && exec "$@"'
if [ "$(id -u)" = 0 ] && unshare --net true 2>/dev/null; then
  exec unshare --net -- bash -c "$inner" offline "$@"
elif unshare --user --map-root-user --net true 2>/dev/null; then
  exec unshare --user --map-root-user --net -- bash -c "$inner" offline "$@"
fi
echo "offline.sh: cannot create a network namespace here (needs root or user namespaces); running with the host network" >&2
exec "$@"
