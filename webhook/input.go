package webhook

import (
	admissionv1 "k8s.io/api/admission/v1"
)

// Input is what is being admitted.
type Input struct {
	Operation admissionv1.Operation
	Object    *Workload
	// Old is the object before an UPDATE; nil on CREATE (or when the request carried none,
	// which makes an UPDATE count as a transition to armed: the stricter reading).
	Old *Workload
	// Subresource is the subresource under review: "" for the object itself, "ephemeralcontainers"
	// for containers added to a running Pod (judged like a workload: fail closed, order check).
	Subresource string
	// ConfigMapChange, when set, says the review is of a ConfigMap that Object reads: Object is
	// judged with the ConfigMap's new content, Old (the same workload) with its old content.
	ConfigMapChange *ConfigMapChange
	// RBACChange, when set, says the review is of an RBAC object or ServiceAccount that Object's
	// pods may depend on: Object is judged with the facts as the change leaves them (rbacchange.go).
	RBACChange *RBACChange
	// Budget bounds the work of resolving environments; Evaluate sets one per review. nil gives
	// every call of Needs or Decide a fresh DefaultBudget.
	Budget *Budget
}

// ConfigMapChange is a ConfigMap being created or updated, as the workloads that read it will see it.
type ConfigMapChange struct {
	Name     string
	Old, New ConfigMapFact
}

func (in Input) budget() *Budget {
	if in.Budget != nil {
		return in.Budget
	}
	return NewBudget(0)
}

// asRunsNow reports whether the review bites the processes running now, not the next start: an
// RBAC or ServiceAccount change (started.go). A Pod in graceful deletion still runs then.
func (in Input) asRunsNow() bool { return in.RBACChange != nil }

// unjudgedInDeletion reports whether the object's deletion spares it the review: anything in
// deletion, except a Pod under a review that bites running processes (asRunsNow).
func (in Input) unjudgedInDeletion() bool {
	w := in.Object
	return w.Deleting && !(in.asRunsNow() && w.Kind == gvkPod.Kind)
}

// configMapsFor overlays the change (new or old side) on a ConfigMapSource.
func (in Input) configMapsFor(cms ConfigMapSource, old bool) ConfigMapSource {
	c := in.ConfigMapChange
	if c == nil {
		return cms
	}
	return func(name string) (ConfigMapFact, bool) {
		if name == c.Name {
			if old {
				return c.Old, true
			}
			return c.New, true
		}
		return cms(name)
	}
}
