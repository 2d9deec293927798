package webhook

import (
	"fmt"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/types"
)

// This file answers one question: what does the API server's RBAC authorizer grant a
// ServiceAccount on coordination.k8s.io leases, given the bindings and roles it reads? It follows
// k8s.io/kubernetes plugin/pkg/auth/authorizer/rbac (RuleAllows) and pkg/registry/rbac/validation
// (VisitRulesFor, appliesToUser, GetRoleReferenceRules) and pkg/apis/rbac/v1/evaluation_helpers.go
// (VerbMatches, APIGroupMatches, ResourceMatches, ResourceNameMatches), so the guard predicts
// the authorizer's answer after an RBAC change instead of guessing it.

// Binding is a RoleBinding (Namespace set) or a ClusterRoleBinding (Namespace ""), as the
// authorizer reads it: its role reference and subjects.
type Binding struct {
	Namespace string
	Name      string
	RoleRef   rbacv1.RoleRef
	Subjects  []rbacv1.Subject
}

// RoleKey names a Role (Namespace set) or a ClusterRole (Namespace "").
type RoleKey struct {
	Namespace string
	Name      string
}

func (k RoleKey) String() string {
	if k.Namespace == "" {
		return "ClusterRole " + k.Name
	}
	return "Role " + k.Namespace + "/" + k.Name
}

func (b Binding) String() string {
	if b.Namespace == "" {
		return "ClusterRoleBinding " + b.Name
	}
	return "RoleBinding " + b.Namespace + "/" + b.Name
}

// roleOf is the role a binding grants: GetRoleReferenceRules reads a Role in the binding's own
// namespace or a ClusterRole; any other kind grants nothing.
func (b Binding) roleOf() (RoleKey, bool) {
	switch b.RoleRef.Kind {
	case "Role":
		if b.Namespace == "" {
			return RoleKey{}, false
		}
		return RoleKey{Namespace: b.Namespace, Name: b.RoleRef.Name}, true
	case "ClusterRole":
		return RoleKey{Name: b.RoleRef.Name}, true
	}
	return RoleKey{}, false
}

// appliesTo reports whether a subject of the binding is the ServiceAccount's token identity
// (appliesToUser: the user name, one of its groups, or the ServiceAccount with the binding's
// namespace as the default).
func (b Binding) appliesTo(sa types.NamespacedName) bool {
	for _, s := range b.Subjects {
		if subjectIs(s, b.Namespace, sa) {
			return true
		}
	}
	return false
}

func subjectIs(s rbacv1.Subject, bindingNamespace string, sa types.NamespacedName) bool {
	switch s.Kind {
	case rbacv1.UserKind:
		return s.Name == serviceAccountUser(sa)
	case rbacv1.GroupKind:
		return slices.Contains(ServiceAccountGroups(sa.Namespace), s.Name)
	case rbacv1.ServiceAccountKind:
		ns := bindingNamespace
		if s.Namespace != "" {
			ns = s.Namespace
		}
		return ns != "" && ns == sa.Namespace && s.Name == sa.Name
	}
	return false
}

// leaseRuleAllows is RuleAllows for a lease request: verb on coordination.k8s.io leases named
// name ("" for a request that names none, such as create or a namespace-wide check).
func leaseRuleAllows(r *rbacv1.PolicyRule, verb, name string) bool {
	return matchesAny(r.Verbs, rbacv1.VerbAll, verb) &&
		matchesAny(r.APIGroups, rbacv1.APIGroupAll, "coordination.k8s.io") &&
		matchesAny(r.Resources, rbacv1.ResourceAll, "leases") &&
		(len(r.ResourceNames) == 0 || slices.Contains(r.ResourceNames, name))
}

func matchesAny(list []string, all, want string) bool {
	for _, x := range list {
		if x == all || x == want {
			return true
		}
	}
	return false
}

// rulesMayGrantLeases reports whether any rule could allow one of the verbs the election needs on
// some Lease: the cheap test that tells a role the guard must judge from one it can ignore.
func rulesMayGrantLeases(rules []rbacv1.PolicyRule) bool {
	for i := range rules {
		r := &rules[i]
		if matchesAny(r.APIGroups, rbacv1.APIGroupAll, "coordination.k8s.io") && matchesAny(r.Resources, rbacv1.ResourceAll, "leases") &&
			slices.ContainsFunc(electionVerbs, func(v string) bool { return matchesAny(r.Verbs, rbacv1.VerbAll, v) }) {
			return true
		}
	}
	return false
}

