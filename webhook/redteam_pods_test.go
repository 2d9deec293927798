package webhook_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// Issue 17, "judge what will actually run": an armed Pod nobody judged on an owner, a container
// that does not hold its ServiceAccount's token where client-go reads it, and a container whose
// election would talk to another API server. Each row was judged wrongly before.

const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// saAdmitted is p as the ServiceAccount admission plugin leaves it before any webhook sees it
// (plugin/pkg/admission/serviceaccount mountServiceAccountToken): with automount on, every init
// and regular container that mounts nothing at saDir mounts the kube-api-access volume there.
func saAdmitted(p *corev1.Pod) *corev1.Pod {
	if a := p.Spec.AutomountServiceAccountToken; a != nil && !*a {
		return p
	}
	const vol = "kube-api-access-x7k2p"
	mount := corev1.VolumeMount{Name: vol, ReadOnly: true, MountPath: saDir}
	needs := false
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			has := false
			for _, m := range cs[i].VolumeMounts {
				has = has || m.MountPath == saDir
			}
			if !has {
				cs[i].VolumeMounts = append(cs[i].VolumeMounts, mount)
				needs = true
			}
		}
	}
	if needs {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: vol, VolumeSource: corev1.VolumeSource{Projected: kubeAPIAccess("")}})
	}
	return p
}

// kubeAPIAccess is the projected volume the ServiceAccount admission plugin adds (TokenVolumeSource),
// with the token's audience.
func kubeAPIAccess(audience string) *corev1.ProjectedVolumeSource {
	return &corev1.ProjectedVolumeSource{DefaultMode: ptr.To[int32](0o644), Sources: []corev1.VolumeProjection{
		{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", Audience: audience, ExpirationSeconds: ptr.To[int64](3607)}},
		{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
			Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
		{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace",
			FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
	}}
}

// volume adds a volume to the pod template and mounts it in the writer container.
func volume(v corev1.Volume, mounts ...corev1.VolumeMount) func(*appsv1.StatefulSet) {
	return func(s *appsv1.StatefulSet) {
		s.Spec.Template.Spec.Volumes = append(s.Spec.Template.Spec.Volumes, v)
		c := &s.Spec.Template.Spec.Containers[0]
		for _, m := range mounts {
			m.Name = v.Name
			c.VolumeMounts = append(c.VolumeMounts, m)
		}
	}
}

func emptyDir(name string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
}

func projected(name string, src *corev1.ProjectedVolumeSource) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Projected: src}}
}

func at(path string) corev1.VolumeMount { return corev1.VolumeMount{MountPath: path} }

func unarmedPod(s *appsv1.StatefulSet) { wt.SetEnv("NOETL_EHDB_FENCING", "shadow")(s) }

