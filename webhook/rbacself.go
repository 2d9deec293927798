package webhook

import (
	"fmt"
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
)

// This file answers: does an RBAC or ServiceAccount change take the guard's own access away?
// Without it the guard cannot read ServiceAccounts, ConfigMaps or Leases, so every armed Pod is
// "could not verify" and fails open (the final red team deleted the webhook's RoleBinding and
// every armed bare Pod was admitted). So while the webhook serves, a change that removes its own
// ServiceAccount from a binding of a role that grants one of its reads or its certificate's Secret
// (a group it is in: of a role that grants one of the reads it verifies writers with, selfNeeds,
// unless its other bindings grant it the same where it needs them: selfKeepsNeeds),
// deletes that ServiceAccount (or turns its token off), or takes one of those reads from a role
// bound to it is refused (those of selfJudgingReads unless a rollback is under way). Other
// rules of its roles may change: a rollback to an older chart narrows them, and that chart's
// webhook replaces this one. `helm uninstall` of the webhook's release is not held: its
// pre-delete hook removes the webhook configuration first.

// selfNeeds are the reads without which the guard verifies no writer at all; every chart version
// grants them.
var selfNeeds = []struct{ group, resource, verb string }{
	{"", "serviceaccounts", "get"},
	{"", "configmaps", "get"},
	{"coordination.k8s.io", "leases", "get"},
	{"coordination.k8s.io", "leases", "list"},
	{"coordination.k8s.io", "leases", "watch"},
	{"authorization.k8s.io", "subjectaccessreviews", "create"},
}

// selfJudgingReads are the reads the guard verifies a Pod's owners with (watches.Owner, the
// ControllerRevision of a StatefulSet's rollout), and those it judges RBAC changes by (roles,
// rolebindings, the ServiceAccounts' watch): without the first a Pod that names an owner is
// "could not verify" and fails open, so its order check is skipped (the twenty-second red team,
// as a namespace admin, took the apps reads from the webhook's Role in its namespace and had an
// armed Pod that named a ReplicaSet running no pods admitted on a shard with no Lease); without
// the second every RBAC change there is refused, the one that would restore them too (the
// twenty-third). Older charts granted fewer of them, so they are kept only in namespaced roles (a
// namespace's admins reach those) and only while the webhook's ClusterRole is this version's (a
// rollback narrows it first: olderRole).
var selfJudgingReads = func() []struct{ group, resource, verb string } {
	var out []struct{ group, resource, verb string }
	for _, k := range []struct{ group, resource string }{{"apps", "statefulsets"}, {"apps", "deployments"}, {"apps", "daemonsets"}, {"apps", "replicasets"},
		{"batch", "jobs"}, {"batch", "cronjobs"}, {"", "replicationcontrollers"}, {"", "pods"}, {"", "serviceaccounts"},
		{"rbac.authorization.k8s.io", "roles"}, {"rbac.authorization.k8s.io", "rolebindings"}} {
		for _, v := range []string{"get", "list", "watch"} {
			out = append(out, struct{ group, resource, verb string }{k.group, k.resource, v})
		}
	}
	return append(out, struct{ group, resource, verb string }{"apps", "controllerrevisions", "get"})
}()

// grantsAll reports whether rules grant verb on every resource of its kind (no resourceNames).
func grantsAll(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	return slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool { return ruleGrantsAll(&r, group, resource, verb) })
}

// ruleGrantsAll is grantsAll for one rule.
func ruleGrantsAll(r *rbacv1.PolicyRule, group, resource, verb string) bool {
	return len(r.ResourceNames) == 0 && matchesAny(r.APIGroups, rbacv1.APIGroupAll, group) &&
		matchesAny(r.Resources, rbacv1.ResourceAll, resource) && matchesAny(r.Verbs, rbacv1.VerbAll, verb)
}

// grantsAnySelfNeed reports whether rules grant one of selfNeeds.
func grantsAnySelfNeed(rules []rbacv1.PolicyRule) bool {
	return slices.ContainsFunc(selfNeeds, func(n struct{ group, resource, verb string }) bool {
		return grantsAll(rules, n.group, n.resource, n.verb)
	})
}

// mayGrantSelf reports whether rules grant one of selfNeeds or selfJudgingReads, or anything on
// Secrets: a change of such a role bound to the webhook's account is judged for what it takes.
func mayGrantSelf(rules []rbacv1.PolicyRule) bool {
	return grantsAnySelfNeed(rules) || takesNeeds(selfJudgingReads, rules, nil, true) || takesSecretRules(rules, nil, true)
}

