package webhook_test

import (
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// The fourth red team (issue 17): the API server accepts a spec.hostnameOverride of up to 64
// characters, and the kubelet cuts every hostname to 63 (truncatePodHostnameIfNeeded, v1.37.2
// kubelet_pods.go, the override included), trimming a trailing '-' or '.'. The guard took the
// override verbatim, so "a"×61+"-10" was judged as shard 10 (live) while the Pod runs as
// "a"×61+"-1", shard 1, with no Lease.
func TestAHostnameOverrideIsCutAsTheKubeletCutsIt(t *testing.T) {
	long := strings.Repeat("a", 61) + "-10"
	podWith := func(override string) func(testing.TB) webhook.Input {
		return func(t testing.TB) webhook.Input {
			p := barePod(sts(compliant()...), "w-10")
			p.Spec.HostnameOverride = ptr.To(override)
			return webhook.Input{Operation: admissionv1.Create, Object: workload(t, gvkPod, saAdmitted(p))}
		}
	}
	shard10Live := func(r *wt.Resolver) {
		clear(r.Leases)
		r.Leases[lease(ns, 10)] = wt.LiveLease(ns, 10, now, 1).Spec
	}
	for _, rw := range []row{
		{name: "a 64-character override ending in -10 runs as ...-1", cluster: shard10Live, input: podWith(long),
			unmet: []webhook.Reason{webhook.ReasonLeaseNotLive}, msg: []string{"ehdb-shard-00000001 (shard 1) does not exist"}, lookups: -1},
		{name: "a 63-character override is kept", cluster: shard10Live, input: podWith(strings.Repeat("a", 60) + "-10"),
			allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
	} {
		t.Run(rw.name, func(t *testing.T) { runRow(t, rw) })
	}
}