// TestBarePodsFaceTheOrderCheck: a Pod that no owner the guard judged accounts for is arming
// of its own (issue 17, classes 2 and 4): created armed, it gets the order check like a workload.
func TestBarePodsFaceTheOrderCheck(t *testing.T) {
	withShard7 := wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "7") // shard 7 has no Lease
	podInput := func(p *corev1.Pod) func(testing.TB) webhook.Input {
		return func(t testing.TB) webhook.Input {
			return webhook.Input{Operation: admissionv1.Create, Object: workload(t, gvkPod, p)}
		}
	}
	rows := []row{
		{name: "an armed bare Pod of a shard without a Lease is refused", input: podInput(barePod(sts(append(compliant(), withShard7)...), "writer-debug")),
			unmet: []webhook.Reason{webhook.ReasonLeaseNotLive}, msg: []string{"Pod noetl/writer-debug", "ehdb-shard-00000007 (shard 7) does not exist"}, lookups: -1},
		{name: "an armed bare Pod named after a shard without a Lease is refused", input: podInput(barePod(sts(compliant()...), "writer-7")),
			unmet: []webhook.Reason{webhook.ReasonLeaseNotLive}, msg: []string{"ehdb-shard-00000007 (shard 7) does not exist"}, lookups: -1},
		{name: "an armed Pod controlled by a kind the guard does not judge is order-checked", input: func(t testing.TB) webhook.Input {
			p := pod(sts(append(compliant(), withShard7)...), "writer-x")
			p.OwnerReferences[0].APIVersion, p.OwnerReferences[0].Kind = "db.example.com/v1", "Writer"
			return webhook.Input{Operation: admissionv1.Create, Object: workload(t, gvkPod, p)}
		}, unmet: []webhook.Reason{webhook.ReasonLeaseNotLive}, warn: []string{"db.example.com/v1 Writer"}, lookups: -1},
		{name: "an armed bare Pod on the host network names no shard to check", input: podInput(barePod(sts(append(compliant(), hostNetwork)...), "w-0")),
			unmet: []webhook.Reason{webhook.ReasonShardUnknown}, msg: []string{"host network"}, lookups: -1},
		{name: "an armed bare Pod whose shard's Lease is live is admitted", input: podInput(barePod(sts(compliant()...), "writer-0")),
			allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "the Pod of a StatefulSet is not order-checked: a crashed writer's replacement is recreated", input: podInput(pod(sts(compliant()...), "noetl-cmdbus-writer-7")),
			allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "a bare Pod fails open when the guard cannot read the Lease", cluster: func(r *wt.Resolver) { r.LeaseErr = errBoom },
			input: podInput(barePod(sts(compliant()...), "writer-7")), allowed: true, reason: webhook.ReasonUnverifiedPod, warn: []string{"could not verify"}, lookups: -1},
		{name: "an unarmed bare Pod is no business of the guard", input: podInput(barePod(sts(unarmedPod), "writer-7")),
			allowed: true, reason: webhook.ReasonUnarmed, lookups: 0},
	}
	for _, rw := range rows {
		t.Run(rw.name, func(t *testing.T) { runRow(t, rw) })
	}
}

