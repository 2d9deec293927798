package webhook

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
)

// APIResolver answers Queries from the API server with plain GETs and SubjectAccessReviews, all
// lookups of one Query concurrently.
//
// By default it caches nothing across requests. Every fact it serves can change between two
// admissions in a way that matters at once: an operator who has just created the RoleBinding or
// the ServiceAccount the last denial asked for retries and must be admitted, and a Lease that
// was live a few seconds ago may have expired. Within one admission each fact is fetched once
// (a Query has no duplicates). CacheAllowedFor keeps positive answers (a ServiceAccount that
// exists, an access review that allowed) for a short time, never a refusal, a Lease or a
// ConfigMap; its comment says why that much is safe. The load stays small either way: the
// webhook configuration's matchConditions send only objects that mention the fencing variable
// or use envFrom, and an unarmed object costs no lookup at all.
//
// It needs exactly: get on configmaps, serviceaccounts and coordination.k8s.io leases, and
// create on subjectaccessreviews (and list and watch on leases for ReadLeasesFrom's informer).
type APIResolver struct {
	client APIClient
	// limit caps the lookups in flight for one Query.
	limit int
	// cache keeps positive answers when CacheAllowedFor is given; nil otherwise.
	cache *positiveCache
	// leases answers Lease lookups from a watch when ReadLeasesFrom is given; nil otherwise.
	leases coordinationlisters.LeaseLister
	// cms reads ConfigMaps within the process's byte budget.
	cms *configMapReader
	// renewals judges Lease liveness on this process's clock when JudgeRenewalsBy is given.
	renewals RenewalClock
	// lists admits one list of ClusterRoles at a time: each is read whole and decoded.
	lists *semaphore.Weighted
	// bindingLists shares the lists of bindings among concurrent reviews (bindinglists.go).
	bindingLists bindingLists
}

// NewAPIResolver returns a resolver over c that keeps at most maxInFlight lookups of one Query
// in flight (a StatefulSet with many replicas asks for one Lease per ordinal); 0 means 16.
func NewAPIResolver(c APIClient, maxInFlight int, opts ...ResolverOption) *APIResolver {
	if maxInFlight <= 0 {
		maxInFlight = 16
	}
	r := &APIResolver{client: c, limit: maxInFlight, cms: newConfigMapReader(c), lists: semaphore.NewWeighted(1)}
	for _, o := range opts {
		o(r)
	}
	return r
}

// ServiceAccountGroups are the groups a ServiceAccount token authenticates with; access is
// checked for exactly that identity, so any binding that works for the real token passes (to
// the SA, to system:serviceaccounts:<ns>, to system:serviceaccounts, to system:authenticated).
func ServiceAccountGroups(namespace string) []string {
	return []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
}

