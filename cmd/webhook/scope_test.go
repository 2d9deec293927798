package main

import (
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Issue 17, class 8: a process whose watches cover fewer namespaces than its configuration sends
// it must say so (readiness, a start-up line) rather than answer from watches that cannot see.
func TestScopeProblem(t *testing.T) {
	in := func(ns ...string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: namespaceLabel, Operator: metav1.LabelSelectorOpIn, Values: ns}}}
	}
	notIn := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: namespaceLabel, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"kube-system"}}}}
	vwc := func(sels ...*metav1.LabelSelector) *admissionregistrationv1.ValidatingWebhookConfiguration {
		v := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "ehdb-election"}}
		for i, s := range sels {
			v.Webhooks = append(v.Webhooks, admissionregistrationv1.ValidatingWebhook{Name: []string{"workloads", "configmaps"}[i] + ".ehdb-election.noetl.io", NamespaceSelector: s})
		}
		return v
	}
	cases := []struct {
		name    string
		vwc     *admissionregistrationv1.ValidatingWebhookConfiguration
		guarded []string
		want    string // "" = no problem
	}{
		{"the chart's own: the release namespace, watched", vwc(in("noetl"), in("noetl")), []string{"noetl"}, ""},
		{"a subset of the watches", vwc(in("noetl")), []string{"noetl", "team-a"}, ""},
		{"the configuration adds a namespace the watches miss", vwc(in("noetl", "team-a"), in("noetl")), []string{"noetl"}, "entry workloads.ehdb-election.noetl.io sends namespaces [team-a]"},
		{"every namespace but kube-system, watches on one", vwc(notIn), []string{"noetl"}, "sends every namespace its selector matches"},
		{"no selector at all", vwc(nil), []string{"noetl"}, "sends every namespace"},
		{"watches everywhere", vwc(notIn), []string{"*"}, ""},
		{"matchLabels confine it", vwc(&metav1.LabelSelector{MatchLabels: map[string]string{namespaceLabel: "noetl"}}), []string{"noetl"}, ""},
		{"In intersected with matchLabels", vwc(&metav1.LabelSelector{MatchLabels: map[string]string{namespaceLabel: "noetl"},
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: namespaceLabel, Operator: metav1.LabelSelectorOpIn, Values: []string{"noetl", "team-a"}}}}), []string{"noetl"}, ""},
	}
	// The chart's clusterrbac entry: cluster-scoped objects only, selector {} (issue 18's adoption
	// found every webhook unready with it: its namespace selector is not the watches' business).
	scoped := func(scope admissionregistrationv1.ScopeType) *admissionregistrationv1.ValidatingWebhookConfiguration {
		v := vwc(in("noetl"), &metav1.LabelSelector{})
		v.Webhooks[1].Name = "clusterrbac.ehdb-election.noetl.io"
		v.Webhooks[1].Rules = []admissionregistrationv1.RuleWithOperations{{Rule: admissionregistrationv1.Rule{
			APIGroups: []string{"rbac.authorization.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"clusterroles"}, Scope: &scope}}}
		return v
	}
	cases = append(cases,
		struct {
			name    string
			vwc     *admissionregistrationv1.ValidatingWebhookConfiguration
			guarded []string
			want    string
		}{"an entry for cluster-scoped objects only", scoped(admissionregistrationv1.ClusterScope), []string{"noetl"}, ""},
		struct {
			name    string
			vwc     *admissionregistrationv1.ValidatingWebhookConfiguration
			guarded []string
			want    string
		}{"an entry for every scope is confined like any other", scoped(admissionregistrationv1.AllScopes), []string{"noetl"}, "entry clusterrbac.ehdb-election.noetl.io sends every namespace"})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := scopeProblem(tc.vwc, tc.guarded)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected problem: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want a problem saying %q", err, tc.want)
			}
		})
	}
}