// TestHandlerVerifiesAPodsOwner: a Pod is exempt from the order check because of its controller
// only when the webhook fetched that controller, with the UID named, and each container of the
// Pod that can arm is its template's container with the same env and envFrom. A forged or foreign
// owner exempts nothing; an owner the webhook cannot fetch makes an order-check failure "could
// not verify", so the Pod fails open (a guard outage never stops a writer's Pod being recreated).
func TestHandlerVerifiesAPodsOwner(t *testing.T) {
	cluster := goodCluster()
	clear(cluster.Leases)
	armed := sts(compliant()...)
	armed.UID = "sts-uid"
	unarmed := sts(wt.ServiceAccount(wt.WriterSA))
	unarmed.Name, unarmed.UID = "unarmed", "unarmed-uid"
	idx := indexedJob(sts(append(compliant(), wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "0"))...))
	idx.Name, idx.UID = "idx", "job-uid"
	owners := fakeOwners{owners: map[string]runtime.Object{"StatefulSet/" + ns + "/" + armed.Name: armed, "StatefulSet/" + ns + "/unarmed": unarmed, "Job/" + ns + "/idx": idx}}
	// jobPod is the Indexed Job's Pod as its controller makes it: JOB_COMPLETION_INDEX added.
	jobPod := func(extra ...corev1.EnvVar) *corev1.Pod {
		p := pod(sts(append(compliant(), wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "0"))...), "idx-0-abcde")
		p.OwnerReferences[0].APIVersion, p.OwnerReferences[0].Kind, p.OwnerReferences[0].Name, p.OwnerReferences[0].UID = "batch/v1", "Job", "idx", "job-uid"
		c := &p.Spec.Containers[0]
		c.Env = append(c.Env, corev1.EnvVar{Name: "JOB_COMPLETION_INDEX", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1",
			FieldPath: "metadata.labels['batch.kubernetes.io/job-completion-index']"}}})
		c.Env = append(c.Env, extra...)
		return p
	}
	podOf := func(owner string, uid string, edit func(*corev1.Pod)) *corev1.Pod {
		p := pod(sts(compliant()...), owner+"-0")
		p.OwnerReferences[0].Name, p.OwnerReferences[0].UID = owner, types.UID(uid)
		if edit != nil {
			edit(p)
		}
		return p
	}
	podKind := metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}
	const orderChecked = "ehdb-shard-00000000 (shard 0) does not exist"
	cases := []struct {
		name    string
		owners  webhook.Owners
		obj     *corev1.Pod
		allowed bool
		msg     string
	}{
		{"the Pod of a real, armed StatefulSet with its env is exempt", owners, podOf(armed.Name, "sts-uid", nil), true, ""},
		{"a Pod naming a StatefulSet uid that does not exist is order-checked", owners, podOf(armed.Name, "forged-uid", nil), false, orderChecked},
		{"an armed Pod under a real, unarmed StatefulSet (its true uid) is order-checked", owners, podOf("unarmed", "unarmed-uid", nil), false, orderChecked},
		{"a Pod whose armed container's env is not its StatefulSet's is order-checked", owners, podOf(armed.Name, "sts-uid", func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: "NOETL_EHDB_ELECTION_SHARD", Value: "0"})
		}), false, orderChecked},
		{"an injected container that cannot arm does not withdraw the exemption", owners, podOf(armed.Name, "sts-uid", func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "istio-proxy", Image: "proxy", Env: []corev1.EnvVar{{Name: "ISTIO_META", Value: "x"}}})
		}), true, ""},
		{"a Pod whose owner the webhook cannot fetch fails open, saying so", fakeOwners{unknown: true}, podOf(armed.Name, "sts-uid", nil), true, ""},
		{"an Indexed Job's Pod with the JOB_COMPLETION_INDEX its controller adds is exempt", owners, jobPod(), true, ""},
		{"an Indexed Job's Pod with more env than that is order-checked", owners, jobPod(corev1.EnvVar{Name: "NOETL_EHDB_ELECTION_SHARD", Value: "0"}), false, orderChecked},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := &webhook.Handler{Resolver: cluster, Policy: webhook.Policy{RequireLiveLease: true}, Owners: tc.owners}
			srv := httptest.NewServer(webhook.NewHTTPHandler(h))
			t.Cleanup(srv.Close)
			_, out, raw := post(t, srv.URL, "application/json", wt.Review(t, admissionv1.Create, podKind, saAdmitted(tc.obj), nil))
			if out.Response == nil || out.Response.Allowed != tc.allowed {
				t.Fatalf("allowed=%v, want %v: %s", out.Response != nil && out.Response.Allowed, tc.allowed, raw)
			}
			if !tc.allowed && !strings.Contains(out.Response.Result.Message, tc.msg) {
				t.Fatalf("want the order check (%q): %s", tc.msg, raw)
			}
			if tc.owners != nil && tc.owners.(fakeOwners).unknown && !strings.Contains(strings.Join(out.Response.Warnings, "\n"), "could not verify") {
				t.Fatalf("an unfetchable owner must be said in a warning: %s", raw)
			}
		})
	}
}

