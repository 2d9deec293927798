package webhook_test

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// TestTheCredentialsAreReadAsTheProcessReadsThem (issue 17, class 3): the token and the CA are
// judged as the election's process will find them, not by which volume source is named at the
// path: file modes and owners the kubelet writes (pkg/volume/projected), the symlinks through
// ..data its atomic writer makes, the /run that /var/run is in the images writers run, a subPath
// the kubelet never refreshes, and the claim a StatefulSet's controller puts in place of a
// template volume of the same name (updateStorage).
func TestTheCredentialsAreReadAsTheProcessReadsThem(t *testing.T) {
	withModes := func(defaultMode, caMode *int32, user *int64) *corev1.ProjectedVolumeSource {
		src := kubeAPIAccess("")
		src.DefaultMode, src.DefaultUser = defaultMode, user
		src.Sources[1].ConfigMap.Items[0].Mode = caMode
		return src
	}
	tokenUser := kubeAPIAccess("")
	tokenUser.Sources[0].ServiceAccountToken.User = ptr.To[int64](1234)
	claimed := func(s *appsv1.StatefulSet) {
		s.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{{}}
		s.Spec.VolumeClaimTemplates[0].Name = "api"
	}
	rows := []row{
		{name: "the plugin's sources at mode 0000", sts: []func(*appsv1.StatefulSet){noAutomount, volume(projected("api", withModes(ptr.To[int32](0), nil, nil)), at(saDir))},
			unmet: []webhook.Reason{webhook.ReasonNoToken}, msg: []string{"mode 0000"}, lookups: -1},
		{name: "the CA's item at mode 0400", sts: []func(*appsv1.StatefulSet){noAutomount, volume(projected("api", withModes(ptr.To[int32](0o644), ptr.To[int32](0o400), nil)), at(saDir))},
			unmet: []webhook.Reason{webhook.ReasonNoToken}, msg: []string{saDir + "/ca.crt", "mode 0400"}, lookups: -1},
		{name: "the files owned by a user the volume names", sts: []func(*appsv1.StatefulSet){noAutomount, volume(projected("api", withModes(ptr.To[int32](0o600), nil, ptr.To[int64](1234))), at(saDir))},
			unmet: []webhook.Reason{webhook.ReasonNoToken}, msg: []string{"user 1234"}, lookups: -1},
		{name: "the token owned by a user its projection names", sts: []func(*appsv1.StatefulSet){noAutomount, volume(projected("api", tokenUser), at(saDir))},
			unmet: []webhook.Reason{webhook.ReasonNoToken}, msg: []string{saDir + "/token", "user 1234"}, lookups: -1},
		{name: "an emptyDir over ..data, through which the kubelet's files are symlinks", sts: []func(*appsv1.StatefulSet){volume(emptyDir("scratch"), at(saDir+"/..data"))},
			unmet: []webhook.Reason{webhook.ReasonNoToken}, msg: []string{saDir + "/..data"}, lookups: -1},
		{name: "an emptyDir over /run/secrets/kubernetes.io/serviceaccount, where /var/run leads", sts: []func(*appsv1.StatefulSet){volume(emptyDir("scratch"), at("/run/secrets/kubernetes.io/serviceaccount"))},
			unmet: []webhook.Reason{webhook.ReasonNoToken}, msg: []string{"two mounts at " + saDir}, lookups: -1},
		{name: "automount off and an emptyDir at /run/secrets/kubernetes.io/serviceaccount", sts: []func(*appsv1.StatefulSet){noAutomount, volume(emptyDir("scratch"), at("/run/secrets/kubernetes.io/serviceaccount"))},
			unmet: []webhook.Reason{webhook.ReasonNoToken}, msg: []string{"symlink"}, lookups: -1},
		{name: "the token mounted by subPath, which the kubelet never refreshes", sts: []func(*appsv1.StatefulSet){noAutomount,
			volume(projected("api", kubeAPIAccess("")), corev1.VolumeMount{MountPath: saDir + "/token", SubPath: "token"}, corev1.VolumeMount{MountPath: saDir + "/ca.crt", SubPath: "ca.crt"}, corev1.VolumeMount{MountPath: saDir + "/namespace", SubPath: "namespace"})},
			unmet: []webhook.Reason{webhook.ReasonNoToken}, msg: []string{"subPath"}, lookups: -1},
		{name: "a claim template named like the template's token volume", sts: []func(*appsv1.StatefulSet){noAutomount, volume(projected("api", kubeAPIAccess("")), at(saDir)), claimed},
			unmet: []webhook.Reason{webhook.ReasonNoToken}, msg: []string{"persistentVolumeClaim"}, lookups: -1},

		// The tenth red team: /run is /var/run only in an image that links them (the project's own
		// FROM-scratch image does not), and the runtime orders mounts by the path as written; a
		// volume the kubelet rewrites through ..data, mounted above the token's, moves it.
		{name: "the token projected only at /run/secrets/kubernetes.io/serviceaccount", sts: []func(*appsv1.StatefulSet){noAutomount, volume(projected("api", kubeAPIAccess("")), at("/run/secrets/kubernetes.io/serviceaccount"))},
			unmet: []webhook.Reason{webhook.ReasonNoToken}, msg: []string{"symlink"}, lookups: -1},
		{name: "a projection at the /run alias, an emptyDir at /var/run/secrets/kubernetes.io of the same written depth", sts: []func(*appsv1.StatefulSet){noAutomount,
			volume(projected("api", kubeAPIAccess("")), at("/run/secrets/kubernetes.io/serviceaccount")), volume(emptyDir("scratch"), at("/var/run/secrets/kubernetes.io"))},
			unmet: []webhook.Reason{webhook.ReasonNoToken}, msg: []string{"symlink"}, lookups: -1},
		{name: "a ConfigMap volume mounted at /var/run/secrets, above the token's mount", sts: []func(*appsv1.StatefulSet){volume(
			corev1.Volume{Name: "above", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "x"}}}}, at("/var/run/secrets"))},
			unmet: []webhook.Reason{webhook.ReasonNoToken}, msg: []string{`volume \"above\"`, "rewrites"}, lookups: -1},
		{name: "a projected token volume mounted at /var/run/secrets", sts: []func(*appsv1.StatefulSet){volume(projected("above", kubeAPIAccess("rt-other")), at("/var/run/secrets"))},
			unmet: []webhook.Reason{webhook.ReasonNoToken}, msg: []string{"rewrites"}, lookups: -1},

		// --- right answers ------------------------------------------------------------------
		{name: "the plugin's sources at mode 0444", sts: []func(*appsv1.StatefulSet){noAutomount, volume(projected("api", withModes(ptr.To[int32](0o444), nil, nil)), at(saDir))},
			allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "an emptyDir at /run/other", sts: []func(*appsv1.StatefulSet){volume(emptyDir("scratch"), at("/run/other"))},
			allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "a claim template of another name", sts: []func(*appsv1.StatefulSet){noAutomount, volume(projected("api", kubeAPIAccess("")), at(saDir)), func(s *appsv1.StatefulSet) {
			s.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{{}}
			s.Spec.VolumeClaimTemplates[0].Name = "data"
		}}, allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
	}
	for _, rw := range rows {
		t.Run(rw.name, func(t *testing.T) { runRow(t, rw) })
	}
}

