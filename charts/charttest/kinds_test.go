package charttest

import (
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/noetl/ehdb-election/webhook"
)

// The guard's kinds are one table (webhook.PodSources); the chart must send it every kind in the
// table and let it watch every reader kind. A kind added to the table and forgotten here (as
// ReplicationController once was, in the rules, the RBAC and the watches) fails this test.
func TestChartReviewsAndWatchesEveryPodSource(t *testing.T) {
	r := mustRender(t, nil)
	vwc := typed[admissionregistrationv1.ValidatingWebhookConfiguration](t, r.Find("ValidatingWebhookConfiguration", "ehdb-election"))
	reviewed := map[string][]admissionregistrationv1.OperationType{} // "group/resource" -> operations
	for _, h := range vwc.Webhooks {
		for _, rule := range h.Rules {
			for _, g := range rule.APIGroups {
				for _, res := range rule.Resources {
					reviewed[g+"/"+res] = append(reviewed[g+"/"+res], rule.Operations...)
				}
			}
		}
	}
	var reads []rbacv1.PolicyRule
	for _, o := range r.OfKind("Role") {
		if o.GetName() == "ehdb-election-webhook-guard" {
			reads = typed[rbacv1.Role](t, o).Rules
		}
	}
	may := func(group, resource, verb string) bool {
		return slices.ContainsFunc(reads, func(p rbacv1.PolicyRule) bool {
			return slices.Contains(p.APIGroups, group) && slices.Contains(p.Resources, resource) && slices.Contains(p.Verbs, verb) && len(p.ResourceNames) == 0
		})
	}
	for _, src := range webhook.PodSources {
		key := src.GVK.Group + "/" + src.Resource
		ops := reviewed[key]
		if !slices.Contains(ops, admissionregistrationv1.Create) {
			t.Errorf("%s (%s) is in the guard's table but the chart does not send its CREATE", src.GVK.Kind, key)
		}
		if src.GVK.Kind != "Pod" && !slices.Contains(ops, admissionregistrationv1.Update) {
			t.Errorf("%s (%s): the chart does not send its UPDATE", src.GVK.Kind, key)
		}
		if src.Reader {
			for _, verb := range []string{"get", "list", "watch"} {
				if !may(src.GVK.Group, src.Resource, verb) {
					t.Errorf("%s is a ConfigMap reader the webhook watches, but its Role does not grant %s on %s", src.GVK.Kind, verb, key)
				}
			}
		}
	}
	subs := []string{"/pods/ephemeralcontainers"}
	for _, src := range webhook.PodSources {
		if src.Scale {
			subs = append(subs, src.GVK.Group+"/"+src.Resource+"/scale")
		}
	}
	for _, sub := range subs {
		if !slices.Contains(reviewed[sub], admissionregistrationv1.Update) {
			t.Errorf("the chart does not send UPDATE of %s: a path that changes what runs goes unreviewed", sub)
		}
	}
}
