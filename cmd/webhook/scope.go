package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// namespaceLabel is the label the API server sets on every namespace to its name.
const namespaceLabel = "kubernetes.io/metadata.name"

// scopeProblem compares the namespaces a webhook configuration sends this process with the ones
// its watches cover (guarded; "*" is every namespace). An entry whose namespaceSelector is not
// confined, by kubernetes.io/metadata.name, to guarded namespaces sends reviews the watches cannot
// answer: a ConfigMap there would look read by no one, an owner unknown (issue 17, class 8). An
// entry for cluster-scoped objects only (ClusterRoles, ClusterRoleBindings) has no namespace to
// confine: the API server sends them whatever its namespaceSelector says, and their review asks
// the watches about guarded namespaces only.
func scopeProblem(vwc *admissionregistrationv1.ValidatingWebhookConfiguration, guarded []string) error {
	if slices.Contains(guarded, "*") {
		return nil
	}
	var problems []string
	for _, h := range vwc.Webhooks {
		if clusterScopedOnly(h.Rules) {
			continue
		}
		allowed, bounded := selectedNames(h.NamespaceSelector)
		if !bounded {
			problems = append(problems, fmt.Sprintf("entry %s sends every namespace its selector matches", h.Name))
			continue
		}
		var extra []string
		for _, n := range allowed {
			if !slices.Contains(guarded, n) {
				extra = append(extra, n)
			}
		}
		if len(extra) > 0 {
			sort.Strings(extra)
			problems = append(problems, fmt.Sprintf("entry %s sends namespaces %v", h.Name, extra))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("ValidatingWebhookConfiguration %s sends this webhook more than its watches cover (--guarded-namespaces %v): %v; reviews there are refused as \"could not verify\" until the two agree (webhook.guardedNamespaces)", vwc.Name, guarded, problems)
	}
	return nil
}

// clusterScopedOnly says whether every rule matches cluster-scoped objects only.
func clusterScopedOnly(rules []admissionregistrationv1.RuleWithOperations) bool {
	for _, r := range rules {
		if r.Scope == nil || *r.Scope != admissionregistrationv1.ClusterScope {
			return false
		}
	}
	return len(rules) > 0
}

// selectedNames returns the namespace names sel is confined to, when it is (an In on
// kubernetes.io/metadata.name, or that label in matchLabels; several are intersected).
func selectedNames(sel *metav1.LabelSelector) ([]string, bool) {
	if sel == nil {
		return nil, false
	}
	var names []string
	bounded := false
	intersect := func(vals []string) {
		if !bounded {
			names, bounded = slices.Clone(vals), true
			return
		}
		names = slices.DeleteFunc(names, func(n string) bool { return !slices.Contains(vals, n) })
	}
	if v, ok := sel.MatchLabels[namespaceLabel]; ok {
		intersect([]string{v})
	}
	for _, e := range sel.MatchExpressions {
		if e.Key == namespaceLabel && e.Operator == metav1.LabelSelectorOpIn {
			intersect(e.Values)
		}
	}
	return names, bounded
}

// scopeCheck reads the webhook's own configuration and remembers whether its scope matches the
// watches, for readiness; it re-reads at most every interval.
type scopeCheck struct {
	cs       kubernetes.Interface
	name     string
	guarded  []string
	interval time.Duration

	mu     sync.Mutex
	at     time.Time
	result error
}

func (s *scopeCheck) check(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.at.IsZero() && time.Since(s.at) < s.interval {
		return s.result
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	vwc, err := s.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, s.name, metav1.GetOptions{})
	if err != nil {
		// Not a mismatch: the configuration may not exist yet (an install in progress), or this
		// process may not read it (cert-manager mode grants no access to it).
		return &unreadableScope{fmt.Errorf("could not read ValidatingWebhookConfiguration %s to compare its scope with the watches: %w", s.name, err)}
	}
	s.at, s.result = time.Now(), scopeProblem(vwc, s.guarded)
	return s.result
}

// unreadableScope is a scope check that could not read the configuration: logged, not a readiness
// failure (reviews outside the watches are refused whatever the check says: webhook.ScopedReaders).
type unreadableScope struct{ err error }

func (u *unreadableScope) Error() string { return u.err.Error() }

// checkScope makes readiness compare the configuration name sends with the watches, and logs the
// first comparison at start-up.
func (w *watches) checkScope(name string, guarded []string) {
	w.scope = &scopeCheck{cs: w.cs, name: name, guarded: guarded, interval: 30 * time.Second}
}

// logScope is the start-up log line of the scope comparison.
func (w *watches) logScope(ctx context.Context) {
	if w.scope == nil {
		return
	}
	switch err := w.scope.check(ctx); {
	case err == nil:
		w.log.Info("the webhook configuration's namespaces are covered by the watches", "configuration", w.scope.name, "guardedNamespaces", w.scope.guarded)
	case errors.As(err, new(*unreadableScope)):
		w.log.Info("could not compare the webhook configuration's namespaces with the watches; reviews outside the watches are refused as could not verify", "error", err.Error())
	default:
		w.log.Error(err, "scope mismatch: failing closed (not ready; reviews outside the watches are refused as could not verify)")
	}
}