// TestTopologyLabelsAreTheNodes (issue 17, class 3): a Pod's topology.kubernetes.io/zone and
// region labels are the node's once it is bound (the PodTopologyLabels admission plugin puts them
// on the Binding, and binding copies a Binding's labels onto the Pod, over the Pod's own), so
// before that a fieldRef to them is unknowable. The ninth red team's Pod took its shard from the
// zone label it did not have yet: judged on shard 0 (live), it ran on shard 7.
func TestTopologyLabelsAreTheNodes(t *testing.T) {
	fromZone := envVar(corev1.EnvVar{Name: "NOETL_EHDB_ELECTION_SHARD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['topology.kubernetes.io/zone']"}}})
	zonePod := func(zone, node string) func(testing.TB) webhook.Input {
		return func(t testing.TB) webhook.Input {
			p := barePod(sts(append(compliant(), fromZone)...), wt.WriterName+"-0")
			if zone != "" {
				p.Labels = map[string]string{"topology.kubernetes.io/zone": zone}
			}
			p.Spec.NodeName = node
			return webhook.Input{Operation: admissionv1.Create, Object: workload(t, gvkPod, p)}
		}
	}
	rows := []row{
		{name: "the zone label absent before binding", input: zonePod("", ""), unmet: []webhook.Reason{webhook.ReasonShardUnknown}, msg: []string{"PodTopologyLabels"}, lookups: -1},
		{name: "the zone label set by hand before binding, which overwrites it", input: zonePod("0", ""), unmet: []webhook.Reason{webhook.ReasonShardUnknown}, msg: []string{"PodTopologyLabels"}, lookups: -1},
		{name: "a Pod created on its node has the node's labels already", input: zonePod("0", "node-a"), allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
	}
	for _, rw := range rows {
		t.Run(rw.name, func(t *testing.T) { runRow(t, rw) })
	}
}

