package webhook

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// exemptionHolds is the owner rule (issue 17, class 2): an object is exempt from the order check
// because of its controller only when the controller exists (found, with the UID the object names),
// the webhook could fetch it (an owner it cannot see is never trusted), and the controller's pod
// template — what the guard judged when the controller was armed — is semantically the object's,
// up to the labels the copy gains on the way (Exemption.AddedLabels). Anything else is judged itself.
func exemptionHolds(child, owner *Workload, found, known, creating bool) (bool, string) {
	ref := child.ControllerRef
	if why := ownerUnverified(ref, owner, found, known); why != "" {
		return false, why
	}
	ex, ok := exemptionOf(child.Kind, ref)
	if !ok {
		return false, "not a controller whose template the guard judges"
	}
	if !sameTemplate(child.Pod, owner.Pod, ex.AddedLabels) {
		return false, "its pod template is not this " + child.Kind + "'s, so it judged a different one"
	}
	if why := unjudgedOwner(child, owner, creating); why != "" {
		return false, why
	}
	if child.Indexed != owner.Indexed {
		// The completion mode names the pods (an Indexed Job's hostnames carry the index), so
		// the same template runs as other shards: the CronJob was judged for its Jobs' mode.
		return false, "its Jobs' completion mode is not this " + child.Kind + "'s, so it judged pods named otherwise"
	}
	return true, ""
}

// unjudgedOwner says why owner cannot account for child ("" when it can), though it has the
// child's template: the guard never judged that template for pods that run.
//   - An owner in deletion: its edits are admitted unjudged (Decide: refusing one would hold a
//     finalizer's removal), so one armed after its deletion began exempts nothing (the fifth red
//     team: a ReplicaSet made by hand under such a Deployment, and its Pods, on a shard with no
//     Lease). No built-in controller creates for an owner in deletion.
//   - An owner that runs no pods (a Deployment at replicas 0, a CronJob whose Jobs are suspended)
//     was judged for no shard, so a child that runs pods under it — a ReplicaSet scaled up by
//     hand, a Job resumed, a Pod made in its name — starts them on a judgement nobody made. Its
//     controller scales or resumes a child only after the owner itself was (and that was judged).
//   - A paused Deployment, for a child being created: its controller scales the ReplicaSets it
//     has and makes none while paused (the sixth red team made one by hand in its name, and its
//     Pods ran on a dead shard).
func unjudgedOwner(child, owner *Workload, creating bool) string {
	switch {
	case owner.Deleting:
		return "it is being deleted, and the guard does not judge an object in deletion"
	case owner.NoPods != "" && child.NoPods == "":
		return "it runs no pods (" + owner.NoPods + "), so it was judged for none"
	case creating && owner.Paused:
		return "it is paused, and its controller makes no " + child.Kind + " while paused"
	}
	return ""
}

