package webhook

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// This file answers: what does an RBAC or ServiceAccount change under review take away from the
// writers that run as the accounts it touches (issue 17, "disarming is refused wherever it comes
// from")? The change is an overlay on the facts: the authorizer's answer after it is the answer
// now, minus what the RBAC authorizer granted only through the changed object (RBACView.allows on
// the state before and after); a deleted ServiceAccount is missing and one that stops mounting its
// token mounts none. Judging a writer with the overlay is Decide's ordinary judgement.

// Kinds of RBAC change the guard reviews.
var (
	gvkRole               = rbacv1.SchemeGroupVersion.WithKind("Role")
	gvkRoleBinding        = rbacv1.SchemeGroupVersion.WithKind("RoleBinding")
	gvkClusterRole        = rbacv1.SchemeGroupVersion.WithKind("ClusterRole")
	gvkClusterRoleBinding = rbacv1.SchemeGroupVersion.WithKind("ClusterRoleBinding")
	gvkServiceAccount     = schema.GroupVersionKind{Version: "v1", Kind: "ServiceAccount"}
)

// RBACKinds are the kinds whose UPDATE and DELETE can take a writer's lease access or token away,
// and (but for ServiceAccount) whose CREATE and UPDATE can give it every verb on leases, which
// the lease guard refuses.
var RBACKinds = []schema.GroupVersionKind{gvkRole, gvkRoleBinding, gvkClusterRole, gvkClusterRoleBinding, gvkServiceAccount}

// isRBACKind reports whether gvk is one of RBACKinds.
func isRBACKind(gvk schema.GroupVersionKind) bool { return slices.Contains(RBACKinds, gvk) }

// RBACChange is a CREATE, UPDATE or DELETE of a Role, RoleBinding, ClusterRole or
// ClusterRoleBinding, or an UPDATE or DELETE of a ServiceAccount, as the authorizer and the kubelet
// will see it. A created object is one whose old state grants nothing.
type RBACChange struct {
	Kind      string
	Namespace string // "" for the cluster-scoped kinds
	Name      string
	Deleted   bool
	Created   bool
	// OldBinding and NewBinding are set for the binding kinds (NewBinding nil on delete).
	OldBinding, NewBinding *Binding
	// OldRules and NewRules are set for the role kinds.
	OldRules, NewRules []rbacv1.PolicyRule
	// OldLabels, NewLabels, OldAggregation and NewAggregation are a ClusterRole's labels and
	// aggregationRule: what the aggregation controller rewrites other roles by (aggregation.go).
	OldLabels, NewLabels           map[string]string
	OldAggregation, NewAggregation *rbacv1.AggregationRule
	// NewAutomount is the ServiceAccount's automountServiceAccountToken after an update.
	NewAutomount *bool
	// rewrites are the ClusterRoles the aggregation controller will rewrite because of the change
	// (aggregate); nil until the ClusterRoles are read.
	rewrites map[RoleKey]rewrite
	// clusterRoleScopes are the namespaces whose RoleBindings may grant a ClusterRole under
	// review (Handler.ClusterRoleScopes).
	clusterRoleScopes []string
	// removed and added cache removedSubjects and addedSubjects (a binding may name tens of
	// thousands of subjects).
	removed, added *[]rbacv1.Subject
	// guardsSelf is set when the webhook keeps its own access (Handler.Self): a role that grants
	// what it verifies writers with matters too.
	guardsSelf bool
}

func (c *RBACChange) String() string {
	verb := "editing"
	switch {
	case c.Deleted:
		verb = "deleting"
	case c.Created:
		verb = "creating"
	}
	if c.Namespace == "" {
		return fmt.Sprintf("%s %s %s", verb, c.Kind, c.Name)
	}
	return fmt.Sprintf("%s %s %s/%s", verb, c.Kind, c.Namespace, c.Name)
}

func (c *RBACChange) isBinding() bool {
	return c.Kind == gvkRoleBinding.Kind || c.Kind == gvkClusterRoleBinding.Kind
}

func (c *RBACChange) isRole() bool { return c.Kind == gvkRole.Kind || c.Kind == gvkClusterRole.Kind }

