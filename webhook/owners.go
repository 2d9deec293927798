package webhook

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// exemptionHolds is the owner rule (issue 17, class 2): an object is exempt from the order check
// because of its controller only when the controller exists (found, with the UID the object names),
// the webhook could fetch it (an owner it cannot see is never trusted), and the controller's pod
// template — what the guard judged when the controller was armed — is semantically the object's,
// up to the labels the copy gains on the way (Exemption.AddedLabels). Anything else is judged itself.
func exemptionHolds(child, owner *Workload, found, known bool) (bool, string) {
	ref := child.ControllerRef
	switch {
	case ref == nil:
		return false, "no controller"
	case !known:
		return false, "the webhook could not fetch it, so it exempts nothing"
	case !found || owner == nil:
		return false, "not found with uid " + string(ref.UID)
	}
	ex, ok := exemptionOf(child.Kind, ref)
	if !ok {
		return false, "not a controller whose template the guard judges"
	}
	if !sameTemplate(child.Pod, owner.Pod, ex.AddedLabels) {
		return false, "its pod template is not this " + child.Kind + "'s, so it judged a different one"
	}
	return true, ""
}

// sameTemplate compares two pod templates as the API server holds them (both defaulted), ignoring
// the labels the copy may carry over the original's.
func sameTemplate(copied, original PodContext, added []string) bool {
	labels := maps.Clone(copied.Meta.Labels)
	for _, k := range added {
		if _, inOriginal := original.Meta.Labels[k]; !inOriginal {
			delete(labels, k)
		}
	}
	return equality.Semantic.DeepEqual(emptyNil(labels), emptyNil(original.Meta.Labels)) &&
		equality.Semantic.DeepEqual(emptyNil(copied.Meta.Annotations), emptyNil(original.Meta.Annotations)) &&
		equality.Semantic.DeepEqual(copied.Spec, original.Spec)
}

func emptyNil(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}

func envVarEqual(a, b corev1.EnvVar) bool { return equality.Semantic.DeepEqual(a, b) }

func envFromEqual(a, b corev1.EnvFromSource) bool { return equality.Semantic.DeepEqual(a, b) }
