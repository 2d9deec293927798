package webhook_test

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/internal/electionenv"
	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// A running process keeps the environment of its start (webhook/started.go): a writer whose
// ConfigMap, or whose own annotation, was set from enforce to shadow still runs armed until it
// restarts, so unbinding its account under it fails its shard. Before the rule the guard judged
// every reader by what it would read now, and each row marked refused was admitted.
func TestRBACChangesJudgeWhatTheRunningProcessRead(t *testing.T) {
	started := now.Add(-time.Hour)
	running := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.NodeName = "node-1"
		p.CreationTimestamp = metav1.NewTime(started.Add(-10 * time.Minute))
		p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate,
			Time: &metav1.Time{Time: started.Add(-10 * time.Minute)}, FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{}}}`)}}}
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: wt.ContainerName,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(started)}}}}}
		return p
	}
	onLinux := func(s *appsv1.StatefulSet) { s.Spec.Template.Spec.OS = &corev1.PodOS{Name: corev1.Linux} }
	viaConfigMap := sts(append(compliant(), onLinux, unsetEnv("NOETL_EHDB_FENCING"), envFrom(cmEnvFrom("flags", "")))...)
	viaKey := sts(append(compliant(), onLinux, envVar(cmKey("NOETL_EHDB_FENCING", "flags", "fencing", false)))...)
	viaKey.UID = "u" // as pod() names its controller
	viaAnnotation := sts(append(compliant(), onLinux, envVar(corev1.EnvVar{Name: "NOETL_EHDB_FENCING", ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['noetl.io/fencing']"}}}))...)
	literal := sts(append(compliant(), onLinux, wt.SetEnv("NOETL_EHDB_FENCING", "shadow"), envFrom(cmEnvFrom("flags", "")))...)
	annotated := func(p *corev1.Pod, at time.Time) *corev1.Pod {
		p.Annotations = map[string]string{"noetl.io/fencing": "shadow"}
		p.ManagedFields = append(p.ManagedFields, metav1.ManagedFieldsEntry{Manager: "kubectl-annotate", Operation: metav1.ManagedFieldsOperationUpdate,
			Time: &metav1.Time{Time: at}, FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:annotations":{"f:noetl.io/fencing":{}}}}`)}})
		return p
	}
	shadowNow := map[string]map[string]string{"flags": {"NOETL_EHDB_FENCING": "shadow", "fencing": "shadow"}}
	changedAfter := map[string]time.Time{"flags": started.Add(10 * time.Minute)}
	changedBefore := map[string]time.Time{"flags": started.Add(-2 * time.Minute)}
	changedJustBefore := map[string]time.Time{"flags": started.Add(-20 * time.Second)} // within the kubelet's cache lag and clock skew
	notRunning := func(p *corev1.Pod) *corev1.Pod { p.Spec.NodeName = ""; p.Status = corev1.PodStatus{}; return p }
	unreported := func(p *corev1.Pod) *corev1.Pod { p.Status.ContainerStatuses = nil; return p }
	startedAt := func(p *corev1.Pod, at time.Time) *corev1.Pod {
		p.Status.ContainerStatuses[0].State.Running.StartedAt = metav1.NewTime(at)
		return p
	}
	deleting := func(p *corev1.Pod) *corev1.Pod {
		p.DeletionTimestamp = &metav1.Time{Time: now.Add(-time.Minute)}
		p.DeletionGracePeriodSeconds = ptr.To[int64](3600)
		return p
	}
	crashLooping := func(p *corev1.Pod) *corev1.Pod {
		p.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
		return p
	}
	setPod := func(s *appsv1.StatefulSet, ordinal string) *corev1.Pod { // as the StatefulSet controller names it
		p := pod(s, s.Name+"-"+ordinal)
		p.Spec.Hostname, p.Spec.Subdomain = p.Name, s.Spec.ServiceName
		return p
	}
	chartRB := roleBinding(chartRole, "Role", chartRole, saSubject(wt.WriterSA))

	cases := []struct {
		name       string
		readers    []any
		configMaps map[string]map[string]string
		changed    map[string]time.Time
		allowed    bool
		msg        []string
	}{
		{"a bare writer whose ConfigMap went to shadow after it started", []any{running(barePod(viaConfigMap, "w-0"))}, shadowNow, changedAfter, false,
			append(disarming, "as its process read it at its start cannot be known", `ConfigMap "flags" changed at`)},
		{"the StatefulSet's own Pod, judged through its set", []any{viaKey, running(setPod(viaKey, "0"))}, shadowNow, changedAfter, false,
			append(disarming, "StatefulSet noetl/"+wt.WriterName)},
		{"within a minute before its start", []any{running(barePod(viaConfigMap, "w-0"))}, shadowNow, changedJustBefore, false, disarming},
		{"a ConfigMap with no record of its changes", []any{running(barePod(viaConfigMap, "w-0"))}, shadowNow, nil, false, append(disarming, "no record of when it last changed")},
		{"its ConfigMap deleted under it", []any{running(barePod(viaKey, "w-0"))}, nil, nil, false, append(disarming, "has been deleted since")},
		{"a container the kubelet has not reported yet", []any{unreported(running(barePod(viaConfigMap, "w-0")))}, shadowNow, changedAfter, false, disarming},
		{"an annotation it reads set to shadow after it started", []any{annotated(running(barePod(viaAnnotation, "w-0")), started.Add(5*time.Minute))}, nil, nil, false,
			append(disarming, "comes from the Pod's labels or annotations")},
		// The eighteenth red team: an annotation removed, or its managedFields entry dropped by
		// hand, leaves no record; metadata is never trusted to date a change.
		{"an annotation it reads, with no record of a change since it started", []any{annotated(running(barePod(viaAnnotation, "w-0")), started.Add(-5*time.Minute))}, nil, nil, false, disarming},

		{"a start reported in the future (the node's clock ahead)", []any{startedAt(running(barePod(viaConfigMap, "w-0")), now.Add(3*time.Minute))}, shadowNow,
			map[string]time.Time{"flags": now.Add(-time.Minute)}, false, disarming},
		{"restarted since the ConfigMap changed", []any{running(barePod(viaConfigMap, "w-0"))}, shadowNow, changedBefore, true, nil},
		{"not running anywhere", []any{notRunning(running(barePod(viaConfigMap, "w-0")))}, shadowNow, changedAfter, true, nil},
		// The nineteenth red team: the kubelet reports a start only after it (SyncPod hands the
		// status over first; the PLEG relists each second), so a container reported waiting may be
		// running already; and a Pod in graceful deletion runs until its containers stop.
		{"reported waiting: the report trails the start", []any{crashLooping(running(barePod(viaConfigMap, "w-0")))}, shadowNow, changedAfter, false, disarming},
		{"in graceful deletion, still running", []any{deleting(running(barePod(viaConfigMap, "w-0")))}, shadowNow, changedAfter, false, disarming},
		{"fencing fixed to a literal the ConfigMap cannot replace", []any{running(barePod(literal, "w-0"))}, shadowNow, changedAfter, true, nil},
		{"the StatefulSet with no Pod running", []any{viaKey}, shadowNow, changedAfter, true, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cluster := rbacCluster()
			cluster.ConfigMaps, cluster.ConfigMapChanged = tc.configMaps, tc.changed
			h := &webhook.Handler{Resolver: cluster, Policy: webhook.Policy{RequireLiveLease: true}, Accounts: fakeReaders(t, tc.readers...), Clock: clocktesting.NewFakePassiveClock(now)}
			srv := httptest.NewServer(webhook.NewHTTPHandler(h))
			t.Cleanup(srv.Close)
			_, out, raw := post(t, srv.URL, "application/json", rbacReview(t, admissionv1.Delete, rbKind, chartRole, nil, chartRB))
			if out.Response == nil || out.Response.Allowed != tc.allowed {
				t.Fatalf("deleting the writer's RoleBinding: allowed=%v, want %v: %s", out.Response != nil && out.Response.Allowed, tc.allowed, raw)
			}
			for _, m := range tc.msg {
				if !strings.Contains(out.Response.Result.Message, m) {
					t.Errorf("the refusal does not say %q:\n%s", m, out.Response.Result.Message)
				}
			}
		})
	}
}