// madeByOwner reports whether Pod p is as owner's controller makes its pods in everything the
// guard judges beyond env and envFrom: the OS it is pinned to, the hostname (the fields the kubelet names it by, and for a
// StatefulSet's pod its ordinal among the set's), the account it runs as (ServiceAccount, token
// automount, and the credentials its containers that can arm hold), and every value its containers' fieldRefs and resourceFieldRefs read — which must
// resolve on the Pod as on the owner at the Pod's ordinal, unless the owner's cannot be known (it
// was judged so). Only then does a change the Pod reads bite it as its owner was judged for
// (judgedThroughController). The sixth and seventh red teams armed or disarmed Pods through a
// ConfigMap or a Role judged on their owner alone: adopted with another shard's hostname, another
// ServiceAccount, another node, relabelled to another pod-index, or under a set in deletion.
func madeByOwner(p, owner *Workload) bool {
	if unjudgedOwner(p, owner, false) != "" || p.Pod.Spec == nil || owner.Pod.Spec == nil {
		return false
	}
	ps, ts := p.Pod.Spec, owner.Pod.Spec
	host, sub := ts.Hostname, ts.Subdomain
	ordinal := int64(-1)
	if owner.Kind == gvkStatefulSet.Kind {
		n, ok := setOrdinal(p, owner)
		if !ok || n < int64(owner.OrdinalStart) || n >= int64(owner.OrdinalStart)+int64(owner.Replicas) {
			return false
		}
		ordinal, host, sub = n, p.Pod.Meta.Name, owner.ServiceName // updateIdentity
	}
	// The hostname only where the owner's is known: one its controller names per pod (a
	// Deployment's, an Indexed Job's <job>-<index>) was judged on the owner as unknowable.
	_, hostUnknown := podHostname(owner, ordinal)
	if hostUnknown == "" && (ps.Hostname != host || ps.Subdomain != sub || ps.HostNetwork != ts.HostNetwork ||
		!equality.Semantic.DeepEqual(ps.HostnameOverride, ts.HostnameOverride) || !equality.Semantic.DeepEqual(ps.SetHostnameAsFQDN, ts.SetHostnameAsFQDN)) {
		return false
	}
	if ServiceAccountName(ps) != ServiceAccountName(ts) || !equality.Semantic.DeepEqual(ps.AutomountServiceAccountToken, ts.AutomountServiceAccountToken) {
		return false
	}
	// The node's env rules (envNamesOf): a Pod pinned to Linux no more than its owner's template
	// is reads names on a Windows node up to case (the twenty-fifth red team adopted one without
	// spec.os under a ReplicaSet whose template set it, then added noetl_ehdb_fencing=enforce to the
	// ConfigMap both read: judged on the owner, it was another variable).
	if certainlyLinux(&p.Pod) != certainlyLinux(&owner.Pod) {
		return false
	}
	// The credentials, as the Pod holds them: its owner was judged with the token the plugin
	// mounts, and a Pod adopted with another account's token at saDir (a Secret volume) would run
	// its election as that account (the ninth session's attack).
	for _, c := range p.Containers() {
		if podMayArm(c) && !holdsOwnCredentials(p, c) {
			return false
		}
	}
	oc := owner.Containers()
	for _, c := range p.Containers() {
		for _, e := range c.Env {
			switch {
			case e.ValueFrom == nil:
			case e.ValueFrom.FieldRef != nil:
				ov := fieldRefValue(e.ValueFrom.FieldRef, &owner.Pod)
				if !ov.Known() {
					continue // judged on the owner as unknowable
				}
				if pv := fieldRefValue(e.ValueFrom.FieldRef, &p.Pod); !pv.Known() || pv.Text != ov.At(ordinal) {
					return false
				}
			case e.ValueFrom.ResourceFieldRef != nil:
				// A vertical autoscaler may change a Pod's resources from its template's.
				i := slices.IndexFunc(oc, func(o *corev1.Container) bool { return o.Name == c.Name })
				if i < 0 || !equality.Semantic.DeepEqual(c.Resources, oc[i].Resources) {
					return false
				}
			}
		}
	}
	return true
}