// TestTheContainerAuthenticatesAsItsAccount: the election reads its token and CA where client-go's
// rest.InClusterConfig does (saDir/token, saDir/ca.crt); what is there is decided by the mounts
// as the ServiceAccount admission plugin and the container runtime leave them (the deepest mount
// wins), never by "some token volume exists".
func TestTheContainerAuthenticatesAsItsAccount(t *testing.T) {
	rows := []row{
		{name: "an emptyDir mounted over the token directory", sts: []func(*appsv1.StatefulSet){volume(emptyDir("scratch"), at(saDir))},
			unmet: []webhook.Reason{webhook.ReasonNoToken}, msg: []string{`emptyDir volume \"scratch\"`, saDir + "/token"}, lookups: -1},
		{name: "the same, spelled with a trailing slash the plugin does not recognise", sts: []func(*appsv1.StatefulSet){volume(emptyDir("scratch"), at(saDir+"/"))},
			unmet: []webhook.Reason{webhook.ReasonNoToken}, msg: []string{"two mounts"}, lookups: -1},
		{name: "a ConfigMap file mounted by subPath over the token file", sts: []func(*appsv1.StatefulSet){volume(
			corev1.Volume{Name: "fake", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "tok"}}}},
			corev1.VolumeMount{MountPath: saDir + "/token", SubPath: "token"})},
			// Under the plugin's volume, which the kubelet rewrites through ..data (the tenth red team).
			unmet: []webhook.Reason{webhook.ReasonNoToken}, msg: []string{"rewrites"}, lookups: -1},
		{name: "a volume named like the plugin's is the one the plugin mounts", sts: []func(*appsv1.StatefulSet){volume(emptyDir("kube-api-access-mine"))},
			unmet: []webhook.Reason{webhook.ReasonNoToken}, msg: []string{`emptyDir volume \"kube-api-access-mine\"`}, lookups: -1},
		{name: "a projected token for a foreign audience at the token path", sts: []func(*appsv1.StatefulSet){noAutomount, volume(projected("vault", kubeAPIAccess("vault")), at(saDir))},
			unmet: []webhook.Reason{webhook.ReasonNoToken}, msg: []string{`audience \"vault\"`}, lookups: -1},
		{name: "automount off and the token projected elsewhere", sts: []func(*appsv1.StatefulSet){noAutomount, volume(projected("tokens", kubeAPIAccess("")), at("/var/run/secrets/tokens"))},
			unmet: []webhook.Reason{webhook.ReasonNoToken}, msg: []string{"nothing is mounted at " + saDir + "/token"}, lookups: -1},
		{name: "automount off and a token without the cluster's CA", sts: []func(*appsv1.StatefulSet){noAutomount, volume(projected("tok", &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}), at(saDir))},
			unmet: []webhook.Reason{webhook.ReasonNoToken}, msg: []string{saDir + "/ca.crt"}, lookups: -1},
		{name: "a mount whose subPathExpr is decided at run time", sts: []func(*appsv1.StatefulSet){volume(projected("tok", kubeAPIAccess("")), corev1.VolumeMount{MountPath: saDir, SubPathExpr: "$(POD_NAME)"})},
			unmet: []webhook.Reason{webhook.ReasonNoToken}, msg: []string{"subPathExpr"}, lookups: -1},
		{name: "POD_NAMESPACE unset and a foreign namespace file: the Lease namespace cannot be told", sts: []func(*appsv1.StatefulSet){unsetEnv("POD_NAMESPACE"), volume(
			corev1.Volume{Name: "ns", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "elsewhere"}}}},
			corev1.VolumeMount{MountPath: saDir + "/namespace", SubPath: "namespace"})},
			unmet: []webhook.Reason{webhook.ReasonElectionUnknowable}, msg: []string{saDir + "/namespace"}, lookups: -1},

		// --- right answers ------------------------------------------------------------------
		{name: "automount off and the plugin's own three sources mounted at the path", sts: []func(*appsv1.StatefulSet){noAutomount, volume(projected("api", kubeAPIAccess("")), at(saDir))},
			allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "an emptyDir over a parent directory: the plugin's deeper mount still wins", sts: []func(*appsv1.StatefulSet){volume(emptyDir("run"), at("/var/run/secrets"))},
			allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "a token for another audience mounted elsewhere does not matter", sts: []func(*appsv1.StatefulSet){volume(projected("vault", kubeAPIAccess("vault")), at("/var/run/secrets/tokens"))},
			allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "an unarmed workload may mount whatever it likes there", sts: []func(*appsv1.StatefulSet){unarmedPod, volume(emptyDir("scratch"), at(saDir))},
			allowed: true, reason: webhook.ReasonUnarmed, lookups: 0},

		// --- Pods: the mounts as they are, after the plugin and every mutating webhook -----------
		{name: "a Pod as the plugin left it", input: func(t testing.TB) webhook.Input {
			return webhook.Input{Operation: admissionv1.Create, Object: workload(t, gvkPod, (barePod(sts(compliant()...), "writer-0")))}
		}, allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "a Pod whose token mount a mutating webhook replaced with an emptyDir", input: func(t testing.TB) webhook.Input {
			p := (barePod(sts(compliant()...), "writer-0"))
			p.Spec.Volumes = append(p.Spec.Volumes, emptyDir("scratch"))
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: saDir}}
			return webhook.Input{Operation: admissionv1.Create, Object: workload(t, gvkPod, p)}
		}, unmet: []webhook.Reason{webhook.ReasonNoToken}, msg: []string{`emptyDir volume \"scratch\"`}, lookups: -1},
		{name: "a Pod with no token mounted at all (no plugin ran)", input: func(t testing.TB) webhook.Input {
			p := barePod(sts(compliant()...), "writer-0")
			p.Spec.Volumes, p.Spec.Containers[0].VolumeMounts = nil, nil
			return webhook.Input{Operation: admissionv1.Create, Object: workload(t, gvkPod, p)}
		}, unmet: []webhook.Reason{webhook.ReasonNoToken}, msg: []string{"nothing is mounted at " + saDir + "/token"}, lookups: -1},
		{name: "an armed ephemeral container gets no token from the plugin", input: func(t testing.TB) webhook.Input {
			old := (pod(sts(wt.ServiceAccount(wt.WriterSA), wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "0")), wt.WriterName+"-0"))
			now := old.DeepCopy()
			now.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox",
				Env: []corev1.EnvVar{{Name: "NOETL_EHDB_FENCING", Value: "enforce"}, {Name: "NOETL_EHDB_ELECTION", Value: "true"}, {Name: "NOETL_EHDB_ELECTION_SHARD", Value: "0"}}}}}
			return webhook.Input{Operation: admissionv1.Update, Subresource: "ephemeralcontainers", Object: workload(t, gvkPod, now), Old: workload(t, gvkPod, old)}
		}, unmet: []webhook.Reason{webhook.ReasonNoToken, webhook.ReasonElectionUnknowable}, msg: []string{`ephemeral container \"debug\"`, "nothing is mounted at " + saDir + "/token", "reads " + saDir + "/namespace"}, lookups: -1},
		{name: "an armed ephemeral container that mounts the pod's token volume", input: func(t testing.TB) webhook.Input {
			old := (pod(sts(wt.ServiceAccount(wt.WriterSA), wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "0")), wt.WriterName+"-0"))
			now := old.DeepCopy()
			now.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox",
				Env:          []corev1.EnvVar{{Name: "NOETL_EHDB_FENCING", Value: "enforce"}, {Name: "NOETL_EHDB_ELECTION", Value: "true"}, {Name: "NOETL_EHDB_ELECTION_SHARD", Value: "0"}},
				VolumeMounts: []corev1.VolumeMount{{Name: "kube-api-access-x7k2p", MountPath: saDir, ReadOnly: true}}}}}
			return webhook.Input{Operation: admissionv1.Update, Subresource: "ephemeralcontainers", Object: workload(t, gvkPod, now), Old: workload(t, gvkPod, old)}
		}, allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
	}
	for _, rw := range rows {
		t.Run(rw.name, func(t *testing.T) { runRow(t, rw) })
	}
}

