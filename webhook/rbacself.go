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
// ServiceAccount from a binding, deletes or narrows a role bound to it that the webhook is sent,
// or deletes that ServiceAccount (or turns its token off) is refused. `helm uninstall` of the
// webhook's release is not held: its pre-delete hook removes the webhook configuration first.

// takesFromSelf says what the change takes from the webhook's own account self ("" for
// nothing). accounts are the accounts the change can touch (RBACChange.Affected).
func (c *RBACChange) takesFromSelf(self types.NamespacedName, accounts []AccountSelector) string {
	if self.Name == "" {
		return ""
	}
	is := func(sel AccountSelector) bool {
		return (sel.Namespace == "" || sel.Namespace == self.Namespace) && (sel.Name == "" || sel.Name == self.Name)
	}
	switch {
	case c.Kind == gvkServiceAccount.Kind:
		if c.Namespace == self.Namespace && c.Name == self.Name && slices.ContainsFunc(accounts, is) {
			return "it takes the webhook's own ServiceAccount (or its token) away"
		}
	case c.isBinding():
		// Whatever role it binds: the guard's bindings are what give it its reads.
		if slices.ContainsFunc(c.removedSubjects(), func(s rbacv1.Subject) bool {
			sel, ok := selectorOf(s, c.Namespace)
			return ok && is(sel)
		}) {
			return "it unbinds the webhook's own ServiceAccount"
		}
	case c.isRole():
		if slices.ContainsFunc(accounts, is) && (c.Deleted || !rulesCover(c.NewRules, c.OldRules)) {
			return "it takes rules from a role bound to the webhook's own ServiceAccount"
		}
	}
	return ""
}

// rulesCover reports whether every rule of old is, unchanged, a rule of now (an edit that only
// adds rules takes nothing away).
func rulesCover(now, old []rbacv1.PolicyRule) bool {
	for _, o := range old {
		if !slices.ContainsFunc(now, func(n rbacv1.PolicyRule) bool { return equality.Semantic.DeepEqual(n, o) }) {
			return false
		}
	}
	return true
}

// selfMessage is the refusal of a change that takes the guard's own access.
func selfMessage(c *RBACChange, self types.NamespacedName, what string) string {
	return fmt.Sprintf("ehdb-election guard: refusing %s: %s (%s). Without its access the guard cannot verify writers: armed Pods would fail open and workloads be refused. Remove the webhook first (helm uninstall of its release removes its webhook configuration before its RBAC), or keep the access.", c, what, self)
}