// Resolve implements Resolver.
func (r *APIResolver) Resolve(ctx context.Context, q Query) *Facts {
	out := NewFacts(time.Time{}) // Now is the caller's: it judges the answers
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, r.limit)
	// run takes a slot BEFORE it starts a goroutine, so one Query never has more than limit
	// goroutines, however many lookups it lists. Once ctx is done no lookup starts: skipped
	// records the context's error in place of the answer.
	run := func(f func(), skipped func(error)) {
		if ctx.Err() != nil {
			skipped(ctx.Err())
			return
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			skipped(ctx.Err())
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f()
		}()
	}

	for _, name := range q.ConfigMaps {
		run(func() {
			fact := r.cms.get(ctx, q.Namespace, name) // only the keys the review needs (configmapread.go)
			mu.Lock()
			out.ConfigMaps[name] = fact
			mu.Unlock()
		}, func(err error) {
			mu.Lock()
			out.ConfigMaps[name] = ConfigMapFact{Err: fmt.Errorf("getting ConfigMap %s/%s: %w", q.Namespace, name, err)}
			mu.Unlock()
		})
	}
	// The generation the lookups start in: an answer is cached under it, so a change seen while
	// the lookup ran makes it stale at once (ForgetOnChange).
	gen, cacheable := r.cache.generation()
	for _, name := range q.ServiceAccounts {
		key := types.NamespacedName{Namespace: q.Namespace, Name: name}
		if fact, ok := r.cache.serviceAccount(key); ok {
			mu.Lock()
			out.ServiceAccounts[name] = fact
			mu.Unlock()
			continue
		}
		run(func() {
			fact := ServiceAccountFact{}
			sa, err := r.client.GetServiceAccount(ctx, q.Namespace, name)
			switch {
			case apierrors.IsNotFound(err):
				fact.NotFound = true
			case err != nil:
				fact.Err = fmt.Errorf("getting ServiceAccount %s/%s: %w", q.Namespace, name, err)
			default:
				fact.Annotations = sa.Annotations
				fact.AutomountToken = sa.AutomountServiceAccountToken
			}
			r.cache.keepServiceAccount(key, fact, gen, cacheable)
			mu.Lock()
			out.ServiceAccounts[name] = fact
			mu.Unlock()
		}, func(err error) {
			mu.Lock()
			out.ServiceAccounts[name] = ServiceAccountFact{Err: fmt.Errorf("getting ServiceAccount %s: %w", key, err)}
			mu.Unlock()
		})
	}
	for _, c := range q.Access {
		if fact, ok := r.cache.accessFact(c); ok {
			mu.Lock()
			out.Access[c] = fact
			mu.Unlock()
			continue
		}
		run(func() {
			fact := r.access(ctx, c)
			r.cache.keepAccess(c, fact, gen, cacheable)
			mu.Lock()
			out.Access[c] = fact
			mu.Unlock()
		}, func(err error) {
			mu.Lock()
			out.Access[c] = AccessFact{Err: fmt.Errorf("SubjectAccessReview not sent: %w", err)}
			mu.Unlock()
		})
	}
	for _, key := range q.Leases {
		if r.leases != nil {
			if l, err := r.leases.Leases(key.Namespace).Get(key.Name); err == nil {
				mu.Lock()
				out.Leases[key] = LeaseFact{Spec: *l.Spec.DeepCopy()}
				mu.Unlock()
				continue
			}
		}
		run(func() {
			fact := LeaseFact{}
			l, err := r.client.GetLease(ctx, key.Namespace, key.Name)
			switch {
			case apierrors.IsNotFound(err):
				fact.NotFound = true
			case err != nil:
				fact.Err = fmt.Errorf("getting Lease %s: %w", key, err)
			default:
				fact.Spec = l.Spec
			}
			mu.Lock()
			out.Leases[key] = fact
			mu.Unlock()
		}, func(err error) {
			mu.Lock()
			out.Leases[key] = LeaseFact{Err: fmt.Errorf("getting Lease %s: %w", key, err)}
			mu.Unlock()
		})
	}
	for _, scope := range q.Bindings {
		run(func() {
			fact := r.bindings(ctx, scope)
			mu.Lock()
			out.Bindings[scope] = fact
			mu.Unlock()
		}, func(err error) {
			mu.Lock()
			out.Bindings[scope] = BindingsFact{Err: fmt.Errorf("listing bindings (%q): %w", scope, err)}
			mu.Unlock()
		})
	}
	if len(q.LeaseGuards) > 0 {
		run(func() {
			facts := r.leaseGuards(ctx, q.LeaseGuards)
			mu.Lock()
			maps.Copy(out.LeaseGuards, facts)
			mu.Unlock()
		}, func(err error) {
			mu.Lock()
			for _, ns := range q.LeaseGuards {
				out.LeaseGuards[ns] = LeaseGuardFact{Err: fmt.Errorf("listing lease guards: %w", err)}
			}
			mu.Unlock()
		})
	}
	if q.ClusterRoles {
		run(func() {
			fact := r.clusterRoles(ctx)
			mu.Lock()
			out.ClusterRoles = &fact
			mu.Unlock()
		}, func(err error) {
			mu.Lock()
			out.ClusterRoles = &ClusterRolesFact{Err: fmt.Errorf("listing ClusterRoles: %w", err)}
			mu.Unlock()
		})
	}
	for _, key := range q.Roles {
		run(func() {
			fact := r.role(ctx, key)
			mu.Lock()
			out.Roles[key] = fact
			mu.Unlock()
		}, func(err error) {
			mu.Lock()
			out.Roles[key] = RoleFact{Err: fmt.Errorf("getting %s: %w", key, err)}
			mu.Unlock()
		})
	}
	wg.Wait()
	if r.renewals != nil {
		for key, fact := range out.Leases {
			if fact.Err == nil && !fact.NotFound {
				fact.Observed = true
				fact.Renewed, _ = r.renewals.LastRenewal(key.Namespace, key.Name)
				out.Leases[key] = fact
			}
		}
	}
	return out
}