// TestTheElectionTalksToTheCheckedAPIServer: client-go's in-cluster configuration dials
// KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT, which the kubelet sets for the cluster's own
// API server unless the container's env or envFrom sets them (kubelet makeEnvironmentVariables).
func TestTheElectionTalksToTheCheckedAPIServer(t *testing.T) {
	secretFrom := func(prefix string) corev1.EnvFromSource {
		return corev1.EnvFromSource{Prefix: prefix, SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}}
	}
	rows := []row{
		{name: "KUBERNETES_SERVICE_HOST set in the armed container", sts: []func(*appsv1.StatefulSet){wt.SetEnv("KUBERNETES_SERVICE_HOST", "10.0.0.99")},
			unmet: []webhook.Reason{webhook.ReasonOtherAPIServer}, msg: []string{`KUBERNETES_SERVICE_HOST=\"10.0.0.99\"`}, lookups: -1},
		{name: "KUBERNETES_SERVICE_PORT from a ConfigMap the container reads", sts: []func(*appsv1.StatefulSet){envFrom(cmEnvFrom("net", ""))},
			cluster: func(r *wt.Resolver) {
				r.ConfigMaps = map[string]map[string]string{"net": {"KUBERNETES_SERVICE_PORT": "6443"}}
			},
			unmet: []webhook.Reason{webhook.ReasonOtherAPIServer}, msg: []string{"KUBERNETES_SERVICE_PORT"}, lookups: -1},
		{name: "KUBERNETES_SERVICE_HOST made of an envFrom prefix and a ConfigMap key", sts: []func(*appsv1.StatefulSet){envFrom(cmEnvFrom("net", "KUBERNETES_"))},
			cluster: func(r *wt.Resolver) {
				r.ConfigMaps = map[string]map[string]string{"net": {"SERVICE_HOST": "10.0.0.99"}}
			},
			unmet: []webhook.Reason{webhook.ReasonOtherAPIServer}, msg: []string{"KUBERNETES_SERVICE_HOST"}, lookups: -1},
		{name: "KUBERNETES_SERVICE_HOST emptied: client-go is then not in a cluster", sts: []func(*appsv1.StatefulSet){envVar(corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST"})},
			unmet: []webhook.Reason{webhook.ReasonOtherAPIServer}, lookups: -1},
		{name: "KUBERNETES_SERVICE_HOST from a Secret key", sts: []func(*appsv1.StatefulSet){envVar(secretKey("KUBERNETES_SERVICE_HOST", "net", "host"))},
			unmet: []webhook.Reason{webhook.ReasonOtherAPIServer}, lookups: -1},
		{name: "an envFrom Secret may set it: admitted, and said", sts: []func(*appsv1.StatefulSet){onOS(corev1.Linux), envFrom(secretFrom("")),
			wt.SetEnv("NOETL_EHDB_ELECTION_NAMESPACE", ns), wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "0")},
			allowed: true, reason: webhook.ReasonRequirementsMet, warn: []string{"KUBERNETES_SERVICE_HOST"}, lookups: -1},
		{name: "an envFrom Secret under a prefix cannot set it", sts: []func(*appsv1.StatefulSet){envFrom(secretFrom("DB_"))},
			allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "a reference to the kubelet's own variable is the kubelet's value", sts: []func(*appsv1.StatefulSet){wt.SetEnv("KUBERNETES_SERVICE_HOST", "$(KUBERNETES_SERVICE_HOST)")},
			allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "the same reference after a ConfigMap set the name is the ConfigMap's value", sts: []func(*appsv1.StatefulSet){envFrom(cmEnvFrom("net", "")), wt.SetEnv("KUBERNETES_SERVICE_HOST", "$(KUBERNETES_SERVICE_HOST)")},
			cluster: func(r *wt.Resolver) {
				r.ConfigMaps = map[string]map[string]string{"net": {"KUBERNETES_SERVICE_HOST": "10.0.0.99"}}
			},
			// The value is not quoted: it was read from a ConfigMap (Value.Read).
			unmet: []webhook.Reason{webhook.ReasonOtherAPIServer}, msg: []string{`KUBERNETES_SERVICE_HOST=(a value read from a ConfigMap)`}, lookups: -1},
		{name: "a --kubeconfig argument: its own client configuration is said", sts: []func(*appsv1.StatefulSet){container(func(c *corev1.Container) {
			c.Args = []string{"--metrics-addr=:9090", "--kubeconfig=/etc/writer/kubeconfig"}
		})}, allowed: true, reason: webhook.ReasonRequirementsMet, warn: []string{"--kubeconfig=/etc/writer/kubeconfig\": ehdb-writer then builds its client"}, lookups: -1},
		{name: "an unarmed container may point anywhere", sts: []func(*appsv1.StatefulSet){unarmedPod, wt.SetEnv("KUBERNETES_SERVICE_HOST", "10.0.0.99")},
			allowed: true, reason: webhook.ReasonUnarmed, lookups: 0},
		{name: "another container's override does not matter", sts: []func(*appsv1.StatefulSet){func(s *appsv1.StatefulSet) {
			s.Spec.Template.Spec.Containers = append(s.Spec.Template.Spec.Containers, corev1.Container{Name: "proxy", Image: "p",
				Env: []corev1.EnvVar{{Name: "KUBERNETES_SERVICE_HOST", Value: "127.0.0.1"}}})
		}}, allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
	}
	for _, rw := range rows {
		t.Run(rw.name, func(t *testing.T) { runRow(t, rw) })
	}
}

// TestConfigMapChangeVerifiesAReaderPodsOwner: a Pod armed by a ConfigMap edit at its next
// container start is exempt from the order check only by an owner the webhook verified, as on
// its own review: a Pod naming a StatefulSet that does not exist is order-checked.
func TestConfigMapChangeVerifiesAReaderPodsOwner(t *testing.T) {
	cmKind := metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	cm := func(fencing string) *corev1.ConfigMap {
		return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "flags", Namespace: ns},
			Data: map[string]string{"fencing": fencing}}
	}
	reader := pod(sts(wt.ServiceAccount(wt.WriterSA), wt.ElectionOn(), envVar(cmKey("NOETL_EHDB_FENCING", "flags", "fencing", false))), "ghost-9")
	reader.OwnerReferences[0].Name, reader.OwnerReferences[0].UID = "ghost", "ghost-uid" // no such StatefulSet
	cluster := goodCluster()
	h := &webhook.Handler{Resolver: cluster, Policy: webhook.Policy{RequireLiveLease: true}, Readers: fakeReaders(t, reader), Owners: fakeOwners{owners: map[string]runtime.Object{}}}
	srv := httptest.NewServer(webhook.NewHTTPHandler(h))
	t.Cleanup(srv.Close)
	_, out, raw := post(t, srv.URL, "application/json", configMapReview(t, admissionv1.Update, cmKind, cm("enforce"), cm("shadow")))
	if out.Response == nil || out.Response.Allowed {
		t.Fatalf("a ConfigMap edit arming a Pod with a forged owner was admitted: %s", raw)
	}
	if !strings.Contains(out.Response.Result.Message, "ehdb-shard-00000009 (shard 9) does not exist") {
		t.Fatalf("want the order check: %s", raw)
	}
}

