package webhook

import (
	"fmt"
)

// Cloud-identity annotations: a ServiceAccount carrying one is a cloud principal, and reusing it
// for the writer hands the writer that principal's cloud permissions.
var cloudIdentityAnnotations = []string{
	"iam.gke.io/gcp-service-account",
	"eks.amazonaws.com/role-arn",
	"azure.workload.identity/client-id",
}

// checkToken requires each armed container to be able to authenticate as the ServiceAccount: the
// pod mounts the ServiceAccount token (automountServiceAccountToken, from the pod, else from the
// ServiceAccount, default true), or the container mounts a projected serviceAccountToken volume.
func (d *Decision) checkToken(w *Workload, where, saName string, sa *ServiceAccountFact, armed []*containerView) {
	spec := w.Pod.Spec
	if spec == nil {
		return
	}
	automount, from := true, ""
	switch {
	case spec.AutomountServiceAccountToken != nil:
		automount, from = *spec.AutomountServiceAccountToken, where+".automountServiceAccountToken"
	case sa != nil && sa.AutomountToken != nil:
		automount, from = *sa.AutomountToken, "ServiceAccount "+quote(saName)+" automountServiceAccountToken"
	case sa == nil && saName != "default":
		return // the ServiceAccount could not be read: already reported
	}
	if automount {
		return
	}
	projected := map[string]bool{}
	for _, v := range spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if src.ServiceAccountToken != nil {
				projected[v.Name] = true
			}
		}
	}
	for _, v := range armed {
		mounted := false
		for _, m := range v.c.VolumeMounts {
			if projected[m.Name] {
				mounted = true
				break
			}
		}
		if !mounted {
			d.unmet(ReasonNoToken,
				fmt.Sprintf("%s cannot authenticate to the API server: %s is false and it mounts no projected serviceAccountToken volume, so the election can neither read nor renew its Lease.", v.label(), from),
				fmt.Sprintf("remove automountServiceAccountToken: false (or set it to true in %s), or mount a projected volume with a serviceAccountToken source at /var/run/secrets/kubernetes.io/serviceaccount in %s.", where, v.label()))
		}
	}
}
