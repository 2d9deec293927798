package webhook

import (
	"fmt"
	"slices"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// This file answers: does a write of a namespace's kube-root-ca.crt change the CA its writers
// verify the API server with? Every writer mounts ca.crt from that ConfigMap (credentials.go
// requires it), and kube-controller-manager's root-ca-cert-publisher keeps it equal to the
// cluster's CA: it recreates it when deleted and rewrites its data when edited
// (pkg/controller/certificates/rootcacertpublisher). Anyone else's content is wrong by
// construction, and one made immutable the publisher can never correct: the eleventh red team
// wrote a garbage ca.crt, immutable, and the StatefulSet controller then made an armed writer
// that could verify no API server. The guard judges the CA by who writes it, not by reading
// certificates: the publisher is the only writer that knows the cluster's CA.

// DefaultRootCAPublishers are the identities the publisher writes as in kubeadm and kind: its
// own ServiceAccount (the controller manager's --use-service-account-credentials), or the
// controller manager's. A cluster whose controller manager authenticates otherwise names its
// identity in Handler.RootCAPublishers, or its CA rotation is refused.
func DefaultRootCAPublishers() []string {
	return []string{"system:serviceaccount:kube-system:root-ca-cert-publisher", "system:kube-controller-manager"}
}

// rootCATampering says what a write of kube-root-ca.crt does to the CA ("" for nothing: a metadata
// edit, a delete, which the publisher answers with the cluster's CA at once, or a write of the
// content by one of publishers). oldCM is nil on CREATE.
func rootCATampering(op admissionv1.Operation, user string, publishers []string, oldCM, newCM *corev1.ConfigMap) string {
	if op == admissionv1.Delete || newCM == nil {
		return ""
	}
	// Not even in the publisher's name: it never sets immutable (it creates the ConfigMap with
	// ca.crt alone and updates a copy of what it read), and once set nothing can correct or
	// rotate the CA, nor can a delete undo it where kubelets keep the copy (keptByKubelets). The
	// red team Q of stop 34 did it impersonating the publisher.
	if ptr.Deref(newCM.Immutable, false) && (oldCM == nil || !ptr.Deref(oldCM.Immutable, false)) {
		return "makes it immutable, which its publisher never does: the root-ca-cert-publisher could never correct or rotate the CA in it"
	}
	if slices.Contains(publishers, user) {
		return ""
	}
	if oldCM == nil {
		return "creates it, with a ca.crt the root-ca-cert-publisher did not write (it publishes the cluster's CA when the ConfigMap is missing)"
	}
	oldCA, hadCA := oldCM.Data["ca.crt"]
	newCA, hasCA := newCM.Data["ca.crt"]
	switch {
	case hadCA != hasCA || oldCA != newCA:
		return "changes its ca.crt, which only the root-ca-cert-publisher writes (with the cluster's CA)"
	}
	return ""
}

// rootCARefusal is the refusal of such a write while objects that may be armed run in the
// namespace ("" when none does: nothing there verifies the API server with it as a writer).
func (h *Handler) rootCARefusal(req Request, what string) string {
	var armed []string
	if h.Accounts != nil {
		users, err := h.armableUsers(AccountSelector{Namespace: req.Namespace})
		if err != nil {
			return fmt.Sprintf("ehdb-election guard: could not verify this write of ConfigMap %s/%s, which %s: could not tell which workloads run in the namespace: %v", req.Namespace, rootCAConfigMap, what, err)
		}
		for _, w := range users {
			armed = append(armed, w.Kind+" "+w.Namespace+"/"+w.Name)
		}
		if len(armed) == 0 {
			return ""
		}
	}
	slices.Sort(armed)
	if len(armed) > maxListed {
		armed = append(armed[:maxListed], fmt.Sprintf("and %d more", len(armed)-maxListed))
	}
	return fmt.Sprintf("ehdb-election guard: refusing this write of ConfigMap %s/%s: it %s. Every writer verifies the API server with that CA, and these may be armed: %v. Delete the ConfigMap instead to have the publisher write the cluster's CA again.", req.Namespace, rootCAConfigMap, what, armed)
}
