package webhook

import (
	"context"
	"errors"
	"sort"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Facts are the answers the policy needs from the API server, gathered by a Resolver. Every
// lookup result carries its own error: an API error is a fact too ("could not verify ..."), never
// a reason to guess.
type Facts struct {
	// Now is the time Lease liveness is judged at.
	Now time.Time
	// ConfigMaps by name, in the admitted object's namespace.
	ConfigMaps map[string]ConfigMapFact
	// ServiceAccounts by name, in the admitted object's namespace.
	ServiceAccounts map[string]ServiceAccountFact
	// Access answers SubjectAccessReviews.
	Access map[AccessCheck]AccessFact
	// Leases by namespace/name.
	Leases map[types.NamespacedName]LeaseFact
	// Bindings by scope, for an RBAC change: "" the ClusterRoleBindings, a namespace its
	// RoleBindings, "*" the RoleBindings of every namespace.
	Bindings map[string]BindingsFact
	// Roles and ClusterRoles (RoleKey.Namespace ""), for an RBAC change.
	Roles map[RoleKey]RoleFact
	// LeaseGuards by namespace: the chart's lease guard there, if any (leaseguard.go).
	LeaseGuards map[string]LeaseGuardFact
	// ClusterRoles lists every ClusterRole, for a ClusterRole change (aggregation.go); nil when
	// not looked up.
	ClusterRoles *ClusterRolesFact
}

// ServiceAccountFact is what a lookup of one ServiceAccount returned.
type ServiceAccountFact struct {
	Annotations map[string]string
	// AutomountToken is the ServiceAccount's automountServiceAccountToken (nil: unset, true).
	AutomountToken *bool
	NotFound       bool
	Err            error
}

// AccessCheck asks whether a ServiceAccount, authenticated with its token (and so carrying the
// groups system:serviceaccounts, system:serviceaccounts:<ns> and system:authenticated), may do
// Verb on coordination.k8s.io leases in Namespace: on any Lease when Name is empty, else on the
// Lease of that name (what a Role restricted by resourceNames grants).
type AccessCheck struct {
	ServiceAccount types.NamespacedName
	Namespace      string
	Verb           string
	Name           string
}

// AccessFact is a SubjectAccessReview's answer.
type AccessFact struct {
	Allowed bool
	Reason  string // the authorizer's reason, for messages
	// EvaluationError is the authorizer's evaluation error: a refusal that carries one means
	// the authorizer could not decide, not that the access is missing.
	EvaluationError string
	Err             error
}

// LeaseFact is what a lookup of one Lease returned.
type LeaseFact struct {
	Spec     coordinationv1.LeaseSpec
	NotFound bool
	Err      error
	// Observed is true when the Lease's liveness is judged on this process's own clock (a
	// RenewalClock): Renewed is when the webhook's watch last saw its renewTime change, zero when
	// it has not seen it renew since it started watching.
	Observed bool
	Renewed  time.Time
}

// Query lists lookups the policy still needs. The zero Query needs nothing.
type Query struct {
	Namespace       string // of ConfigMaps and ServiceAccounts
	ConfigMaps      []string
	ServiceAccounts []string
	Access          []AccessCheck
	Leases          []types.NamespacedName
	// Bindings lists scopes whose bindings to list (Facts.Bindings); Roles, roles to get.
	Bindings []string
	Roles    []RoleKey
	// LeaseGuards lists namespaces whose lease guard to read (Facts.LeaseGuards).
	LeaseGuards []string
	// ClusterRoles asks for every ClusterRole (Facts.ClusterRoles).
	ClusterRoles bool
}

// Empty reports whether nothing is needed.
func (q Query) Empty() bool {
	return q.Size() == 0
}

// Size is the number of lookups in q.
func (q Query) Size() int {
	n := len(q.ConfigMaps) + len(q.ServiceAccounts) + len(q.Access) + len(q.Leases) + len(q.Bindings) + len(q.Roles) + len(q.LeaseGuards)
	if q.ClusterRoles {
		n++
	}
	return n
}

// Resolver gathers facts from the API server. It reports every failure inside the returned Facts
// (per lookup), so one failed lookup never hides the others; the returned Facts holds exactly the
// lookups of q. Implementations must be safe for concurrent use.
type Resolver interface {
	Resolve(ctx context.Context, q Query) *Facts
}

// errNotLookedUp marks a fact the policy needed but nobody fetched; Decide treats it like any
// other lookup failure (deny, "could not verify").
var errNotLookedUp = errors.New("not looked up")

// NewFacts returns empty Facts judged at now.
func NewFacts(now time.Time) *Facts {
	return &Facts{
		Now:             now,
		ConfigMaps:      map[string]ConfigMapFact{},
		ServiceAccounts: map[string]ServiceAccountFact{},
		Access:          map[AccessCheck]AccessFact{},
		Leases:          map[types.NamespacedName]LeaseFact{},
		Bindings:        map[string]BindingsFact{},
		Roles:           map[RoleKey]RoleFact{},
		LeaseGuards:     map[string]LeaseGuardFact{},
	}
}

// Merge adds o's answers to f (o's win on overlap).
func (f *Facts) Merge(o *Facts) {
	if o == nil {
		return
	}
	for k, v := range o.ConfigMaps {
		f.ConfigMaps[k] = v
	}
	for k, v := range o.ServiceAccounts {
		f.ServiceAccounts[k] = v
	}
	for k, v := range o.Access {
		f.Access[k] = v
	}
	for k, v := range o.Leases {
		f.Leases[k] = v
	}
	for k, v := range o.Bindings {
		f.Bindings[k] = v
	}
	for k, v := range o.Roles {
		f.Roles[k] = v
	}
	for k, v := range o.LeaseGuards {
		f.LeaseGuards[k] = v
	}
	if o.ClusterRoles != nil {
		f.ClusterRoles = o.ClusterRoles
	}
}

// configMaps returns the ConfigMapSource view of f: ok=false for names not looked up yet.
func (f *Facts) configMaps() ConfigMapSource {
	return func(name string) (ConfigMapFact, bool) {
		v, ok := f.ConfigMaps[name]
		return v, ok
	}
}

// configMapsFinal is the view Decide uses: a ConfigMap nobody looked up counts as unreadable.
func (f *Facts) configMapsFinal() ConfigMapSource {
	return func(name string) (ConfigMapFact, bool) {
		if v, ok := f.ConfigMaps[name]; ok {
			return v, true
		}
		return ConfigMapFact{Err: errNotLookedUp}, true
	}
}

// queryBuilder collects lookups not yet answered by facts, without duplicates.
type queryBuilder struct {
	facts *Facts
	q     Query
	seen  map[any]bool
}

func newQueryBuilder(f *Facts, ns string) *queryBuilder {
	return &queryBuilder{facts: f, q: Query{Namespace: ns}, seen: map[any]bool{}}
}

type cmKey string
type saKey string

func (b *queryBuilder) configMap(name string) {
	if _, ok := b.facts.ConfigMaps[name]; ok || b.seen[cmKey(name)] {
		return
	}
	b.seen[cmKey(name)] = true
	b.q.ConfigMaps = append(b.q.ConfigMaps, name)
}

func (b *queryBuilder) serviceAccount(name string) {
	if _, ok := b.facts.ServiceAccounts[name]; ok || b.seen[saKey(name)] {
		return
	}
	b.seen[saKey(name)] = true
	b.q.ServiceAccounts = append(b.q.ServiceAccounts, name)
}

func (b *queryBuilder) access(c AccessCheck) {
	if _, ok := b.facts.Access[c]; ok || b.seen[c] {
		return
	}
	b.seen[c] = true
	b.q.Access = append(b.q.Access, c)
}

func (b *queryBuilder) lease(n types.NamespacedName) {
	if _, ok := b.facts.Leases[n]; ok || b.seen[n] {
		return
	}
	b.seen[n] = true
	b.q.Leases = append(b.q.Leases, n)
}

type bindingsKey string

func (b *queryBuilder) bindings(scope string) {
	if _, ok := b.facts.Bindings[scope]; ok || b.seen[bindingsKey(scope)] {
		return
	}
	b.seen[bindingsKey(scope)] = true
	b.q.Bindings = append(b.q.Bindings, scope)
}

func (b *queryBuilder) role(k RoleKey) {
	if _, ok := b.facts.Roles[k]; ok || b.seen[k] {
		return
	}
	b.seen[k] = true
	b.q.Roles = append(b.q.Roles, k)
}

func (b *queryBuilder) clusterRoles() {
	if b.facts.ClusterRoles == nil {
		b.q.ClusterRoles = true
	}
}

type leaseGuardKey string

func (b *queryBuilder) leaseGuard(ns string) {
	if _, ok := b.facts.LeaseGuards[ns]; ok || b.seen[leaseGuardKey(ns)] {
		return
	}
	b.seen[leaseGuardKey(ns)] = true
	b.q.LeaseGuards = append(b.q.LeaseGuards, ns)
}

func (b *queryBuilder) query() Query {
	sort.Strings(b.q.ConfigMaps)
	sort.Strings(b.q.ServiceAccounts)
	return b.q
}
