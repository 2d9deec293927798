package webhook

import (
	"k8s.io/apimachinery/pkg/types"
)

// A paused Deployment's controller scales the ReplicaSets it has but makes none for its template
// (the Deployment controller's sync of a paused Deployment), so the pods of its template start when
// it is resumed. The order check of a resume compares the template with what the Deployment runs
// then — its ReplicaSets that have pods — not with its template before (the fifth red team: armed
// while paused on a live Lease, resumed after the Lease died, admitted as armed → armed).

// OwnedWorkloads lists what an owner's controller made, as the webhook's watches hold it; the
// Handler asks its Workloads for it when they implement it.
type OwnedWorkloads interface {
	// OwnedBy returns the objects of resource ("replicasets") in namespace whose controller has
	// the UID owner; known is false when the kind is not watched there.
	OwnedBy(resource, namespace string, owner types.UID) (ws []*Workload, known bool)
}

// resumes reports whether in resumes a paused Deployment.
func resumes(in Input) bool {
	return in.Old != nil && in.Object != nil && in.Old.Paused && !in.Object.Paused
}

// noteRunning records on a paused Deployment's old object the ReplicaSets of it that run pods
// (replicas above 0), when the watches can tell; without them the resume is judged as arming every
// shard (orderScopeOf), the strict reading.
func (h *Handler) noteRunning(in Input) {
	o, ok := h.Workloads.(OwnedWorkloads)
	if !resumes(in) || !ok {
		return
	}
	ws, known := o.OwnedBy("replicasets", in.Old.Namespace, types.UID(in.Old.UID))
	if !known {
		return
	}
	in.Old.RunningKnown = true
	for _, w := range ws {
		if w.NoPods == "" && !w.Deleting {
			in.Old.Running = append(in.Old.Running, w)
		}
	}
}
