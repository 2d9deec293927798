package webhook

import (
	admissionv1 "k8s.io/api/admission/v1"
)

// orderCheckApplies reports whether the order check may run for in (before knowing whether the
// old object was armed). It never runs for a Pod or an object whose controller is a workload the
// guard judged (Workload.Exempt): those are created by a controller acting on an owner that was
// checked when it was armed, and a crashed writer's replacement must not wait for a Lease that
// only the replacement itself can renew.
func orderCheckApplies(in Input, p Policy) bool {
	if !p.RequireLiveLease || in.Object == nil || in.Object.Kind == gvkPod.Kind || in.Object.Exempt {
		return false
	}
	return in.Operation == admissionv1.Create || in.Operation == admissionv1.Update
}

// oldArmed reports whether the object was armed before this UPDATE. A missing old object counts
// as unarmed, so the order check runs; so does an old object armed only because its fencing value
// could not be known: nobody can say it was enforcing.
func oldArmed(in Input, cms ConfigMapSource, budget *Budget) bool {
	if in.Operation != admissionv1.Update || in.Old == nil {
		return false
	}
	for _, v := range view(in.Old, cms, budget) {
		if v.armed && !v.unknowable {
			return true
		}
	}
	return false
}