// TestConfigMapChangeCannotRedirectAnArmedReader: the ConfigMap an armed writer reads its env from
// is reviewed on every change (no matchCondition), and an edit that makes the writer's election
// dial another API server is refused like the same value in the writer's own env. (configMapReview
// names the request "flags".)
func TestConfigMapChangeCannotRedirectAnArmedReader(t *testing.T) {
	cmKind := metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	cm := func(data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "flags", Namespace: ns}, Data: data}
	}
	reader := sts(append(compliant(), envFrom(cmEnvFrom("flags", "")))...)
	h := &webhook.Handler{Resolver: goodCluster(), Policy: webhook.Policy{RequireLiveLease: true}, Readers: fakeReaders(t, reader)}
	srv := httptest.NewServer(webhook.NewHTTPHandler(h))
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		name    string
		now     map[string]string
		allowed bool
	}{
		{"an unrelated key", map[string]string{"LOG_LEVEL": "debug"}, true},
		{"KUBERNETES_SERVICE_HOST added", map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.99"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, out, raw := post(t, srv.URL, "application/json", configMapReview(t, admissionv1.Update, cmKind, cm(tc.now), cm(map[string]string{})))
			if out.Response == nil || out.Response.Allowed != tc.allowed {
				t.Fatalf("allowed=%v, want %v: %s", out.Response != nil && out.Response.Allowed, tc.allowed, raw)
			}
			if !tc.allowed && !strings.Contains(out.Response.Result.Message, `KUBERNETES_SERVICE_HOST=(a value read from a ConfigMap)`) {
				t.Fatalf("want the API server named: %s", raw)
			}
		})
	}
}