// setOrdinal is the ordinal Pod p's name gives it in StatefulSet set (<set>-<ordinal>), if any.
func setOrdinal(p, set *Workload) (int64, bool) {
	rest, ok := strings.CutPrefix(p.Pod.Meta.Name, set.Name+"-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(rest, 10, 32)
	return n, err == nil
}

// holdsOwnCredentials reports whether container c of Pod p reads its ServiceAccount's token, the
// cluster's CA and its namespace where client-go does, as the plugin's volume provides them (a
// Pod's mounts are taken as they are: the plugin and every mutating webhook have run).
func holdsOwnCredentials(p *Workload, c *corev1.Container) bool {
	v := &containerView{c: c, role: "container"}
	return len(credentialProblems(p, v, true)) == 0 && namespaceFileProblem(p, v, true) == ""
}

// possibleName reports whether an object of a kind whose template the guard judges can have
// name: each of them is named by a DNS-1123 subdomain, which the API server checks on create.
func possibleName(name string) bool { return len(validation.IsDNS1123Subdomain(name)) == 0 }

// ownerUnverified says why ref's controller cannot exempt anything (no controller, one the webhook
// could not fetch, or none found with the UID named), or "" when it was fetched and found.
func ownerUnverified(ref *metav1.OwnerReference, owner *Workload, found, known bool) string {
	switch {
	case ref == nil:
		return "no controller"
	case !known:
		return "the webhook could not fetch it, so it exempts nothing"
	case !found || owner == nil:
		return "not found with uid " + string(ref.UID)
	}
	return ""
}

// podExemptionHolds is the owner rule for a Pod: its controller exists (found with the UID the
// Pod names, fetched by the webhook) and every container of the Pod that can arm (podMayArm) is
// the container of the same name in the controller's template with the same env and envFrom, up
// to the JOB_COMPLETION_INDEX an Indexed Job's controller adds. The rest of a Pod differs from
// its template by design (the controller's per-pod fields, the ServiceAccount plugin's mounts,
// sidecars a mutating webhook injects) and is judged on the Pod itself.
func podExemptionHolds(p, owner *Workload, found, known, creating bool) (bool, string) {
	ref := p.ControllerRef
	if why := ownerUnverified(ref, owner, found, known); why != "" {
		return false, why
	}
	if !exemptingOwner(p.Kind, ref) || owner.Pod.Spec == nil || p.Pod.Spec == nil {
		return false, "not a controller whose template the guard judges"
	}
	if why := unjudgedOwner(p, owner, creating); why != "" {
		return false, why
	}
	ps, os := p.Pod.Spec, owner.Pod.Spec
	for _, pair := range [][2][]corev1.Container{{ps.InitContainers, os.InitContainers}, {ps.Containers, os.Containers}} {
		for i := range pair[0] {
			c := &pair[0][i]
			if !podMayArm(c) {
				continue
			}
			j := slices.IndexFunc(pair[1], func(o corev1.Container) bool { return o.Name == c.Name })
			if j < 0 {
				return false, "its template has no container " + quote(c.Name) + ", so it judged a different one"
			}
			env := c.Env
			if owner.Indexed {
				env = withoutAdded(env, pair[1][j].Env, envJobCompletionIndex)
			}
			if !equality.Semantic.DeepEqual(emptyNilSlice(env), emptyNilSlice(pair[1][j].Env)) ||
				!equality.Semantic.DeepEqual(emptyNilSlice(c.EnvFrom), emptyNilSlice(pair[1][j].EnvFrom)) {
				return false, "its template's container " + quote(c.Name) + " has another env, so it judged a different one"
			}
		}
	}
	return true, ""
}

// podMayArm reports whether c's own spec can set the fencing variable on some node: an env entry
// of that name up to case, or an envFrom source whose prefix can lead to it. Only such containers
// can be armed by anything the guard sees (an image's ENV is out of its reach whatever the owner
// says).
func podMayArm(c *corev1.Container) bool {
	for _, e := range c.Env {
		if mayBeName(e.Name, EnvFencing) {
			return true
		}
	}
	for _, f := range c.EnvFrom {
		if mayHavePrefix(EnvFencing, f.Prefix) {
			return true
		}
	}
	return false
}

// withoutAdded drops from env the variable name when the template (tmpl) does not define it:
// the controller added it.
func withoutAdded(env, tmpl []corev1.EnvVar, name string) []corev1.EnvVar {
	if slices.ContainsFunc(tmpl, func(e corev1.EnvVar) bool { return e.Name == name }) {
		return env
	}
	return slices.DeleteFunc(slices.Clone(env), func(e corev1.EnvVar) bool { return e.Name == name })
}

func emptyNilSlice[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
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