// The webhook's watch keeps of a Pod only what the rule reads, and judges it the same.
func TestTheWatchKeepsWhenAPodsProcessesStarted(t *testing.T) {
	p := pod(sts(compliant()...), wt.WriterName+"-0")
	p.Spec.NodeName = "node-1"
	at := metav1.NewTime(now.Add(-time.Hour))
	p.ManagedFields = []metav1.ManagedFieldsEntry{
		{Manager: "kubectl", Time: &metav1.Time{Time: now.Add(-2 * time.Hour)}, FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:annotations":{}}}`)}},
		{Manager: "kubelet", Subresource: "status", Time: &metav1.Time{Time: now}, FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{}}`)}},
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady}}, ContainerStatuses: []corev1.ContainerStatus{{
		Name: wt.ContainerName, Image: "x", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at}}}}}
	before, err := webhook.WorkloadOf(p.DeepCopy(), ns)
	if err != nil {
		t.Fatal(err)
	}
	stripped, err := webhook.StripForReaders(p.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	after, err := webhook.WorkloadOf(stripped.(*corev1.Pod), ns)
	if err != nil {
		t.Fatal(err)
	}
	if !before.RunningSince.Equal(at.Time) || !after.RunningSince.Equal(at.Time) {
		t.Errorf("running since %v (stripped: %v), want %v", before.RunningSince, after.RunningSince, at.Time)
	}
	if s := stripped.(*corev1.Pod); len(s.Status.Conditions) != 0 || s.Status.ContainerStatuses[0].Image != "" || s.ManagedFields != nil {
		t.Errorf("the watch keeps more of the status than the rule reads: %+v", s)
	}
}

// The eighteenth red team dated nothing: a key removed from the ConfigMap of a running writer
// (a removal stamps no managedFields time), or its managedFields rewritten to drop the entry of an
// enforce -> shadow edit, and the RoleBinding delete after it was admitted under a process that
// still held enforce. While a container that reads a key that matters runs, the ConfigMap review
// refuses every change that leaves no record: before, each row marked refused was admitted.
func TestConfigMapChangesUnderARunningReaderLeaveARecord(t *testing.T) {
	started := now.Add(-time.Hour)
	onLinux := func(s *appsv1.StatefulSet) { s.Spec.Template.Spec.OS = &corev1.PodOS{Name: corev1.Linux} }
	reader := barePod(sts(append(compliant(), onLinux, unsetEnv("NOETL_EHDB_FENCING"), envFrom(cmEnvFrom("fence", "")))...), "w-0")
	running := reader.DeepCopy()
	running.Spec.NodeName = "node-1"
	running.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: wt.ContainerName,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(started)}}}}}
	chained := running.DeepCopy()
	chained.Spec.Containers[0].Env = append(chained.Spec.Containers[0].Env[:0:0], corev1.EnvVar{Name: "B", ValueFrom: &corev1.EnvVarSource{
		ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "fence"}, Key: "b", Optional: ptr.To(true)}}},
		corev1.EnvVar{Name: "A", Value: "$(B)"}, corev1.EnvVar{Name: "NOETL_EHDB_FENCING", Value: "$(A)"})
	chained.Spec.Containers[0].Env = append(chained.Spec.Containers[0].Env, running.Spec.Containers[0].Env...)
	waiting := running.DeepCopy()
	waiting.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}
	entry := func(manager string, at time.Time) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, Time: &metav1.Time{Time: at}}
	}
	cm := func(data map[string]string, fields ...metav1.ManagedFieldsEntry) *corev1.ConfigMap {
		return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: "fence", Namespace: ns, CreationTimestamp: metav1.NewTime(started.Add(-time.Hour)), ManagedFields: fields}, Data: data}
	}
	created, edited := entry("kubectl-create", started.Add(-time.Hour)), entry("kubectl-edit", started.Add(10*time.Minute))
	armed := map[string]string{"NOETL_EHDB_FENCING": "enforce", "LOG_LEVEL": "info"}
	cmKind := metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	for _, tc := range []struct {
		name     string
		reader   *corev1.Pod
		op       admissionv1.Operation
		obj, old *corev1.ConfigMap
		allowed  bool
		msg      string
	}{
		{"the fencing key removed", running, admissionv1.Update, cm(map[string]string{"LOG_LEVEL": "info"}, created), cm(armed, created), false, "refusing to remove keys"},
		{"the ConfigMap deleted", running, admissionv1.Delete, nil, cm(armed, created), false, "refusing to delete ConfigMap"},
		{"the record of the last change moved back", running, admissionv1.Update, cm(map[string]string{"NOETL_EHDB_FENCING": "shadow", "LOG_LEVEL": "info"}, created),
			cm(map[string]string{"NOETL_EHDB_FENCING": "shadow", "LOG_LEVEL": "info"}, created, edited), false, "move back the record"},
		{"the record reset", running, admissionv1.Update, cm(armed), cm(armed, created), false, "move back the record"},

		{"set to shadow: dated", running, admissionv1.Update, cm(map[string]string{"NOETL_EHDB_FENCING": "shadow", "LOG_LEVEL": "info"}, created, edited), cm(armed, created), true, ""},
		{"a key that does not matter removed", running, admissionv1.Update, cm(map[string]string{"NOETL_EHDB_FENCING": "enforce"}, created), cm(armed, created), true, ""},
		// The twenty-third red team: a key that reaches the switch through two references.
		{"a key the switch reads through a chain of references removed", chained, admissionv1.Update, cm(map[string]string{"x": "1"}, created),
			cm(map[string]string{"b": "enforce", "x": "1"}, created), false, "refusing to remove keys"},
		// The twenty-second red team: the lease duration's key could never be removed under a
		// running reader, restart or not; the RBAC review never dates it.
		{"a key the running rule does not judge removed", running, admissionv1.Update, cm(armed, created),
			cm(map[string]string{"NOETL_EHDB_FENCING": "enforce", "LOG_LEVEL": "info", "NOETL_EHDB_ELECTION_LEASE_SECS": "30"}, created), true, ""},
		{"the fencing key removed while the reader is reported waiting", waiting, admissionv1.Update, cm(map[string]string{"LOG_LEVEL": "info"}, created), cm(armed, created), false, "refusing to remove keys"},
		{"the fencing key removed while no reader runs", reader, admissionv1.Update, cm(map[string]string{"LOG_LEVEL": "info"}, created), cm(armed, created), true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &webhook.Handler{Resolver: goodCluster(), Policy: webhook.Policy{RequireLiveLease: true}, Readers: fakeReaders(t, tc.reader), Clock: clocktesting.NewFakePassiveClock(now)}
			srv := httptest.NewServer(webhook.NewHTTPHandler(h))
			t.Cleanup(srv.Close)
			var obj runtime.Object
			if tc.obj != nil {
				obj = tc.obj
			}
			body := wt.Review(t, tc.op, cmKind, obj, tc.old)
			body = []byte(strings.Replace(string(body), `"name":"`+wt.WriterName+`"`, `"name":"fence"`, 1))
			_, out, raw := post(t, srv.URL, "application/json", body)
			if out.Response == nil || out.Response.Allowed != tc.allowed {
				t.Fatalf("allowed=%v, want %v: %s", out.Response != nil && out.Response.Allowed, tc.allowed, raw)
			}
			if !tc.allowed && !strings.Contains(out.Response.Result.Message, tc.msg) {
				t.Errorf("the refusal does not say %q: %s", tc.msg, out.Response.Result.Message)
			}
		})
	}
}

// The election reads its namespace and shard at its start too. A writer whose
// NOETL_EHDB_ELECTION_NAMESPACE comes from a ConfigMap, edited to another namespace where its
// account is also bound, still elects in the old one until it restarts; the RBAC review judged it
// where it would elect next, so deleting the old namespace's RoleBinding was admitted and the
// running writer lost its Lease. Every variable the election reads, not only the fencing switch,
// is judged as the running process read it: each row marked refused was admitted before.
func TestRBACChangesJudgeWhereTheRunningProcessElects(t *testing.T) {
	started := now.Add(-time.Hour)
	onLinux := func(s *appsv1.StatefulSet) { s.Spec.Template.Spec.OS = &corev1.PodOS{Name: corev1.Linux} }
	running := func(s *appsv1.StatefulSet) *corev1.Pod {
		p := barePod(s, "w-0")
		p.Spec.NodeName = "node-1"
		p.CreationTimestamp = metav1.NewTime(started.Add(-10 * time.Minute))
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: wt.ContainerName,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(started)}}}}}
		return p
	}
	byKey := sts(append(compliant(), onLinux, envVar(cmKey("NOETL_EHDB_ELECTION_NAMESPACE", "election", "namespace", false)))...)
	byEnvFrom := sts(append(compliant(), onLinux, envFrom(cmEnvFrom("election", "")))...)
	byReference := sts(append(compliant(), onLinux, envVar(cmKey("LEASE_NS", "election", "namespace", false)),
		wt.SetEnv("NOETL_EHDB_ELECTION_NAMESPACE", "$(LEASE_NS)"))...)
	elsewhere := map[string]map[string]string{"election": {"namespace": "other", "NOETL_EHDB_ELECTION_NAMESPACE": "other", "shard": "1"}}
	changedAfter := map[string]time.Time{"election": started.Add(10 * time.Minute)}
	changedBefore := map[string]time.Time{"election": started.Add(-2 * time.Minute)}
	chartRB := roleBinding(chartRole, "Role", chartRole, saSubject(wt.WriterSA))
	deleteBinding := func(t *testing.T) []byte { return rbacReview(t, admissionv1.Delete, rbKind, chartRole, nil, chartRB) }
	// A Role that grants get and update on each shard's Lease by name, narrowed to shard 1's: the
	// writer whose shard key moved from 0 to 1 still holds shard 0's Lease.
	byShard := sts(append(compliant(), onLinux, envVar(cmKey("NOETL_EHDB_ELECTION_SHARD", "election", "shard", false)))...)
	leaseRules := func(names ...string) []rbacv1.PolicyRule {
		return []rbacv1.PolicyRule{
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "update", webhook.VerbElect}, ResourceNames: names},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create", "list", "watch"}},
		}
	}
	byLabel := sts(append(compliant(), onLinux, envVar(corev1.EnvVar{Name: "NOETL_EHDB_ELECTION_SHARD", ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['apps.kubernetes.io/pod-index']"}}}))...)
	byName := mkRole(chartRole, leaseRules(electionenv.LeaseName(0), electionenv.LeaseName(1))...)
	narrowed := mkRole(chartRole, leaseRules(electionenv.LeaseName(1))...)
	narrow := func(t *testing.T) []byte {
		return rbacReview(t, admissionv1.Update, roleKind, chartRole, narrowed, byName)
	}
	widened := mkRole(chartRole, append(leaseRules(electionenv.LeaseName(0), electionenv.LeaseName(1)), rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}})...)
	widen := func(t *testing.T) []byte {
		return rbacReview(t, admissionv1.Update, roleKind, chartRole, widened, byName)
	}
	starred := mkRole(chartRole, append(leaseRules(electionenv.LeaseName(0), electionenv.LeaseName(1)),
		rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"*"}, ResourceNames: []string{electionenv.LeaseName(0)}})...)
	starOld := func(t *testing.T) []byte {
		return rbacReview(t, admissionv1.Update, roleKind, chartRole, starred, byName)
	}
	var byNameCluster func(c *wt.Resolver)
	guardedByName := func(c *wt.Resolver) {
		byNameCluster(c)
		c.LeaseGuards = map[string]webhook.LeaseGuardFact{ns: {Name: "ehdb-election-lease-guard", Verb: webhook.VerbElect}}
	}
	byNameCluster = func(c *wt.Resolver) {
		c.Roles = []rbacv1.Role{*byName}
		c.Allowed = nil
		c.Grant(ns, wt.WriterSA, ns, "create", "list", "watch")
		for _, s := range []uint32{0, 1} {
			c.GrantNamed(ns, wt.WriterSA, ns, electionenv.LeaseName(s), "get", "update", webhook.VerbElect)
		}
	}
	for _, tc := range []struct {
		name    string
		reader  *corev1.Pod
		changed map[string]time.Time
		review  func(*testing.T) []byte
		cluster func(*wt.Resolver)
		allowed bool
		msg     []string // nil: the ConfigMap's
	}{
		{"the namespace key moved after it started", running(byKey), changedAfter, deleteBinding, nil, false, nil},
		{"the namespace moved by its envFrom ConfigMap", running(byEnvFrom), changedAfter, deleteBinding, nil, false, nil},
		{"the namespace moved through a $(reference)", running(byReference), changedAfter, deleteBinding, nil, false, nil},
		{"the shard moved, and its old Lease narrowed away by name", running(byShard), changedAfter, narrow, byNameCluster, false, nil},
		{"restarted since the move", running(byKey), changedBefore, deleteBinding, nil, true, nil},
		{"the shard moved, and the Role widened: nothing taken", running(byShard), changedAfter, widen, byNameCluster, true, nil},
		// The twenty-second red team: every verb granted on the old shard's Lease, by name, which
		// the lease guard refuses an account for.
		{"the shard moved, and its old Lease granted every verb", running(byShard), changedAfter, starOld, guardedByName, false,
			[]string{"NOETL_EHDB_ELECTION_SHARD as its process read it at its start cannot be known", "grants ServiceAccount noetl/noetl-cmdbus-writer every verb on leases in noetl"}},
		// The twenty-first red team: a shard from the pod-index label was refused with "restart
		// it", which dates nothing a label holds; the way out is the removal order.
		{"the shard from a label, its Lease narrowed away by name", running(byLabel), nil, narrow, byNameCluster, false,
			[]string{"NOETL_EHDB_ELECTION_SHARD as its process read it at its start cannot be known", "labels or annotations", "set NOETL_EHDB_FENCING=shadow and roll it out before this change"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cluster := rbacCluster()
			cluster.Grant(ns, wt.WriterSA, "other", "get", "list", "watch", "create", "update")
			cluster.ConfigMaps, cluster.ConfigMapChanged = elsewhere, tc.changed
			if tc.cluster != nil {
				tc.cluster(cluster)
			}
			h := &webhook.Handler{Resolver: cluster, Policy: webhook.Policy{RequireLiveLease: true, LeaseNamespaces: []string{ns, "other"}},
				Accounts: fakeReaders(t, tc.reader), Clock: clocktesting.NewFakePassiveClock(now)}
			srv := httptest.NewServer(webhook.NewHTTPHandler(h))
			t.Cleanup(srv.Close)
			_, out, raw := post(t, srv.URL, "application/json", tc.review(t))
			if out.Response == nil || out.Response.Allowed != tc.allowed {
				t.Fatalf("an RBAC change under a writer that elected elsewhere at its start: allowed=%v, want %v: %s", out.Response != nil && out.Response.Allowed, tc.allowed, raw)
			}
			if testing.Verbose() && !tc.allowed {
				t.Log(out.Response.Result.Message)
			}
			if !tc.allowed {
				msg := tc.msg
				if msg == nil {
					msg = []string{"as its process read it at its start cannot be known", `ConfigMap "election" changed at`, "restart it"}
				}
				for _, m := range msg {
					if !strings.Contains(out.Response.Result.Message, m) {
						t.Errorf("the refusal does not say %q:\n%s", m, out.Response.Result.Message)
					}
				}
			}
		})
	}
}