// TestABindingIsJudgedLikeTheEditItMakes (issue 17, class 4): binding a Pod (pods/binding, the
// scheduler's path) copies the Binding's labels and annotations onto it, and a fieldRef reads them
// at every container start. The ninth red team turned an armed Pod's election off with a Binding's
// label, unreviewed; it is judged like the label edit it makes.
func TestABindingIsJudgedLikeTheEditItMakes(t *testing.T) {
	fromLabel := envVar(corev1.EnvVar{Name: "NOETL_EHDB_ELECTION", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['e']"}}})
	fromAnnotation := envVar(corev1.EnvVar{Name: "NOETL_EHDB_ELECTION_SHARD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['shard']"}}})
	armed := func(opts ...func(*appsv1.StatefulSet)) *webhook.Workload {
		p := saAdmitted(barePod(sts(append(compliant(), opts...)...), wt.WriterName+"-0"))
		p.Labels, p.Annotations = map[string]string{"e": "true"}, map[string]string{"shard": "0"}
		return workload(t, gvkPod, p)
	}
	legacy := func(labels map[string]string) []byte {
		b := &corev1.Binding{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Binding"}, ObjectMeta: metav1.ObjectMeta{Name: wt.WriterName + "-0", Namespace: ns, Labels: labels},
			Target: corev1.ObjectReference{Kind: "Node", Name: "node-a"}}
		raw, err := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: &admissionv1.AdmissionRequest{
			UID: "b2", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Binding"}, Resource: metav1.GroupVersionResource{Version: "v1", Resource: "bindings"},
			Operation: admissionv1.Create, Namespace: ns, Object: runtime.RawExtension{Object: b}}})
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	binding := func(labels, annotations map[string]string) []byte {
		b := &corev1.Binding{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Binding"}, ObjectMeta: metav1.ObjectMeta{Name: wt.WriterName + "-0", Namespace: ns, Labels: labels, Annotations: annotations},
			Target: corev1.ObjectReference{Kind: "Node", Name: "node-a"}}
		raw, err := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: &admissionv1.AdmissionRequest{
			UID: "b1", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Binding"}, Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, SubResource: "binding",
			Operation: admissionv1.Create, Namespace: ns, Name: wt.WriterName + "-0", Object: runtime.RawExtension{Object: b}}})
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	for _, tc := range []struct {
		name    string
		pod     webhook.Workloads
		body    []byte
		allowed bool
		msg     string
	}{
		{"a Binding's label turning the election off", idleWatch{armed(fromLabel)}, binding(map[string]string{"e": "false"}, nil), false, "election is not enabled"},
		{"a Binding's annotation moving the shard to one without a Lease", idleWatch{armed(fromAnnotation)}, binding(nil, map[string]string{"shard": "7"}), false, "ehdb-shard-00000007 (shard 7) does not exist"},
		{"the same through the older bindings resource (the tenth red team)", idleWatch{armed(fromLabel)}, legacy(map[string]string{"e": "false"}), false, "election is not enabled"},
		{"a plain Binding", idleWatch{armed(fromLabel)}, binding(nil, nil), true, ""},
		{"the node's topology labels on a Pod that reads none", idleWatch{armed()}, binding(map[string]string{"topology.kubernetes.io/zone": "7"}, nil), true, ""},
		{"a Binding's label the Pod reads, unchanged", idleWatch{armed(fromLabel)}, binding(map[string]string{"e": "true"}, nil), true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &webhook.Handler{Resolver: goodCluster(), Policy: webhook.Policy{RequireLiveLease: true}, Workloads: tc.pod, Clock: clocktesting.NewFakePassiveClock(now)}
			srv := httptest.NewServer(webhook.NewHTTPHandler(h))
			t.Cleanup(srv.Close)
			_, out, raw := post(t, srv.URL, "application/json", tc.body)
			if out.Response == nil || out.Response.Allowed != tc.allowed || !tc.allowed && !strings.Contains(out.Response.Result.Message, tc.msg) {
				t.Fatalf("allowed=%v, want %v (%q): %s", out.Response != nil && out.Response.Allowed, tc.allowed, tc.msg, raw)
			}
		})
	}
}