func (r *APIResolver) access(ctx context.Context, c AccessCheck) AccessFact {
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   serviceAccountUser(c.ServiceAccount),
		Groups: ServiceAccountGroups(c.ServiceAccount.Namespace),
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: c.Namespace,
			Verb:      c.Verb,
			Group:     "coordination.k8s.io",
			Resource:  "leases",
			Name:      c.Name,
		},
	}}
	res, err := r.client.CreateSubjectAccessReview(ctx, sar)
	if err != nil {
		what := "leases"
		if c.Name != "" {
			what = "lease " + c.Name
		}
		return AccessFact{Err: fmt.Errorf("SubjectAccessReview for %s %s %s in %s: %w", serviceAccountUser(c.ServiceAccount), c.Verb, what, c.Namespace, err)}
	}
	return AccessFact{Allowed: res.Status.Allowed && !res.Status.Denied, Reason: res.Status.Reason, EvaluationError: res.Status.EvaluationError}
}

// bindings lists one scope's bindings fresh from the API server (never from a cache: two removals
// in a row must each see the other's result): "" the ClusterRoleBindings, "*" the RoleBindings of
// every namespace, else one namespace's RoleBindings.
func (r *APIResolver) bindings(ctx context.Context, scope string) BindingsFact {
	return r.bindingLists.get(ctx, scope, func(ctx context.Context) BindingsFact { return r.listBindings(ctx, scope) })
}

// listBindings is one list of the bindings of scope.
func (r *APIResolver) listBindings(ctx context.Context, scope string) BindingsFact {
	var out BindingsFact
	if scope == "" {
		l, err := r.client.ListClusterRoleBindings(ctx)
		if err != nil {
			return BindingsFact{Err: fmt.Errorf("listing ClusterRoleBindings: %w", err)}
		}
		for i := range l.Items {
			out.Items = append(out.Items, BindingOfClusterRoleBinding(&l.Items[i]))
		}
		return out
	}
	ns := scope
	if scope == "*" {
		ns = metav1.NamespaceAll
	}
	l, err := r.client.ListRoleBindings(ctx, ns)
	if err != nil {
		return BindingsFact{Err: fmt.Errorf("listing RoleBindings in %q: %w", scope, err)}
	}
	for i := range l.Items {
		out.Items = append(out.Items, BindingOfRoleBinding(&l.Items[i]))
	}
	return out
}

// leaseGuards reads the chart's lease guards (their policies and bindings, by label) fresh from
// the API server, and finds each namespace's.
func (r *APIResolver) leaseGuards(ctx context.Context, namespaces []string) map[string]LeaseGuardFact {
	out := map[string]LeaseGuardFact{}
	policies, err := r.client.ListValidatingAdmissionPolicies(ctx, LeaseGuardLabel)
	var bindings *admissionregistrationv1.ValidatingAdmissionPolicyBindingList
	if err == nil {
		bindings, err = r.client.ListValidatingAdmissionPolicyBindings(ctx, LeaseGuardLabel)
	}
	older := false
	if apierrors.IsForbidden(err) {
		older, err = olderChart(err, func() error { _, err := r.client.ListClusterRoles(ctx); return err })
	}
	for _, ns := range namespaces {
		switch {
		case older:
			out[ns] = LeaseGuardFact{Unread: "this webhook may list neither validatingadmissionpolicies nor ClusterRoles (its role is an older chart's?)"}
			continue
		case err != nil:
			out[ns] = LeaseGuardFact{Err: fmt.Errorf("listing lease guards: %w", err)}
			continue
		}
		out[ns] = LeaseGuardOf(ns, policies.Items, bindings.Items)
	}
	return out
}