// rulesGrantLeaseWildcard reports whether rules may grant the lease guard's wildcard probe on
// coordination.k8s.io leases: a "*" verb, or the probe itself named (red team N of stop 33 named
// it, and the guard refused the writer's renewals as a holder of every verb).
func rulesGrantLeaseWildcard(rules []rbacv1.PolicyRule) bool {
	return slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool {
		return matchesAny(r.APIGroups, rbacv1.APIGroupAll, "coordination.k8s.io") && matchesAny(r.Resources, rbacv1.ResourceAll, "leases") &&
			(slices.Contains(r.Verbs, rbacv1.VerbAll) || slices.Contains(r.Verbs, VerbWildcardProbe))
	})
}

// RBACView is the RBAC state the authorizer reads for one question: the ClusterRoleBindings, the
// RoleBindings of the namespaces asked about, and the roles they name. A lookup that failed is
// kept as its error.
type RBACView struct {
	// Bindings returns the bindings of a scope: "" the ClusterRoleBindings, else the RoleBindings
	// of that namespace; ok=false when they were not looked up.
	Bindings func(scope string) (BindingsFact, bool)
	// Role returns a role's rules; ok=false when it was not looked up.
	Role func(RoleKey) (RoleFact, bool)
}

// errRBACNotRead marks RBAC state the guard needed and did not have.
var errRBACNotRead = fmt.Errorf("the RBAC objects were %w", errNotLookedUp)

// allows answers whether the RBAC authorizer grants sa verb on the Lease name in ns (VisitRulesFor:
// ClusterRoleBindings, then the namespace's RoleBindings; the first allowing rule decides). An
// error is returned only when no rule allowed and some binding or role could not be read: the
// answer is then unknown, as the authorizer's would be incomplete.
func (v RBACView) allows(sa types.NamespacedName, ns, verb, name string) (bool, error) {
	return v.grants(sa, ns, func(r *rbacv1.PolicyRule) bool { return leaseRuleAllows(r, verb, name) })
}

// grants is allows for any request: whether a rule of a role bound to sa in ns (or cluster-wide;
// ns "" asks of the ClusterRoleBindings alone, as for a cluster-scoped resource) matches.
func (v RBACView) grants(sa types.NamespacedName, ns string, matches func(*rbacv1.PolicyRule) bool) (bool, error) {
	var problems []string
	scopes := []string{"", ns}
	if ns == "" {
		scopes = scopes[:1]
	}
	for _, scope := range scopes {
		bs, ok := v.Bindings(scope)
		switch {
		case !ok:
			problems = append(problems, errRBACNotRead.Error())
			continue
		case bs.Err != nil:
			problems = append(problems, bs.Err.Error())
			continue
		}
		for _, b := range bs.Items {
			if !b.appliesTo(sa) {
				continue
			}
			key, ok := b.roleOf()
			if !ok {
				continue
			}
			role, ok := v.Role(key)
			switch {
			case !ok:
				problems = append(problems, key.String()+": "+errNotLookedUp.Error())
				continue
			case role.NotFound:
				continue // a binding to a missing role grants nothing
			case role.Err != nil:
				problems = append(problems, role.Err.Error())
				continue
			}
			for i := range role.Rules {
				if matches(&role.Rules[i]) {
					return true, nil
				}
			}
		}
	}
	if len(problems) > 0 {
		return false, fmt.Errorf("could not read every binding that may grant it (%s)", strings.Join(problems, "; "))
	}
	return false, nil
}

// neededRoles lists the roles of bindings in scopes that apply to sa, and that are not yet known.
func (v RBACView) neededRoles(sa types.NamespacedName, scopes ...string) []RoleKey {
	var out []RoleKey
	for _, scope := range scopes {
		bs, ok := v.Bindings(scope)
		if !ok || bs.Err != nil {
			continue
		}
		for _, b := range bs.Items {
			if !b.appliesTo(sa) {
				continue
			}
			if key, ok := b.roleOf(); ok {
				if _, known := v.Role(key); !known && !slices.Contains(out, key) {
					out = append(out, key)
				}
			}
		}
	}
	return out
}

// BindingsFact is what a list of one scope's bindings returned.
type BindingsFact struct {
	Items []Binding
	Err   error
}

// RoleFact is what a lookup of one Role or ClusterRole returned.
type RoleFact struct {
	Rules    []rbacv1.PolicyRule
	NotFound bool
	Err      error
}

// BindingOfRoleBinding and BindingOfClusterRoleBinding convert the API objects.
func BindingOfRoleBinding(rb *rbacv1.RoleBinding) Binding {
	return Binding{Namespace: rb.Namespace, Name: rb.Name, RoleRef: rb.RoleRef, Subjects: rb.Subjects}
}

// BindingOfClusterRoleBinding converts a ClusterRoleBinding.
func BindingOfClusterRoleBinding(crb *rbacv1.ClusterRoleBinding) Binding {
	return Binding{Name: crb.Name, RoleRef: crb.RoleRef, Subjects: crb.Subjects}
}