// takesNeeds reports whether going from old to now (deleted: nothing) loses one of needs.
func takesNeeds(needs []struct{ group, resource, verb string }, old, now []rbacv1.PolicyRule, deleted bool) bool {
	for _, n := range needs {
		if grantsAll(old, n.group, n.resource, n.verb) && (deleted || !grantsAll(now, n.group, n.resource, n.verb)) {
			return true
		}
	}
	return false
}

// takesFromSelf says what the change takes from the webhook's own account self ("" for
// nothing). accounts are the accounts the change can touch (RBACChange.Affected).
func (c *RBACChange) takesFromSelf(f *Facts, self types.NamespacedName, accounts []AccountSelector) string {
	if self.Name == "" {
		return ""
	}
	is := func(sel AccountSelector) bool { return sel.selects(self) }
	switch {
	case c.Kind == gvkServiceAccount.Kind:
		if c.Namespace == self.Namespace && c.Name == self.Name && slices.ContainsFunc(accounts, is) {
			return "it takes the webhook's own ServiceAccount (or its token) away"
		}
	case c.isBinding():
		// Its account named: when the role may grant one of its reads or its serving
		// certificate's Secret (the chart's bindings do). A group it is in only when the role
		// may grant one of the reads it verifies writers with: a namespace's "view" for every
		// ServiceAccount unbound takes nothing from the guard. A role that cannot be read counts.
		byName, byGroup := false, false
		for _, s := range c.removedSubjects() {
			if sel, ok := selectorOf(s, c.Namespace); ok && is(sel) {
				byName = byName || sel.Name != ""
				byGroup = byGroup || sel.Name == ""
			}
		}
		if byName && c.boundRoleMayGrant(f, true) {
			return "it unbinds the webhook's own ServiceAccount"
		}
		if byGroup && c.boundRoleMayGrant(f, false) {
			switch kept, err := c.selfKeepsNeeds(f, self); {
			case err != nil:
				return "it unbinds the webhook's own ServiceAccount (a group it is in), and whether another binding grants it the same could not be told: " + err.Error()
			case !kept:
				return "it unbinds the webhook's own ServiceAccount (a group it is in) from reads no other binding grants it"
			}
		}
	case c.isRole():
		if slices.ContainsFunc(accounts, is) && takesNeeds(selfNeeds, c.OldRules, c.NewRules, c.Deleted) {
			return "it takes reads the guard verifies writers with from a role bound to the webhook's own ServiceAccount"
		}
	}
	return ""
}

// takesJudgingReads says what a change of a namespaced role bound to the webhook's own account takes
// of selfJudgingReads ("" for nothing); handleRBAC refuses it unless the webhook's ClusterRole is
// already an older chart's.
func (c *RBACChange) takesJudgingReads(self types.NamespacedName, accounts []AccountSelector) string {
	if self.Name == "" || !c.isRole() || c.Namespace == "" {
		return ""
	}
	if !slices.ContainsFunc(accounts, func(sel AccountSelector) bool { return sel.selects(self) }) {
		return ""
	}
	switch {
	case takesNeeds(selfJudgingReads, c.OldRules, c.NewRules, c.Deleted):
		return "it takes the reads the guard verifies Pods' owners and RBAC changes with (apps, batch, pods, replicationcontrollers, serviceaccounts, roles, rolebindings) from a role bound to the webhook's own ServiceAccount; without them an armed Pod that names an owner fails open"
	case takesSecretRules(c.OldRules, c.NewRules, c.Deleted):
		// Its serving certificate's Secret: a webhook that restarts without it never serves, and
		// Pods fail open (the twenty-fourth red team emptied that Role, then freed its binding).
		return "it takes a rule on Secrets (the webhook's serving certificate) from a role bound to the webhook's own ServiceAccount"
	}
	return ""
}

// takesSecretRules reports whether going from old to now (deleted: nothing) drops a rule on
// Secrets: each such rule must stay as it is.
func takesSecretRules(old, now []rbacv1.PolicyRule, deleted bool) bool {
	for i := range old {
		r := &old[i]
		if !matchesAny(r.APIGroups, rbacv1.APIGroupAll, "") || !matchesAny(r.Resources, rbacv1.ResourceAll, "secrets") {
			continue
		}
		if deleted || !slices.ContainsFunc(now, func(n rbacv1.PolicyRule) bool { return equality.Semantic.DeepEqual(&n, r) }) {
			return true
		}
	}
	return false
}

