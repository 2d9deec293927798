package webhook

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// This file answers: which ClusterRoles will the aggregation controller rewrite because of a
// ClusterRole change, and to what? A ClusterRole with an aggregationRule holds the union of the
// rules of every other ClusterRole its selectors match (kube-controller-manager's
// clusterrole-aggregation controller, pkg/controller/clusterroleaggregation), so deleting,
// relabelling or narrowing a piece takes access from whoever is bound to the role aggregating it,
// a moment later, in an update the controller retries until it lands. Judging only that update
// let one attempt while the webhook was down take a writer's access (the tenth red team); the
// change that causes it is judged instead, by what the rewrite will leave.

// ClusterRoleInfo is a ClusterRole as the aggregation controller reads it.
type ClusterRoleInfo struct {
	Name        string
	Labels      map[string]string
	Aggregation *rbacv1.AggregationRule
	Rules       []rbacv1.PolicyRule
}

// ClusterRolesFact is what a list of every ClusterRole returned.
type ClusterRolesFact struct {
	Items []ClusterRoleInfo
	Err   error
	// Unread says why the webhook may not list ClusterRoles at all: a read of its own ClusterRole
	// that only whoever may change cluster RBAC can take (an older chart's, after a rollback).
	Unread string
}

// ClusterRoleInfoOf converts the API object.
func ClusterRoleInfoOf(cr *rbacv1.ClusterRole) ClusterRoleInfo {
	return ClusterRoleInfo{Name: cr.Name, Labels: cr.Labels, Aggregation: cr.AggregationRule, Rules: cr.Rules}
}

// rewrite is what the aggregation controller does to one ClusterRole: its rules before the change
// and once the controller has caught up with it.
type rewrite struct {
	before, after []rbacv1.PolicyRule
}

// maxAggregationWork bounds the work of following the aggregation controller through one change,
// counted in label matches and rule copies (summed over the rounds, before and after the
// change), each side's converge on its own. Anyone who may create ClusterRoles can make the union large; past the bound the change
// is refused as not verifiable rather than judged after the API server gave up waiting, which the
// entry's failure policy would admit (the eleventh red team's 3,000 rules took it past its 5 s).
const maxAggregationWork = 1 << 20

// aggregate fills c.rewrites from the ClusterRoles listed in f: every aggregated ClusterRole whose
// rules the change will make the controller rewrite, and the changed role itself when the
// controller will rewrite what the change sets. Both sides are the controller's fixed point (the
// state it converges to) with the role as it was and as the change leaves it, so a rewrite still
// pending from an earlier change (one the webhook refused) is not blamed on this one.
func (c *RBACChange) aggregate(f *Facts) error {
	if (c.Kind != gvkClusterRole.Kind && !c.isBinding()) || c.rewrites != nil {
		return nil
	}
	switch {
	case f.ClusterRoles == nil:
		return fmt.Errorf("the ClusterRoles: %w", errNotLookedUp)
	case f.ClusterRoles.Err != nil:
		return f.ClusterRoles.Err
	}
	before := map[string]ClusterRoleInfo{}
	for _, r := range f.ClusterRoles.Items {
		before[r.Name] = r
	}
	if c.isBinding() {
		// A binding changes no ClusterRole, but the roles it binds may not have settled: the
		// aggregation controller's rewrite of one may still be pending (refused, say, and
		// retried until an answer is missed), and the binding then grants what it will write.
		stored := maps.Clone(before)
		if err := converge(before); err != nil {
			return err
		}
		c.rewrites = map[RoleKey]rewrite{}
		for name, r := range before {
			// An empty union is left out: the controller then applies no rules, and server-side
			// apply keeps what another manager wrote (its creator's rules stay).
			if s := stored[name]; s.Aggregation != nil && len(r.Rules) > 0 && !sameRules(s.Rules, r.Rules) {
				c.rewrites[RoleKey{Name: name}] = rewrite{before: s.Rules, after: r.Rules}
			}
		}
		return nil
	}
	stored := maps.Clone(before)
	before[c.Name] = ClusterRoleInfo{Name: c.Name, Labels: c.OldLabels, Aggregation: c.OldAggregation, Rules: c.OldRules}
	after := maps.Clone(before)
	if c.Deleted {
		delete(after, c.Name)
	} else {
		after[c.Name] = ClusterRoleInfo{Name: c.Name, Labels: c.NewLabels, Aggregation: c.NewAggregation, Rules: c.NewRules}
	}
	if err := converge(before); err != nil {
		return err
	}
	if err := converge(after); err != nil {
		return err
	}
	c.rewrites = map[RoleKey]rewrite{}
	for name, b := range before {
		a, ok := after[name]
		switch {
		case name == c.Name && !ok:
			continue // deleted: the role's own loss is the change itself
		case name == c.Name && sameRules(a.Rules, c.NewRules):
			continue // what the change sets is what stays
		case name == c.Name:
			c.rewrites[RoleKey{Name: name}] = rewrite{before: c.OldRules, after: a.Rules}
		case b.Aggregation == nil:
			continue // only aggregated roles are rewritten
		case !sameRules(a.Rules, b.Rules):
			// From the rules it holds now, which the authorizer grants by: a role whose union
			// was empty still holds its creator's rules (server-side apply keeps them), and a
			// piece joining the union replaces them (red team R of stop 34).
			c.rewrites[RoleKey{Name: name}] = rewrite{before: stored[name].Rules, after: a.Rules}
		}
	}
	return nil
}

