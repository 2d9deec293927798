package webhook

import (
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
)

// This file answers "what will the pod that runs look like?" where the kubelet or a controller
// decides it rather than the object under review: the hostname, and the fields a controller sets
// on each pod over its template. Everything the guard says about shards reads these.

// maxHostnameLen is the kubelet's cap on a pod's hostname (truncatePodHostnameIfNeeded).
const maxHostnameLen = 63

// podHostname is $HOSTNAME in a pod of w as the kubelet sets it, for the StatefulSet ordinal given
// (-1 for other kinds). unknown says why it cannot be told at admission ("" when host is it).
//
// The kubelet (pkg/kubelet: generatePodSandboxConfig, GeneratePodHostNameAndDomain) gives a pod
// spec.hostname, else its name, cut to 63 characters with trailing '-' and '.' trimmed, and the FQDN
// with the node's cluster domain when setHostnameAsFQDN is true and the pod has a subdomain; a pod
// on the host network gets no hostname of its own: it has the node's. The StatefulSet controller
// sets spec.hostname to the pod's name <set>-<ordinal> and spec.subdomain to serviceName over the
// template's; the Job controller sets an Indexed Job's spec.hostname to <job>-<index>; the other
// controllers copy the template's spec.hostname and name the pod themselves.
func podHostname(w *Workload, ordinal int64) (host, unknown string) {
	s := w.Pod.Spec
	if s == nil {
		return "", "the pod has no spec"
	}
	if s.HostNetwork {
		return "", "the pod uses the host network (spec.hostNetwork), so its hostname is the node's, which no object in the API decides before it is scheduled"
	}
	if s.HostnameOverride != nil && *s.HostnameOverride != "" {
		// Cut like any hostname: the API server accepts 64 characters here, the kubelet keeps 63
		// (the fourth red team's "a"×61+"-10" ran as "…-1", another shard).
		return cutHostname(*s.HostnameOverride), ""
	}
	subdomain := s.Subdomain
	switch {
	case w.Kind == gvkStatefulSet.Kind:
		host, subdomain = w.Name+"-"+strconv.FormatInt(ordinal, 10), w.ServiceName
	case w.Kind == gvkPod.Kind:
		host = s.Hostname
		if host == "" {
			host = w.Pod.Meta.Name
		}
		if host == "" {
			return "", "the pod's name is not known yet"
		}
	case w.Indexed:
		return "", "the Job controller sets each pod's hostname to <job name>-<completion index>"
	case s.Hostname != "":
		host = s.Hostname
	default:
		return "", "the pods of a " + w.Kind + " are named by its controller, so their hostname cannot be told"
	}
	host = cutHostname(host)
	if s.SetHostnameAsFQDN != nil && *s.SetHostnameAsFQDN && subdomain != "" {
		return "", "setHostnameAsFQDN makes the hostname end in the node's cluster domain, which the API does not hold"
	}
	return host, ""
}

// cutHostname is host as the kubelet sets it (truncatePodHostnameIfNeeded): at most 63
// characters, then without a trailing '-' or '.'.
func cutHostname(host string) string {
	if len(host) > maxHostnameLen {
		host = strings.TrimRight(host[:maxHostnameLen], "-.")
	}
	return host
}

// controllerSetKeys are the pod labels and annotations a controller of the given kind writes on
// every pod it creates, over whatever the template says: a template value for them is never what
// the pod carries. (The StatefulSet's pod-name and pod-index labels are computed per ordinal
// instead: fieldRefValue.) Read from the controllers' source: pkg/controller/statefulset
// (updateIdentity, controller-revision-hash), pkg/controller/deployment (pod-template-hash),
// pkg/controller/daemon (controller-revision-hash, pod-template-generation) and pkg/controller/job
// (the completion index annotation and label of Indexed Jobs, and the failure counts of each index
// that addIndexFailureCountAnnotation writes on every retried pod).
func controllerSetKeys(w *Workload) map[string]bool {
	keys := map[string]bool{}
	label := func(k string) { keys["metadata.labels['"+k+"']"] = true }
	annotation := func(k string) { keys["metadata.annotations['"+k+"']"] = true }
	switch w.Kind {
	case gvkStatefulSet.Kind:
		label("controller-revision-hash")
	case gvkDeployment.Kind:
		label("pod-template-hash")
	case gvkDaemonSet.Kind:
		label("controller-revision-hash")
		label("pod-template-generation")
	}
	if w.Indexed {
		label(labelJobCompletionIndex)
		annotation(labelJobCompletionIndex)
		// With backoffLimitPerIndex, each retry of an index carries its count of failures.
		annotation(batchv1.JobIndexFailureCountAnnotation)
		annotation(batchv1.JobIndexIgnoredFailureCountAnnotation)
	}
	return keys
}

// labelJobCompletionIndex is both the annotation and the label the Job controller sets on each
// pod of an Indexed Job (batch.kubernetes.io/job-completion-index).
const labelJobCompletionIndex = "batch.kubernetes.io/job-completion-index"

// envJobCompletionIndex is the variable the Job controller adds to every container of an Indexed
// Job's pods that does not define it, as a fieldRef to the completion index.
const envJobCompletionIndex = "JOB_COMPLETION_INDEX"
