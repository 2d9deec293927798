package webhook

import "slices"

// EnvFencing is the variable that arms the fence. The guard's whole business is its value.
const EnvFencing = "NOETL_EHDB_FENCING"

// The guard's per-review limits (README "limits"). Above them an armed object is refused with a
// message that says which limit it exceeds, never judged on a guess.
const (
	// DefaultMaxShards is the most shards one object may make the guard judge: a StatefulSet
	// whose pods take their shard from their ordinal has one shard per replica, and each costs a
	// Lease lookup and up to two access reviews.
	DefaultMaxShards = 128
	// DefaultMaxConfigMaps is the most distinct ConfigMaps one object's containers may read
	// their environment from (each is a GET while the API server waits).
	DefaultMaxConfigMaps = 32
)

// Policy holds the guard's switches (the chart exposes them as values).
type Policy struct {
	// RequireLiveLease turns on the order check: when a workload becomes armed, every shard it
	// will run must already have a live, held Lease with epoch >= 1.
	RequireLiveLease bool
	// MaxShards and MaxConfigMaps bound one review's work; 0 means the defaults.
	MaxShards     int
	MaxConfigMaps int
	// LeaseNamespaces are the namespaces whose Leases the webhook can read: its guarded
	// namespaces (its RBAC and watches cover no others). Empty means every namespace.
	LeaseNamespaces []string
}

// leasesReadable reports whether the webhook can read the Leases of namespace ns.
func (p Policy) leasesReadable(ns string) bool {
	return len(p.LeaseNamespaces) == 0 || slices.Contains(p.LeaseNamespaces, ns)
}

func (p Policy) maxShards() int {
	if p.MaxShards > 0 {
		return p.MaxShards
	}
	return DefaultMaxShards
}

func (p Policy) maxConfigMaps() int {
	if p.MaxConfigMaps > 0 {
		return p.MaxConfigMaps
	}
	return DefaultMaxConfigMaps
}