// TestTheLeaseGuardMustAdmitTheWriter (issue 17, class 6): the chart's lease guard admits Lease
// writes only from the accounts it names, whatever RBAC grants; an armed writer running as another
// account bound to the Role by hand was admitted and never minted (the ninth red team's first
// break). What the guard admits is read off the live policy (LeaseGuardOf, on the real API
// server in charts/charttest).
func TestTheLeaseGuardMustAdmitTheWriter(t *testing.T) {
	writer := "system:serviceaccount:" + ns + ":" + wt.WriterSA
	guard := func(g webhook.LeaseGuardFact) func(r *wt.Resolver) {
		return func(r *wt.Resolver) {
			r.ServiceAccounts["second"] = nil
			r.Grant(ns, "second", ns, "get", "list", "watch", "create", "update")
			r.LeaseGuards = map[string]webhook.LeaseGuardFact{ns: g}
		}
	}
	second := wt.ServiceAccount("second")
	byVerb := webhook.LeaseGuardFact{Name: "g", Users: []string{writer}, Verb: webhook.VerbElect}
	both := func(fs ...func(*wt.Resolver)) func(*wt.Resolver) {
		return func(r *wt.Resolver) {
			for _, f := range fs {
				f(r)
			}
		}
	}
	rows := []row{
		{name: "a second account the lease guard does not name", sts: []func(*appsv1.StatefulSet){second}, cluster: guard(webhook.LeaseGuardFact{Name: "g", Users: []string{writer}}),
			unmet: []webhook.Reason{webhook.ReasonLeaseGuard}, msg: []string{"lease guard g", "second"}, lookups: -1},
		{name: "the lease guard unreadable", sts: []func(*appsv1.StatefulSet){second}, cluster: guard(webhook.LeaseGuardFact{Name: "g", Err: errors.New("forbidden")}),
			unmet: []webhook.Reason{webhook.ReasonCouldNotVerify}, msg: []string{"forbidden"}, lookups: -1},
		{name: "the chart's writer", cluster: guard(webhook.LeaseGuardFact{Name: "g", Users: []string{writer}}), allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "a second account the lease guard names", sts: []func(*appsv1.StatefulSet){second},
			cluster: guard(webhook.LeaseGuardFact{Name: "g", Users: []string{writer, "system:serviceaccount:" + ns + ":second"}}), allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "a second lease guard that does not name it", sts: []func(*appsv1.StatefulSet){second},
			cluster: guard(webhook.LeaseGuardFact{Name: "g", Users: []string{writer, "system:serviceaccount:" + ns + ":second"}, Also: []webhook.LeaseGuardFact{{Name: "left-behind", Users: []string{writer}}}}),
			unmet:   []webhook.Reason{webhook.ReasonLeaseGuard}, msg: []string{"lease guard left-behind"}, lookups: -1},
		{name: "a break-glass group of every account of the namespace", sts: []func(*appsv1.StatefulSet){second},
			cluster: guard(webhook.LeaseGuardFact{Name: "g", Users: []string{writer}, Groups: []string{"system:serviceaccounts:" + ns}}), allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "no lease guard in the namespace", sts: []func(*appsv1.StatefulSet){second}, cluster: guard(webhook.LeaseGuardFact{}), allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		// The current chart's guard admits every account of its namespace granted ehdb-elect
		// (the writer Role) but not every verb: asked of the authorizer, as the guard asks it.
		{name: "a guard by the verb: a second account bound to the writer Role", sts: []func(*appsv1.StatefulSet){second},
			cluster: both(guard(byVerb), func(r *wt.Resolver) { r.Grant(ns, "second", ns, webhook.VerbElect) }), allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "a guard by the verb: the grant on the shard's Lease by name", sts: []func(*appsv1.StatefulSet){second},
			cluster: both(guard(byVerb), func(r *wt.Resolver) { r.GrantNamed(ns, "second", ns, "ehdb-shard-00000000", webhook.VerbElect) }), allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "a guard by the verb: a second account without it", sts: []func(*appsv1.StatefulSet){second}, cluster: guard(byVerb),
			unmet: []webhook.Reason{webhook.ReasonLeaseGuard}, msg: []string{"is not granted ehdb-elect"}, lookups: -1},
		// A guard may name no one (a values file's empty list): its refusal still reads.
		{name: "a guard by the verb naming no one: an account holding every verb", sts: []func(*appsv1.StatefulSet){second},
			cluster: both(guard(webhook.LeaseGuardFact{Name: "g", Verb: webhook.VerbElect}), func(r *wt.Resolver) { r.Grant(ns, "second", ns, webhook.VerbElect, webhook.VerbWildcardProbe) }),
			unmet:   []webhook.Reason{webhook.ReasonLeaseGuard}, msg: []string{"lets only ServiceAccounts of " + ns + " granted", "holds every verb"}, lookups: -1},
		{name: "a guard by name naming no one", sts: []func(*appsv1.StatefulSet){second}, cluster: guard(webhook.LeaseGuardFact{Name: "g"}),
			unmet: []webhook.Reason{webhook.ReasonLeaseGuard}, msg: []string{"lease guard g lets no one write ehdb-shard-* Leases in " + ns}, lookups: -1},
		{name: "a guard by name naming a group only", sts: []func(*appsv1.StatefulSet){second}, cluster: guard(webhook.LeaseGuardFact{Name: "g", Groups: []string{"writers"}}),
			unmet: []webhook.Reason{webhook.ReasonLeaseGuard}, msg: []string{"lease guard g lets only group writers write"}, lookups: -1},
		{name: "a guard by the verb: a second account holding every verb", sts: []func(*appsv1.StatefulSet){second},
			cluster: both(guard(byVerb), func(r *wt.Resolver) { r.Grant(ns, "second", ns, webhook.VerbElect, webhook.VerbWildcardProbe) }),
			unmet:   []webhook.Reason{webhook.ReasonLeaseGuard}, msg: []string{"holds every verb"}, lookups: -1},
		{name: "a guard by the verb: the chart's writer, named, holding every verb", cluster: both(guard(byVerb), func(r *wt.Resolver) { r.Grant(ns, wt.WriterSA, ns, "*", webhook.VerbWildcardProbe) }),
			allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "a guard by the verb beside a guard by name that does not name it", sts: []func(*appsv1.StatefulSet){second},
			cluster: both(guard(webhook.LeaseGuardFact{Name: "g", Users: []string{writer}, Verb: webhook.VerbElect, Also: []webhook.LeaseGuardFact{{Name: "left-behind", Users: []string{writer}}}}),
				func(r *wt.Resolver) { r.Grant(ns, "second", ns, webhook.VerbElect) }),
			unmet: []webhook.Reason{webhook.ReasonLeaseGuard}, msg: []string{"lease guard left-behind"}, lookups: -1},
	}
	for _, rw := range rows {
		t.Run(rw.name, func(t *testing.T) { runRow(t, rw) })
	}
}

// LeaseGuardOf reads the principals off a lease guard as the chart renders it, binds it only to
// the namespace its Deny binding selects, and says so when the policy is not as rendered.
func TestLeaseGuardOf(t *testing.T) {
	policy := func(writer, bound string) admissionregistrationv1.ValidatingAdmissionPolicy {
		p := admissionregistrationv1.ValidatingAdmissionPolicy{}
		p.Name = "g"
		p.Spec.Variables = []admissionregistrationv1.Variable{{Name: "writer", Expression: writer}, {Name: "boundWriters", Expression: bound},
			{Name: "breakGlassUsers", Expression: `["alice"]`}, {Name: "breakGlassGroups", Expression: `["ops"]`}}
		return p
	}
	binding := func(ns string, actions ...admissionregistrationv1.ValidationAction) admissionregistrationv1.ValidatingAdmissionPolicyBinding {
		b := admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
		b.Name, b.Spec.PolicyName, b.Spec.ValidationActions = "g", "g", actions
		b.Spec.MatchResources = &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}}
		return b
	}
	good := policy(`'system:serviceaccount:noetl:w'`, `["system:serviceaccount:noetl:x"]`)
	deny := admissionregistrationv1.Deny
	for _, tc := range []struct {
		name     string
		policies []admissionregistrationv1.ValidatingAdmissionPolicy
		bindings []admissionregistrationv1.ValidatingAdmissionPolicyBinding
		users    []string
		none     bool
		err      bool
	}{
		{"as rendered", []admissionregistrationv1.ValidatingAdmissionPolicy{good}, []admissionregistrationv1.ValidatingAdmissionPolicyBinding{binding(ns, deny)},
			[]string{"system:serviceaccount:noetl:w", "system:serviceaccount:noetl:x", "alice"}, false, false},
		{"bound to another namespace", []admissionregistrationv1.ValidatingAdmissionPolicy{good}, []admissionregistrationv1.ValidatingAdmissionPolicyBinding{binding("other", deny)}, nil, true, false},
		// Red team R of stop 34: a warning binding is Deny a Helm value away, and no admission
		// sees that change: it is a guard (a writer granted every verb under it lost its Lease
		// when Deny came back).
		{"warning only", []admissionregistrationv1.ValidatingAdmissionPolicy{good}, []admissionregistrationv1.ValidatingAdmissionPolicyBinding{binding(ns, admissionregistrationv1.Warn)},
			[]string{"system:serviceaccount:noetl:w", "system:serviceaccount:noetl:x", "alice"}, false, false},
		{"audit only", []admissionregistrationv1.ValidatingAdmissionPolicy{good}, []admissionregistrationv1.ValidatingAdmissionPolicyBinding{binding(ns, admissionregistrationv1.Audit)},
			[]string{"system:serviceaccount:noetl:w", "system:serviceaccount:noetl:x", "alice"}, false, false},
		{"two guards, the second not as rendered", []admissionregistrationv1.ValidatingAdmissionPolicy{good, func() admissionregistrationv1.ValidatingAdmissionPolicy {
			p := policy(`x`, `[]`)
			p.Name = "h"
			return p
		}()}, []admissionregistrationv1.ValidatingAdmissionPolicyBinding{binding(ns, deny), func() admissionregistrationv1.ValidatingAdmissionPolicyBinding {
			b := binding(ns, deny)
			b.Name, b.Spec.PolicyName = "h", "h"
			return b
		}()}, nil, false, true},
		{"its policy gone", nil, []admissionregistrationv1.ValidatingAdmissionPolicyBinding{binding(ns, deny)}, nil, false, true},
		{"a writer expression not as rendered", []admissionregistrationv1.ValidatingAdmissionPolicy{policy(`request.userInfo.username`, `[]`)}, []admissionregistrationv1.ValidatingAdmissionPolicyBinding{binding(ns, deny)}, nil, false, true},
		{"a bound list not as rendered", []admissionregistrationv1.ValidatingAdmissionPolicy{policy(`'system:serviceaccount:noetl:w'`, `variables.x`)}, []admissionregistrationv1.ValidatingAdmissionPolicyBinding{binding(ns, deny)}, nil, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := webhook.LeaseGuardOf(ns, tc.policies, tc.bindings)
			switch {
			case tc.err != (g.Err != nil):
				t.Fatalf("err = %v, want an error: %v", g.Err, tc.err)
			case tc.none != (g.Name == ""):
				t.Fatalf("guard %q, want none: %v", g.Name, tc.none)
			case !tc.err && !slices.Equal(g.Users, tc.users):
				t.Fatalf("users %v, want %v", g.Users, tc.users)
			}
		})
	}
}