// converge rewrites roles as the aggregation controller would until nothing changes: each
// aggregated role gets the rules of the roles its selectors match, in selector order, then by
// name, itself excluded, each rule once. A selector the controller cannot parse stops it from
// rewriting that role at all, so its rules stay. Labels do not change while it converges, so
// what each selector matches is found once, and each rule's key (ruleKey) once per rewrite.
func converge(roles map[string]ClusterRoleInfo) error {
	type aggregator struct {
		name    string
		sources []string // the roles its selectors match, in the controller's order (repeats kept)
	}
	var aggs []aggregator
	work := 0 // label matches, then rule copies: both grow with what ClusterRole creators add
	for name, r := range roles {
		if r.Aggregation == nil {
			continue
		}
		if work += len(roles) * len(r.Aggregation.ClusterRoleSelectors); work > maxAggregationWork {
			return fmt.Errorf("following the aggregation controller through these ClusterRoles matches more than %d labels; the guard judges at most that many per change", maxAggregationWork)
		}
		if sources, ok := matchedRoles(r, roles); ok {
			aggs = append(aggs, aggregator{name: name, sources: sources})
		}
	}
	sort.Slice(aggs, func(i, j int) bool { return aggs[i].name < aggs[j].name })
	keys := make(map[string][]string, len(roles))
	keysOf := func(name string) []string {
		k, ok := keys[name]
		if !ok {
			for _, rule := range roles[name].Rules {
				k = append(k, ruleKey(rule))
			}
			keys[name] = k
		}
		return k
	}
	// A chain of aggregated roles settles one link per round whatever the order they are visited
	// in, so len(aggs)+1 rounds settle any chain; a cycle keeps what it holds. Rounds past that
	// mean the roles never settle.
	for range len(aggs) + 1 {
		changed := false
		for _, a := range aggs {
			n := 0
			for _, src := range a.sources {
				n += len(keysOf(src))
			}
			if work += n; work > maxAggregationWork {
				return fmt.Errorf("following the aggregation controller through these ClusterRoles copies more than %d rules; the guard judges at most that many per change", maxAggregationWork)
			}
			rules, ruleKeys := make([]rbacv1.PolicyRule, 0, n), make([]string, 0, n)
			seen := make(map[string]bool, n)
			for _, src := range a.sources {
				for j, k := range keysOf(src) {
					if !seen[k] {
						seen[k] = true
						rules, ruleKeys = append(rules, roles[src].Rules[j]), append(ruleKeys, k)
					}
				}
			}
			if slices.Equal(ruleKeys, keysOf(a.name)) {
				continue
			}
			r := roles[a.name]
			r.Rules = rules
			roles[a.name], keys[a.name] = r, ruleKeys
			changed = true
		}
		if !changed {
			return nil
		}
	}
	return errors.New("the aggregated ClusterRoles do not settle: the aggregation controller would keep rewriting them")
}

// matchedRoles lists the roles r's selectors match, selector by selector, each selector's by
// name, r itself excluded (syncClusterRole's order); ok=false when a selector does not parse.
func matchedRoles(r ClusterRoleInfo, roles map[string]ClusterRoleInfo) ([]string, bool) {
	var out []string
	for i := range r.Aggregation.ClusterRoleSelectors {
		sel, err := metav1.LabelSelectorAsSelector(&r.Aggregation.ClusterRoleSelectors[i])
		if err != nil {
			return nil, false
		}
		var matched []string
		for name, o := range roles {
			if name != r.Name && sel.Matches(labels.Set(o.Labels)) {
				matched = append(matched, name)
			}
		}
		sort.Strings(matched)
		out = append(out, matched...)
	}
	return out, true
}

// ruleKey is a rule's identity as the controller's ruleExists compares rules (semantic equality:
// a nil list is an empty one), as a string a map can hold: each list length-prefixed, so no two
// rules share a key. A reflective comparison of every pair cost the review 150 ms in a cluster of
// 300 ClusterRoles (BenchmarkDecide/review/aggregated-clusterrole); with keys, 5 ms.
func ruleKey(r rbacv1.PolicyRule) string {
	var b strings.Builder
	for _, list := range [][]string{r.Verbs, r.APIGroups, r.Resources, r.ResourceNames, r.NonResourceURLs} {
		b.WriteString(strconv.Itoa(len(list)))
		for _, x := range list {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(len(x)))
			b.WriteByte(':')
			b.WriteString(x)
		}
		b.WriteByte(';')
	}
	return b.String()
}

// sameRules is the controller's equality.Semantic.DeepEqual of two rule lists, by ruleKey.
func sameRules(a, b []rbacv1.PolicyRule) bool {
	return slices.EqualFunc(a, b, func(x, y rbacv1.PolicyRule) bool { return ruleKey(x) == ruleKey(y) })
}

// describe is the change as a refusal names it: with the roles the aggregation controller will
// rewrite because of it, which are what takes the access.
func (c *RBACChange) describe() string {
	var names []string
	for k := range c.rewrites {
		if k.Name != c.Name {
			names = append(names, k.String())
		}
	}
	sort.Strings(names)
	switch {
	case len(names) > 0:
		return c.String() + " (through the aggregation controller's rewrite of " + strings.Join(names, ", ") + ")"
	case len(c.rewrites) > 0:
		return c.String() + " (once the aggregation controller rewrites its rules from its aggregationRule)"
	}
	return c.String()
}