// boundRoleMayGrant reports whether the role the binding under change names may grant one of
// selfNeeds (named: or of selfJudgingReads, or anything on Secrets, the serving certificate's): it
// does, or it could not be read (AffectedNeeds asks for it). A binding that names the webhook's
// account to a role it needs nothing of is deleted freely (the twenty-third red team could not).
func (c *RBACChange) boundRoleMayGrant(f *Facts, named bool) bool {
	k, ok := c.boundRole()
	if !ok {
		return true
	}
	r, ok := f.Roles[k]
	switch {
	case !ok || r.Err != nil:
		return true
	case r.NotFound:
		return false // it grants nothing
	}
	if grantsAnySelfNeed(r.Rules) {
		return true
	}
	return named && (slices.ContainsFunc(selfJudgingReads, func(n struct{ group, resource, verb string }) bool {
		return grantsAll(r.Rules, n.group, n.resource, n.verb)
	}) ||
		slices.ContainsFunc(r.Rules, func(rule rbacv1.PolicyRule) bool {
			return matchesAny(rule.APIGroups, rbacv1.APIGroupAll, "") && matchesAny(rule.Resources, rbacv1.ResourceAll, "secrets")
		}))
}

// selfKeepsNeeds reports whether the webhook's account self keeps, once the change lands, each of
// selfNeeds that the role of the binding under change grants, through its other bindings (the
// twenty-second and twenty-fifth red teams: unbinding the namespace's `view` or `edit` from every
// ServiceAccount, or from every authenticated user, was refused while the chart's Role granted the
// guard the same reads). Kept where the reads are needed (selfScopes): a RoleBinding's namespace,
// or every guarded namespace for a ClusterRoleBinding. The RBAC state is what selfKeepsQuery asked
// for; an error when some of it could not be read.
func (c *RBACChange) selfKeepsNeeds(f *Facts, self types.NamespacedName) (bool, error) {
	k, ok := c.boundRole()
	if !ok {
		return false, nil
	}
	r, ok := f.Roles[k]
	switch {
	case !ok:
		return false, fmt.Errorf("%s: %w", k, errNotLookedUp)
	case r.Err != nil:
		return false, r.Err
	}
	after := c.view(f, afterChange)
	for _, n := range selfNeeds {
		if !grantsAll(r.Rules, n.group, n.resource, n.verb) {
			continue
		}
		scopes := c.selfScopes()
		if n.resource == "subjectaccessreviews" {
			scopes = []string{""} // cluster-scoped: only a ClusterRoleBinding grants it
		}
		for _, scope := range scopes {
			kept, err := after.grants(self, scope, func(rule *rbacv1.PolicyRule) bool { return ruleGrantsAll(rule, n.group, n.resource, n.verb) })
			if err != nil || !kept {
				return false, err
			}
		}
	}
	return true, nil
}

// selfScopes are the namespaces where the guard needs the reads a binding under change may
// grant it: a RoleBinding's own; for a ClusterRoleBinding each namespace the webhook guards
// (clusterRoleScopes), or the cluster scope alone when it guards every namespace ("*": its
// ClusterRole then grants them cluster-wide).
func (c *RBACChange) selfScopes() []string {
	switch {
	case c.Namespace != "":
		return []string{c.Namespace}
	case len(c.clusterRoleScopes) == 0 || slices.Contains(c.clusterRoleScopes, "*"):
		return []string{""}
	}
	return c.clusterRoleScopes
}

// selfKeepsQuery is the RBAC state selfKeepsNeeds reads: the ClusterRoleBindings and the
// RoleBindings of selfScopes, then the roles of those that apply to self (two rounds). Empty
// unless the change unbinds a group self is in from a role that grants one of selfNeeds.
func (c *RBACChange) selfKeepsQuery(f *Facts, self types.NamespacedName) Query {
	b := newQueryBuilder(f, c.Namespace)
	if self.Name == "" || !c.isBinding() || !c.boundRoleMayGrant(f, false) ||
		!slices.ContainsFunc(c.removedSubjects(), func(s rbacv1.Subject) bool {
			sel, ok := selectorOf(s, c.Namespace)
			return ok && sel.Name == "" && sel.selects(self)
		}) {
		return b.query()
	}
	scopes := append([]string{""}, c.selfScopes()...)
	for _, s := range scopes {
		b.bindings(s)
	}
	for _, k := range c.view(f, afterChange).neededRoles(self, scopes...) {
		b.role(k)
	}
	return b.query()
}

// selfMessage is the refusal of a change that takes the guard's own access.
func selfMessage(c *RBACChange, self types.NamespacedName, what string) string {
	return fmt.Sprintf("ehdb-election guard: refusing %s: %s (%s). Without its access the guard cannot verify writers: armed Pods would fail open and workloads be refused. Remove the webhook first (helm uninstall of its release removes its webhook configuration before its RBAC), or keep the access.", c, what, self)
}