// olderChart tells, once one of this version's cluster-wide lists was refused (denied), whether
// the webhook's ClusterRole is an older chart's: those granted neither the lease guards' list nor
// the ClusterRoles', so the other (other) is refused too. One refused alone is a role narrowed by
// hand (the twenty-third red team dropped only the lease guards' list, and the check it feeds
// was skipped as for a rollback): what it hides is then an error, never a warning. It returns
// the error to keep: denied when older or narrowed, the other's when that failed otherwise.
func olderChart(denied error, other func() error) (bool, error) {
	err := other()
	switch {
	case apierrors.IsForbidden(err):
		return true, denied
	case err != nil:
		return false, fmt.Errorf("%w (and could not tell a narrowed role from an older chart's: %w)", denied, err)
	}
	return false, fmt.Errorf("%w: the webhook's ClusterRole grants this version's other cluster-wide reads, so it was narrowed, not rolled back", denied)
}

// clusterRoles lists every ClusterRole fresh from the API server, as the aggregation controller
// reads them.
func (r *APIResolver) clusterRoles(ctx context.Context) ClusterRolesFact {
	if err := r.lists.Acquire(ctx, 1); err != nil {
		return ClusterRolesFact{Err: fmt.Errorf("waiting to list ClusterRoles: %w", err)}
	}
	defer r.lists.Release(1)
	l, err := r.client.ListClusterRoles(ctx)
	if apierrors.IsForbidden(err) {
		older, err := olderChart(err, func() error {
			_, err := r.client.ListValidatingAdmissionPolicies(ctx, LeaseGuardLabel)
			return err
		})
		if older {
			return ClusterRolesFact{Unread: "this webhook may list neither ClusterRoles nor validatingadmissionpolicies (its ClusterRole is an older chart's?)", Err: fmt.Errorf("listing ClusterRoles: %w", err)}
		}
		return ClusterRolesFact{Err: fmt.Errorf("listing ClusterRoles: %w", err)}
	}
	switch {
	case err != nil:
		return ClusterRolesFact{Err: fmt.Errorf("listing ClusterRoles: %w", err)}
	}
	out := ClusterRolesFact{Items: make([]ClusterRoleInfo, 0, len(l.Items))}
	for i := range l.Items {
		out.Items = append(out.Items, ClusterRoleInfoOf(&l.Items[i]))
	}
	return out
}

// role gets one Role or ClusterRole fresh from the API server.
func (r *APIResolver) role(ctx context.Context, k RoleKey) RoleFact {
	var rules []rbacv1.PolicyRule
	var err error
	if k.Namespace == "" {
		var cr *rbacv1.ClusterRole
		if cr, err = r.client.GetClusterRole(ctx, k.Name); err == nil {
			rules = cr.Rules
		}
	} else {
		var role *rbacv1.Role
		if role, err = r.client.GetRole(ctx, k.Namespace, k.Name); err == nil {
			rules = role.Rules
		}
	}
	switch {
	case apierrors.IsNotFound(err):
		return RoleFact{NotFound: true}
	case err != nil:
		return RoleFact{Err: fmt.Errorf("getting %s: %w", k, err)}
	}
	return RoleFact{Rules: rules}
}

func serviceAccountUser(sa types.NamespacedName) string {
	return "system:serviceaccount:" + sa.Namespace + ":" + sa.Name
}