// TestAPodEditFailsClosed (issue 17, class 6): Pods fail open so that a guard outage never keeps a
// crashed writer's Pod from being recreated or placed; an edit of a running Pod's labels or
// annotations creates nothing and may disarm it, so when the guard cannot look it is refused
// (the ninth red team relabelled an armed Pod while the webhook stalled).
func TestAPodEditFailsClosed(t *testing.T) {
	fromLabel := envVar(corev1.EnvVar{Name: "NOETL_EHDB_ELECTION", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['e']"}}})
	armedPod := func(team string) *corev1.Pod {
		p := saAdmitted(barePod(sts(append(compliant(), fromLabel)...), wt.WriterName+"-0"))
		p.Labels = map[string]string{"e": "true", "team": team}
		return p
	}
	down := func(r *wt.Resolver) { r.AccessErr = errors.New("the authorizer is down") }
	rows := []row{
		{name: "a relabel while the guard cannot look", cluster: down, input: func(t testing.TB) webhook.Input {
			return webhook.Input{Operation: admissionv1.Update, Object: workload(t, gvkPod, armedPod("b")), Old: workload(t, gvkPod, armedPod("a"))}
		}, unmet: []webhook.Reason{webhook.ReasonCouldNotVerify}, lookups: -1},
		{name: "the Pod's creation while the guard cannot look", cluster: down, input: func(t testing.TB) webhook.Input {
			return webhook.Input{Operation: admissionv1.Create, Object: workload(t, gvkPod, armedPod("a"))}
		}, allowed: true, reason: webhook.ReasonUnverifiedPod, warn: []string{"Pods fail open"}, lookups: -1},
	}
	for _, rw := range rows {
		t.Run(rw.name, func(t *testing.T) { runRow(t, rw) })
	}
}

// TestALatecomerReadsTheTokenAsItWasWritten (the tenth red team): when every container of a Pod
// runs as one user and no fsGroup is set, the kubelet writes the token 0600 for that user when the
// Pod starts; an armed ephemeral container added later as another user cannot read it.
func TestALatecomerReadsTheTokenAsItWasWritten(t *testing.T) {
	withEphemeral := func(podUser, ephemeralUser *int64) func(testing.TB) webhook.Input {
		return func(t testing.TB) webhook.Input {
			old := pod(sts(wt.ServiceAccount(wt.WriterSA), wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "0")), wt.WriterName+"-0")
			old.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: podUser}
			now := old.DeepCopy()
			ec := corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox",
				Env:          []corev1.EnvVar{{Name: "NOETL_EHDB_FENCING", Value: "enforce"}, {Name: "NOETL_EHDB_ELECTION", Value: "true"}, {Name: "NOETL_EHDB_ELECTION_SHARD", Value: "0"}, {Name: "NOETL_EHDB_ELECTION_NAMESPACE", Value: ns}},
				VolumeMounts: []corev1.VolumeMount{{Name: "kube-api-access-x7k2p", MountPath: saDir, ReadOnly: true}}}}
			if ephemeralUser != nil {
				ec.SecurityContext = &corev1.SecurityContext{RunAsUser: ephemeralUser}
			}
			now.Spec.EphemeralContainers = []corev1.EphemeralContainer{ec}
			return webhook.Input{Operation: admissionv1.Update, Subresource: "ephemeralcontainers", Object: workload(t, gvkPod, now), Old: workload(t, gvkPod, old)}
		}
	}
	rows := []row{
		{name: "an ephemeral container as another user than every container's", input: withEphemeral(ptr.To[int64](1000), ptr.To[int64](2000)),
			unmet: []webhook.Reason{webhook.ReasonNoToken}, msg: []string{"mode 0600 for user 1000"}, lookups: -1},
		{name: "an ephemeral container as the same user", input: withEphemeral(ptr.To[int64](1000), nil), allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "no user set anywhere", input: withEphemeral(nil, nil), allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
	}
	for _, rw := range rows {
		t.Run(rw.name, func(t *testing.T) { runRow(t, rw) })
	}
}