// role is the role the change edits (role kinds only).
func (c *RBACChange) role() (RoleKey, bool) {
	if !c.isRole() {
		return RoleKey{}, false
	}
	return RoleKey{Namespace: c.Namespace, Name: c.Name}, true
}

// DecodeRBACChange decodes a review's object and old object (raw JSON: newRaw empty on DELETE,
// oldRaw on CREATE).
func DecodeRBACChange(gvk schema.GroupVersionKind, namespace, name string, newRaw, oldRaw []byte, op admissionv1.Operation) (*RBACChange, error) {
	deleted, created := op == admissionv1.Delete, op == admissionv1.Create
	if created && gvk == gvkServiceAccount {
		return nil, errors.New("a created ServiceAccount takes nothing from anyone")
	}
	c := &RBACChange{Kind: gvk.Kind, Namespace: namespace, Name: name, Deleted: deleted, Created: created}
	if gvk == gvkClusterRole || gvk == gvkClusterRoleBinding {
		c.Namespace = ""
	}
	decode := func(raw []byte, into any) error {
		if len(raw) == 0 {
			return errors.New("no object in the request")
		}
		return decodeInto(raw, into, gvk)
	}
	// A created object's old state is the zero object it is given as: no rules, no subjects, no
	// labels.
	both := func(newObj, oldObj any) error {
		if created {
			if err := decode(newRaw, newObj); err != nil {
				return fmt.Errorf("object: %w", err)
			}
			return nil
		}
		if err := decode(oldRaw, oldObj); err != nil {
			return fmt.Errorf("old object: %w", err)
		}
		if deleted {
			return nil
		}
		if err := decode(newRaw, newObj); err != nil {
			return fmt.Errorf("object: %w", err)
		}
		return nil
	}
	switch gvk {
	case gvkRole:
		var n, o rbacv1.Role
		if err := both(&n, &o); err != nil {
			return nil, err
		}
		c.OldRules, c.NewRules = o.Rules, n.Rules
		c.fillName(orName(o.Name, n.Name))
	case gvkClusterRole:
		var n, o rbacv1.ClusterRole
		if err := both(&n, &o); err != nil {
			return nil, err
		}
		c.OldRules, c.NewRules = o.Rules, n.Rules
		c.OldLabels, c.NewLabels = o.Labels, n.Labels
		c.OldAggregation, c.NewAggregation = o.AggregationRule, n.AggregationRule
		c.fillName(orName(o.Name, n.Name))
	case gvkRoleBinding:
		var n, o rbacv1.RoleBinding
		if err := both(&n, &o); err != nil {
			return nil, err
		}
		o.Namespace, n.Namespace, o.Name, n.Name = c.Namespace, c.Namespace, orName(c.Name, orName(o.Name, n.Name)), orName(c.Name, orName(o.Name, n.Name))
		ob := BindingOfRoleBinding(&o)
		c.OldBinding = &ob
		if !deleted {
			nb := BindingOfRoleBinding(&n)
			c.NewBinding = &nb
		}
		c.fillName(orName(o.Name, n.Name))
	case gvkClusterRoleBinding:
		var n, o rbacv1.ClusterRoleBinding
		if err := both(&n, &o); err != nil {
			return nil, err
		}
		o.Name, n.Name = orName(c.Name, orName(o.Name, n.Name)), orName(c.Name, orName(o.Name, n.Name))
		ob := BindingOfClusterRoleBinding(&o)
		c.OldBinding = &ob
		if !deleted {
			nb := BindingOfClusterRoleBinding(&n)
			c.NewBinding = &nb
		}
		c.fillName(orName(o.Name, n.Name))
	case gvkServiceAccount:
		var n, o corev1.ServiceAccount
		if err := both(&n, &o); err != nil {
			return nil, err
		}
		c.NewAutomount = n.AutomountServiceAccountToken
		c.fillName(orName(o.Name, n.Name))
	default:
		return nil, fmt.Errorf("%w: %s", ErrUnknownKind, gvk)
	}
	if c.Name == "" {
		return nil, errors.New("the object has no name")
	}
	return c, nil
}

