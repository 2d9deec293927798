package webhook

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	"k8s.io/utils/clock"
)

// ResolverOption configures an APIResolver.
type ResolverOption func(*APIResolver)

// CacheAllowedFor keeps two kinds of answer for ttl: a ServiceAccount that exists (with its
// annotations), and a SubjectAccessReview that allowed (plus the default ServiceAccount's review,
// which only feeds a warning; see keepAccess). Nothing else is ever cached.
//
// Why these and only these: a refusal must clear the moment the operator fixes what it named, so
// no negative answer is kept; a Lease's liveness and a ConfigMap's value are the facts the order
// check and the arming decision rest on, so they are always read fresh. A positive answer kept
// for ttl can be stale only after someone removes a binding or a ServiceAccount, the same window
// the API server itself accepts when it caches a webhook authorizer's "allowed" (5 minutes by
// default). What that window can admit is bounded: a Pod naming a deleted ServiceAccount is
// refused by the API server's own ServiceAccount admission, and a writer without its binding gets
// 403 and never mints, so no Lease goes live for it. Without the cache every armed review pays
// four extra API round trips; with it, one (the Lease).
func CacheAllowedFor(ttl time.Duration, clk clock.PassiveClock) ResolverOption {
	return func(r *APIResolver) {
		if ttl > 0 {
			r.cache = &positiveCache{ttl: ttl, clock: clk, sas: map[types.NamespacedName]cached[ServiceAccountFact]{}, access: map[AccessCheck]cached[AccessFact]{}}
		}
	}
}

// Generation tells whether the RBAC and ServiceAccounts the cached answers rest on have changed:
// it counts the changes a watch of them has seen, and ok is false while that watch is not known
// to be working (then nothing is served from the cache).
type Generation interface {
	Generation() (gen uint64, ok bool)
}

// ForgetOnChange keeps a positive answer only while g's generation is the one it was looked up
// in: any Role, RoleBinding, ClusterRole, ClusterRoleBinding or ServiceAccount change seen by the
// watch drops every cached answer (issue 17: an answer cached as allowed admitted an armed writer
// after its binding or its ServiceAccount was gone). An answer looked up across a change is kept
// under the older generation, so it is never served.
func ForgetOnChange(g Generation) ResolverOption {
	return func(r *APIResolver) {
		if r.cache != nil {
			r.cache.gen = g
		}
	}
}

// Forget drops every cached answer (the handler calls it when it admits an RBAC change, so this
// replica does not wait for its watch).
func (r *APIResolver) Forget() {
	if c := r.cache; c != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		clear(c.sas)
		clear(c.access)
	}
}

// ReadLeasesFrom answers Lease lookups from a watch-fed cache (an informer's lister), falling back
// to a GET when the cache has no such Lease (it may have been created a moment ago).
//
// Why a watch is safe here when a TTL cache is not: the cache trails the API server by the watch's
// delivery delay, milliseconds, not a TTL. The order check asks whether a shard's election has
// begun minting (held, epoch >= 1, live now); a shard leaves that state only by a crash or a
// release, and liveness is judged against the current time, so a trailing renewTime only makes
// a Lease look older than it is. What the cache saves is the one API round trip every armed
// review would otherwise make while the API server waits on the answer.
func ReadLeasesFrom(l coordinationlisters.LeaseLister) ResolverOption {
	return func(r *APIResolver) { r.leases = l }
}

// RenewalClock tells when this process last saw a Lease renew: its watch saw the Lease's
// renewTime change, at that moment of the process's own (monotonic) clock.
type RenewalClock interface {
	LastRenewal(namespace, name string) (at time.Time, seen bool)
}

// JudgeRenewalsBy makes every Lease fact Observed by rc, so the order check judges liveness on the
// webhook's own clock (leaseProblems) rather than comparing renewTime, written by the holder's
// clock, with the webhook's wall clock.
func JudgeRenewalsBy(rc RenewalClock) ResolverOption {
	return func(r *APIResolver) { r.renewals = rc }
}

// maxCached bounds the cache; past it, expired entries go, and if that is not enough, all do.
const maxCached = 4096

type cached[T any] struct {
	fact    T
	expires time.Time
	gen     uint64
}

type positiveCache struct {
	ttl    time.Duration
	clock  clock.PassiveClock
	mu     sync.Mutex
	sas    map[types.NamespacedName]cached[ServiceAccountFact]
	access map[AccessCheck]cached[AccessFact]
	// gen, when set, invalidates entries on RBAC and ServiceAccount changes (ForgetOnChange).
	gen Generation
}

// generation is the generation a lookup starts in; ok is false when nothing may be cached.
func (c *positiveCache) generation() (uint64, bool) {
	if c == nil {
		return 0, false
	}
	if c.gen == nil {
		return 0, true
	}
	return c.gen.Generation()
}

func lookup[K comparable, T any](c *positiveCache, m map[K]cached[T], k K) (T, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := m[k]
	var zero T
	if !ok || !c.clock.Now().Before(e.expires) {
		return zero, false
	}
	if c.gen != nil {
		if g, ok := c.gen.Generation(); !ok || g != e.gen {
			return zero, false
		}
	}
	return e.fact, true
}

func store[K comparable, T any](c *positiveCache, m map[K]cached[T], k K, fact T, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	if len(c.sas)+len(c.access) >= maxCached {
		sweep(c.sas, now)
		sweep(c.access, now)
		if len(c.sas)+len(c.access) >= maxCached {
			clear(c.sas)
			clear(c.access)
		}
	}
	m[k] = cached[T]{fact: fact, expires: now.Add(c.ttl), gen: gen}
}

func sweep[K comparable, T any](m map[K]cached[T], now time.Time) {
	for k, e := range m {
		if !now.Before(e.expires) {
			delete(m, k)
		}
	}
}

func (c *positiveCache) serviceAccount(k types.NamespacedName) (ServiceAccountFact, bool) {
	if c == nil {
		return ServiceAccountFact{}, false
	}
	return lookup(c, c.sas, k)
}

func (c *positiveCache) keepServiceAccount(k types.NamespacedName, f ServiceAccountFact, gen uint64, ok bool) {
	if c != nil && ok && f.Err == nil && !f.NotFound {
		store(c, c.sas, k, f, gen)
	}
}

func (c *positiveCache) accessFact(k AccessCheck) (AccessFact, bool) {
	if c == nil {
		return AccessFact{}, false
	}
	return lookup(c, c.access, k)
}

// keepAccess keeps an allowed review. It also keeps a refused one for the namespace's default
// ServiceAccount: that review only decides a warning (the default account should not be able to
// write Leases), never whether an object is admitted, so a stale answer can only delay a warning —
// and it is asked on every armed review, where it is normally refused.
func (c *positiveCache) keepAccess(k AccessCheck, f AccessFact, gen uint64, ok bool) {
	if c != nil && ok && f.Err == nil && (f.Allowed || k.ServiceAccount.Name == "default") {
		store(c, c.access, k, f, gen)
	}
}
