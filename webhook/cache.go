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
}

type positiveCache struct {
	ttl    time.Duration
	clock  clock.PassiveClock
	mu     sync.Mutex
	sas    map[types.NamespacedName]cached[ServiceAccountFact]
	access map[AccessCheck]cached[AccessFact]
}

func lookup[K comparable, T any](c *positiveCache, m map[K]cached[T], k K) (T, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := m[k]
	if !ok || !c.clock.Now().Before(e.expires) {
		var zero T
		return zero, false
	}
	return e.fact, true
}

func store[K comparable, T any](c *positiveCache, m map[K]cached[T], k K, fact T) {
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
	m[k] = cached[T]{fact: fact, expires: now.Add(c.ttl)}
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

func (c *positiveCache) keepServiceAccount(k types.NamespacedName, f ServiceAccountFact) {
	if c != nil && f.Err == nil && !f.NotFound {
		store(c, c.sas, k, f)
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
func (c *positiveCache) keepAccess(k AccessCheck, f AccessFact) {
	if c != nil && f.Err == nil && (f.Allowed || k.ServiceAccount.Name == "default") {
		store(c, c.access, k, f)
	}
}