func (c *RBACChange) fillName(n string) {
	if c.Name == "" {
		c.Name = n
	}
}

func orName(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// stage is a moment of the change: before it, right after it, and once the aggregation
// controller has rewritten what the change makes it rewrite (aggregation.go). Access must survive
// both later moments: the controller catches up within a second when it runs, and never when it
// does not.
type stage int

const (
	beforeChange stage = iota
	afterChange
	afterRewrites
)

// view is the RBAC state at one stage of the change, over the facts.
func (c *RBACChange) view(f *Facts, at stage) RBACView {
	scope := c.Namespace // a RoleBinding's; "" for a ClusterRoleBinding
	return RBACView{
		Bindings: func(s string) (BindingsFact, bool) {
			bs, ok := f.Bindings[s]
			if !ok || bs.Err != nil || !c.isBinding() || s != scope {
				return bs, ok
			}
			items := slices.DeleteFunc(slices.Clone(bs.Items), func(b Binding) bool { return b.Name == c.Name })
			b := c.OldBinding
			if at != beforeChange {
				b = c.NewBinding
			}
			if b != nil {
				items = append(items, *b)
			}
			return BindingsFact{Items: items}, true
		},
		Role: func(k RoleKey) (RoleFact, bool) {
			if rw, ok := c.rewrites[k]; ok {
				switch own, isRole := c.role(); {
				case at == afterRewrites:
					return RoleFact{Rules: rw.after}, true
				case !isRole || own != k:
					return RoleFact{Rules: rw.before}, true // another role stands until rewritten
				}
				// the changed role itself: before and right after the change, its own rules (below)
			}
			if key, ok := c.role(); ok && key == k {
				switch {
				case at == beforeChange:
					return RoleFact{Rules: c.OldRules}, true
				case c.Deleted:
					return RoleFact{NotFound: true}, true
				default:
					return RoleFact{Rules: c.NewRules}, true
				}
			}
			r, ok := f.Roles[k]
			return r, ok
		},
	}
}

// lost reports whether the change takes away the access of check that the RBAC authorizer grants
// now: granted before it, not after it or not once the aggregation controller has caught up. An
// error means the guard could not tell.
func (c *RBACChange) lost(f *Facts, check AccessCheck) (bool, error) { return c.flips(f, check, true) }

// gained reports whether the change grants check's access that the RBAC authorizer does not grant
// now: not granted before it, granted right after it or once the aggregation controller has caught
// up.
func (c *RBACChange) gained(f *Facts, check AccessCheck) (bool, error) {
	return c.flips(f, check, false)
}

// flips reports whether the RBAC authorizer's answer to check is was before the change and the
// other right after it or once the aggregation controller has caught up. A check the RBAC grants
// otherwise than was (another authorizer's, or nothing) is untouched; an error means the guard
// could not tell.
func (c *RBACChange) flips(f *Facts, check AccessCheck, was bool) (bool, error) {
	if !c.touches(check) {
		return false, nil
	}
	before, err := c.view(f, beforeChange).allows(check.ServiceAccount, check.Namespace, check.Verb, check.Name)
	if err != nil && !before {
		return false, err
	}
	if before != was {
		return false, nil
	}
	for _, at := range []stage{afterChange, afterRewrites} {
		after, err := c.view(f, at).allows(check.ServiceAccount, check.Namespace, check.Verb, check.Name)
		if err != nil && !after {
			return false, err
		}
		if after != was {
			return true, nil
		}
	}
	return false, nil
}

// touches reports whether the change can grant or take check's access at all: a Role or
// RoleBinding grants only in its own namespace, so access elsewhere is out of its reach (and its
// RBAC need not be read: a writer electing in a namespace the webhook cannot read does not make
// an edit of its own namespace's Role "could not verify"). Cluster-scoped kinds reach everywhere.
func (c *RBACChange) touches(check AccessCheck) bool {
	if !c.isBinding() && !c.isRole() {
		return false
	}
	return c.Namespace == "" || c.Namespace == check.Namespace
}

// apply returns the facts as the writer w will meet them after the change: access that the change
// takes away refused, access the guard cannot judge unverified, and the ServiceAccount as it will
// be. The facts themselves are not changed.
func (c *RBACChange) apply(f *Facts, w *Workload) *Facts {
	out := *f
	if c.isBinding() || c.isRole() {
		out.Access = make(map[AccessCheck]AccessFact, len(f.Access))
		for check, a := range f.Access {
			switch {
			case a.Err == nil && a.Allowed:
				switch lost, err := c.lost(f, check); {
				case err != nil:
					a = AccessFact{Err: fmt.Errorf("could not tell what %s leaves of it: %w", c, err)}
				case lost:
					a = AccessFact{Reason: c.describe() + " removes it"}
				}
			case a.Err == nil && check.Verb == VerbWildcardProbe:
				// A grant can disarm too: an account that comes to hold every verb on leases is
				// refused by the lease guard (the twenty-first red team widened a writer's Role to
				// "*", admitted, and its Lease writes were refused from then on).
				switch gained, err := c.gained(f, check); {
				case err != nil:
					a = AccessFact{Err: fmt.Errorf("could not tell what %s grants: %w", c, err)}
				case gained:
					a = AccessFact{Allowed: true, Reason: c.describe() + " grants every verb on leases"}
				}
			}
			out.Access[check] = a
		}
	}
	if c.Kind == gvkServiceAccount.Kind && w != nil && c.Namespace == w.Namespace {
		if sa, ok := f.ServiceAccounts[c.Name]; ok {
			out.ServiceAccounts = make(map[string]ServiceAccountFact, len(f.ServiceAccounts))
			for k, v := range f.ServiceAccounts {
				out.ServiceAccounts[k] = v
			}
			if c.Deleted {
				sa = ServiceAccountFact{NotFound: true}
			} else {
				sa.AutomountToken = c.NewAutomount
			}
			out.ServiceAccounts[c.Name] = sa
		}
	}
	return &out
}

// needs asks for the RBAC state the overlay reads for every access the writer has now.
func (c *RBACChange) needs(f *Facts, b *queryBuilder) {
	if !c.isBinding() && !c.isRole() {
		return
	}
	for check, a := range f.Access {
		if a.Err != nil || !(a.Allowed || check.Verb == VerbWildcardProbe) || !c.touches(check) {
			continue // apply judges what is granted, and a wildcard probe's gain
		}
		c.needsIn(f, b, check.ServiceAccount, check.Namespace)
	}
}

// needsIn asks for the RBAC state that decides sa's lease access in ns at every stage of the change.
func (c *RBACChange) needsIn(f *Facts, b *queryBuilder, sa types.NamespacedName, ns string) {
	if !c.touches(AccessCheck{ServiceAccount: sa, Namespace: ns}) {
		return
	}
	b.bindings("")
	b.bindings(ns)
	for _, at := range []stage{beforeChange, afterChange, afterRewrites} {
		for _, k := range c.view(f, at).neededRoles(sa, "", ns) {
			b.role(k)
		}
	}
}

// needsTaken asks for what takenFrom reads of sa's access in namespaces.
func (c *RBACChange) needsTaken(f *Facts, b *queryBuilder, sa types.NamespacedName, namespaces []string) {
	if k, ok := c.boundRole(); ok {
		b.role(k)
	}
	for _, ns := range namespaces {
		b.leaseGuard(ns)
		c.needsIn(f, b, sa, ns)
	}
}

// maxNamedLeases bounds the Leases by name takenFrom checks: a role may list any number.
const maxNamedLeases = 64

// takenFrom says what lease access of sa the change takes in any of namespaces, namespace-wide or
// on a Lease the rules it changes name, or what it grants there that the lease guard refuses (every
// verb), or "". For a running process whose election may run
// elsewhere than the guard resolves now (electsElsewhere), every Lease its account reaches may be
// the one it holds, so nothing may be taken from the account while it runs.
func (c *RBACChange) takenFrom(f *Facts, sa types.NamespacedName, namespaces []string) (string, error) {
	if !c.isBinding() && !c.isRole() {
		return "", nil
	}
	names, err := c.namedLeases(f)
	if err != nil {
		return "", err
	}
	for _, ns := range namespaces {
		verbs := electionVerbs
		if g, ok := f.LeaseGuards[ns]; ok && g.Err == nil && !g.asksAuthorizer(sa) {
			verbs = requiredVerbs // no lease guard there asks for VerbElect: losing it takes nothing
		}
		for _, verb := range verbs {
			checks := []AccessCheck{{ServiceAccount: sa, Namespace: ns, Verb: verb}}
			for _, n := range names {
				if verb != "create" { // create cannot be restricted by name
					checks = append(checks, AccessCheck{ServiceAccount: sa, Namespace: ns, Verb: verb, Name: n})
				}
			}
			for _, check := range checks {
				switch lost, err := c.lost(f, check); {
				case err != nil:
					return "", err
				case lost && check.Name != "":
					return fmt.Sprintf("%s takes %s on Lease %s/%s from ServiceAccount %s", c.describe(), verb, ns, check.Name, sa), nil
				case lost:
					return fmt.Sprintf("%s takes %s on leases in %s from ServiceAccount %s", c.describe(), verb, ns, sa), nil
				}
			}
		}
		if !slices.Contains(verbs, VerbElect) {
			continue
		}
		// Where a lease guard admits the account by its grant, a grant of every verb disarms it
		// as a removal does (apply): on any Lease the process may hold (the twenty-second red team
		// widened the Role of shard 0's Lease, by name, under a process a moved key said was on 1).
		for _, n := range append([]string{""}, names...) {
			switch gained, err := c.gained(f, AccessCheck{ServiceAccount: sa, Namespace: ns, Verb: VerbWildcardProbe, Name: n}); {
			case err != nil:
				return "", err
			case gained:
				return fmt.Sprintf("%s grants ServiceAccount %s every verb on leases in %s, and the lease guard there refuses such an account's Lease writes", c.describe(), sa, ns), nil
			}
		}
	}
	return "", nil
}

// namedLeases are the Lease names the rules the change can alter restrict lease verbs to: the
// changed role's (before and after), the bound role's, and those of the roles the aggregation
// controller rewrites.
func (c *RBACChange) namedLeases(f *Facts) ([]string, error) {
	rules := append(slices.Clone(c.OldRules), c.NewRules...)
	if k, ok := c.boundRole(); ok {
		r, ok := f.Roles[k]
		switch {
		case !ok:
			return nil, fmt.Errorf("%s: %w", k, errNotLookedUp)
		case r.Err != nil:
			return nil, r.Err
		}
		rules = append(rules, r.Rules...)
	}
	for _, rw := range c.rewrites {
		rules = append(rules, rw.before...)
	}
	var names []string
	for i := range rules {
		r := &rules[i]
		if !matchesAny(r.APIGroups, rbacv1.APIGroupAll, "coordination.k8s.io") || !matchesAny(r.Resources, rbacv1.ResourceAll, "leases") {
			continue
		}
		names = appendNew(names, r.ResourceNames...)
		if len(names) > maxNamedLeases {
			return nil, fmt.Errorf("the roles it changes name more than %d Leases", maxNamedLeases)
		}
	}
	return names, nil
}

// boundRole is the role the binding under change names (binding kinds only).
func (c *RBACChange) boundRole() (RoleKey, bool) {
	if c.OldBinding == nil {
		return RoleKey{}, false
	}
	return c.OldBinding.roleOf()
}

// reach is the namespaces where the change can take a writer's lease access that the guard can
// judge: a namespaced kind's own; for a cluster-scoped one, every guarded namespace, w's own and
// also (where w elects now).
func (c *RBACChange) reach(p Policy, w *Workload, also []string) []string {
	if c.Namespace != "" {
		return []string{c.Namespace}
	}
	out := appendNew(slices.Clone(p.LeaseNamespaces), w.Namespace)
	return appendNew(out, also...)
}

// AccountSelector selects ServiceAccounts: Namespace "" is every namespace, Name "" every account
// of the namespace (what a group subject grants).
type AccountSelector struct {
	Namespace, Name string
}

// selects reports whether sel selects the account sa.
func (sel AccountSelector) selects(sa types.NamespacedName) bool {
	return (sel.Namespace == "" || sel.Namespace == sa.Namespace) && (sel.Name == "" || sel.Name == sa.Name)
}

// selectorOf is the ServiceAccounts a subject names, if any (RBAC's appliesToUser for the
// identities of ServiceAccount tokens).
func selectorOf(s rbacv1.Subject, bindingNamespace string) (AccountSelector, bool) {
	switch s.Kind {
	case rbacv1.ServiceAccountKind:
		ns := bindingNamespace
		if s.Namespace != "" {
			ns = s.Namespace
		}
		return AccountSelector{Namespace: ns, Name: s.Name}, ns != ""
	case rbacv1.UserKind:
		rest, ok := strings.CutPrefix(s.Name, "system:serviceaccount:")
		if !ok {
			return AccountSelector{}, false
		}
		ns, name, ok := strings.Cut(rest, ":")
		return AccountSelector{Namespace: ns, Name: name}, ok && ns != "" && name != ""
	case rbacv1.GroupKind:
		switch {
		case s.Name == "system:serviceaccounts" || s.Name == "system:authenticated":
			return AccountSelector{}, true
		case strings.HasPrefix(s.Name, "system:serviceaccounts:"):
			return AccountSelector{Namespace: strings.TrimPrefix(s.Name, "system:serviceaccounts:")}, true
		}
	}
	return AccountSelector{}, false
}

// removedSubjects are the subjects of the old binding that the new one no longer has (all of them
// on a delete).
//
// It is linear in the subjects: a namespace admin's binding of 30,000 made-up accounts, edited to
// another 30,000, took an earlier quadratic version 7 to 11 s of CPU, past the API server's wait
// (the twenty-fifth red team).
func (c *RBACChange) removedSubjects() []rbacv1.Subject {
	if c.removed == nil {
		out := c.subjectsNotIn(c.OldBinding, c.NewBinding)
		c.removed = &out
	}
	return *c.removed
}

// addedSubjects are the subjects the new binding names that the old did not (all of them for a
// created binding): a grant reaches them, and one of every verb on leases disarms a writer among
// them (the lease guard refuses its renewals).
func (c *RBACChange) addedSubjects() []rbacv1.Subject {
	if c.added == nil {
		out := c.subjectsNotIn(c.NewBinding, c.OldBinding)
		c.added = &out
	}
	return *c.added
}

// subjectsNotIn are the subjects of from that other does not name for the same role (all of them
// when other is nil or binds another role; none when from is nil). A subject's namespace defaults
// to the change's.
func (c *RBACChange) subjectsNotIn(from, other *Binding) []rbacv1.Subject {
	switch {
	case from == nil:
		return nil
	case other == nil || other.RoleRef != from.RoleRef:
		return from.Subjects
	}
	type key struct{ kind, name, namespace string }
	named := make(map[key]struct{}, len(other.Subjects))
	for _, o := range other.Subjects {
		named[key{o.Kind, o.Name, orName(o.Namespace, c.Namespace)}] = struct{}{}
	}
	var out []rbacv1.Subject
	for _, s := range from.Subjects {
		if _, ok := named[key{s.Kind, s.Name, orName(s.Namespace, c.Namespace)}]; !ok {
			out = append(out, s)
		}
	}
	return out
}

// changes reports whether the change edits role k, itself or through the aggregation controller.
func (c *RBACChange) changes(k RoleKey) bool {
	_, rewritten := c.rewrites[k]
	return rewritten || k == RoleKey{Namespace: c.Namespace, Name: c.Name}
}

// roleMayMatter reports whether the role the change edits may grant what a writer's election
// needs (a lease verb) or what the guard itself verifies writers with (selfNeeds, rbacself.go), or
// comes to grant every verb on leases, which the lease guard refuses an account for (the
// twenty-second red team widened a role that granted only configmaps to leases "*").
func (c *RBACChange) roleMayMatter() bool {
	return rulesMayGrantLeases(c.OldRules) || (c.guardsSelf && mayGrantSelf(c.OldRules)) || rulesGrantLeaseWildcard(c.NewRules) || c.aggregationChanged() || c.labelsChanged()
}

// labelsChanged: a ClusterRole is created with labels, or its labels change. An aggregated role
// that selects it is rewritten to a union it joins or leaves, whatever it grants itself: red team
// R of stop 34 created a piece of harmless rules that an aggregated role bound to a writer came to
// select, and the controller's rewrite replaced the lease rules its creator had written.
func (c *RBACChange) labelsChanged() bool {
	return c.Kind == gvkClusterRole.Kind && !c.Deleted && !maps.Equal(c.OldLabels, c.NewLabels)
}

// aggregationChanged: a ClusterRole's aggregationRule is set, changed or removed. The aggregation
// controller then rewrites the role's rules to what it selects, whatever they grant now (red team
// Q of stop 34 gave a bound role that granted nothing on leases a selector of a piece of every
// verb: unjudged, and the controller's rewrite, refused, was retried until an answer was missed).
func (c *RBACChange) aggregationChanged() bool {
	return c.Kind == gvkClusterRole.Kind && !equality.Semantic.DeepEqual(c.OldAggregation, c.NewAggregation)
}

// AffectedNeeds is the lookup that tells which accounts the change can touch: the role a binding
// names, or the bindings that name a role (scopes: the namespaces whose RoleBindings may name a
// ClusterRole, "*" for every namespace).
func (c *RBACChange) AffectedNeeds(f *Facts, clusterRoleScopes []string) Query {
	b := newQueryBuilder(f, c.Namespace)
	switch {
	case c.isBinding():
		if len(c.removedSubjects()) > 0 {
			if k, ok := c.OldBinding.roleOf(); ok {
				b.role(k)
				if k.Namespace == "" {
					b.clusterRoles() // what the aggregation controller will write to it (aggregate)
				}
			}
		}
		if len(c.addedSubjects()) > 0 {
			if k, ok := c.NewBinding.roleOf(); ok {
				b.role(k)
				if k.Namespace == "" {
					b.clusterRoles()
				}
			}
		}
	case c.isRole() && c.roleMayMatter():
		if c.Namespace != "" {
			b.bindings(c.Namespace)
		} else {
			b.bindings("")
			for _, s := range clusterRoleScopes {
				b.bindings(s)
			}
			b.clusterRoles()
		}
	}
	return b.query()
}

// Affected lists the accounts whose lease access or token the change can take away, from the facts
// AffectedNeeds asked for. A role that grants no lease verb, a binding of such a role and a binding
// that loses no subject touch nobody.
//
// The work is linear in the subjects of those bindings and stops at maxSubjectsJudged or the
// review's deadline (ctx) with an error, so the review is refused as "could not verify" while the
// API server still waits: the twenty-fifth red team bound `edit` to 60,000 made-up accounts, and an
// earlier quadratic version took 20 s over a ClusterRole change, which the entry's Ignore then
// admitted although it took an armed writer's lease access.
func (c *RBACChange) Affected(ctx context.Context, f *Facts, clusterRoleScopes []string) ([]AccountSelector, error) {
	var set accountSet
	visited := 0
	var overflow error
	add := func(s rbacv1.Subject, ns string) {
		if visited++; visited%4096 == 0 && overflow == nil {
			overflow = ctx.Err()
		}
		if visited > maxSubjectsJudged && overflow == nil {
			overflow = fmt.Errorf("the bindings it reaches name more than %d subjects; the guard judges at most that many per change", maxSubjectsJudged)
		}
		if sel, ok := selectorOf(s, ns); ok && overflow == nil {
			set.add(sel)
		}
	}
	err := c.affected(f, clusterRoleScopes, add)
	if err == nil {
		err = overflow
	}
	if err != nil {
		return nil, err
	}
	return set.minimal(), nil
}

// maxSubjectsJudged bounds the subjects one RBAC review reads its accounts from (a RoleBinding's
// object is at most about 1.5 MB in etcd, some 30,000 subjects; many bindings of one role are many
// times that).
const maxSubjectsJudged = 1 << 18

// accountSet collects AccountSelectors once each, in the order first seen.
type accountSet struct {
	seen map[AccountSelector]struct{}
	out  []AccountSelector
}

func (s *accountSet) add(sel AccountSelector) {
	if s.seen == nil {
		s.seen = map[AccountSelector]struct{}{}
	}
	if _, ok := s.seen[sel]; !ok {
		s.seen[sel] = struct{}{}
		s.out = append(s.out, sel)
	}
}

// minimal drops the selectors another selects a superset of (an account of a namespace whose
// every account is selected; everything, once every account is): every use of the list is a
// union (selects, UsersOf), so it selects the same accounts with fewer lookups.
func (s *accountSet) minimal() []AccountSelector {
	if _, all := s.seen[AccountSelector{}]; all {
		return []AccountSelector{{}}
	}
	return slices.DeleteFunc(slices.Clone(s.out), func(sel AccountSelector) bool {
		_, group := s.seen[AccountSelector{Namespace: sel.Namespace}]
		return sel.Name != "" && group
	})
}

// affected is Affected's walk: add is called for each subject that may lose access.
func (c *RBACChange) affected(f *Facts, clusterRoleScopes []string, add func(rbacv1.Subject, string)) error {
	switch {
	case c.Kind == gvkServiceAccount.Kind:
		if c.Deleted || (c.NewAutomount != nil && !*c.NewAutomount) {
			add(rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: c.Name}, c.Namespace)
		}
	case c.isBinding():
		// The subjects it removes lose what its role grants on leases; the subjects it adds gain
		// it, which disarms only when it is every verb.
		for _, side := range []struct {
			subjects []rbacv1.Subject
			binding  *Binding
			matters  func([]rbacv1.PolicyRule) bool
		}{{c.removedSubjects(), c.OldBinding, rulesMayGrantLeases}, {c.addedSubjects(), c.NewBinding, rulesGrantLeaseWildcard}} {
			if len(side.subjects) == 0 {
				continue
			}
			k, ok := side.binding.roleOf()
			if !ok {
				continue
			}
			role, ok := f.Roles[k]
			switch {
			case !ok:
				return fmt.Errorf("%s: %w", k, errNotLookedUp)
			case role.NotFound:
				continue
			case role.Err != nil:
				return role.Err
			}
			rules := role.Rules
			if k.Namespace == "" {
				// A bound ClusterRole is judged by what the aggregation controller will write
				// to it as well: red team R of stop 34 created a role aggregating a piece of
				// every verb on leases and bound it to a writer before the controller had
				// written it, the binding was judged by the empty rules, and the refused
				// rewrite landed at the first missed answer.
				if err := c.aggregate(f); err != nil {
					return fmt.Errorf("what the aggregation controller will make of %s: %w", k, err)
				}
				if rw, ok := c.rewrites[k]; ok {
					rules = append(slices.Clone(rules), rw.after...)
				}
			}
			if !side.matters(rules) {
				continue
			}
			for _, s := range side.subjects {
				add(s, c.Namespace)
			}
		}
	case c.isRole():
		if !c.roleMayMatter() {
			return nil
		}
		if err := c.aggregate(f); err != nil {
			return fmt.Errorf("what the aggregation controller will make of it: %w", err)
		}
		scopes := []string{c.Namespace}
		if c.Namespace == "" {
			scopes = append([]string{""}, clusterRoleScopes...)
		}
		for _, scope := range scopes {
			bs, ok := f.Bindings[scope]
			switch {
			case !ok:
				return fmt.Errorf("the bindings of %q: %w", scope, errNotLookedUp)
			case bs.Err != nil:
				return bs.Err
			}
			for _, b := range bs.Items {
				if k, ok := b.roleOf(); ok && c.changes(k) {
					for _, s := range b.Subjects {
						add(s, b.Namespace)
					}
				}
			}
		}
	}
	return nil
}
