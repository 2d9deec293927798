package charttest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// TestRedTeamManySubjectsCannotHoldTheGuard replays the twenty-fifth red team (team B #1) on the
// real API server: a running armed writer whose lease verbs come through ClusterRole edit (its
// own Role grants only the election verb); a namespace admin binds edit to 60,000 made-up
// accounts in two RoleBindings; then a careless cluster admin takes the lease rule from
// system:aggregate-to-edit, which edit aggregates. The webhook took 20 s over that change, the API
// server stopped waiting at 5 s and the clusterrbac entry's Ignore admitted it, and the writer's
// renewals were refused 11 s later. The guard now judges it while the API server waits: refused.
func TestRedTeamManySubjectsCannotHoldTheGuard(t *testing.T) {
	rt := newRedTeam(t)
	ctx := context.Background()
	cs := rt.cs
	rt.liveShard0(t)
	const account = "edit-writer"
	if _, err := cs.CoreV1().ServiceAccounts(rt.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: account}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().Roles(rt.ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: account},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{webhook.VerbElect}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bind := func(name, kind, role string, subjects ...rbacv1.Subject) {
		t.Helper()
		if _, err := cs.RbacV1().RoleBindings(rt.ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: role}, Subjects: subjects}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("RoleBinding %s: %v", name, err)
		}
	}
	bind(account, "Role", account, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: account})
	bind(account+"-edit", "ClusterRole", "edit", rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: account})
	for j := range 2 {
		subjects := make([]rbacv1.Subject, 30000)
		for i := range subjects {
			subjects[i] = rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: fmt.Sprintf("e%d%05d", j, i)}
		}
		bind(fmt.Sprintf("big-edit-%d", j), "ClusterRole", "edit", subjects...)
	}
	spec := rt.writer("w", wt.ServiceAccount(account), wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "0")).Spec.Template.Spec
	spec.NodeName = "node-1"
	var p *corev1.Pod
	err := answerOnce(30*time.Second, func(err error) bool { return err == nil }, func(ctx context.Context) error {
		var err error
		p, err = cs.CoreV1().Pods(rt.ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w-0"}, Spec: spec}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("the armed writer as %s (its lease verbs through edit): %v", account, err)
	}
	reportStarted(t, rt, p.Name, &spec.Containers[0], time.Now())

	piece, err := cs.RbacV1().ClusterRoles().Get(ctx, "system:aggregate-to-edit", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	narrowed := piece.DeepCopy()
	narrowed.Rules = slices.DeleteFunc(narrowed.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "leases") })
	if len(narrowed.Rules) == len(piece.Rules) {
		t.Fatalf("system:aggregate-to-edit grants nothing on leases: %+v", piece.Rules)
	}
	err = answerOnce(10*time.Second, func(err error) bool { return err != nil }, func(ctx context.Context) error {
		_, err := cs.RbacV1().ClusterRoles().Update(ctx, narrowed, dryUpdate)
		return err
	})
	disarmRefused(t, "the lease rule taken from system:aggregate-to-edit under 60,000 subjects of edit", err, "Pod "+rt.ns+"/w-0")
}

// TestRedTeamAdoptedWithoutTheOwnersOS replays the twenty-fifth red team (team A #1) on the real
// API server, with the StatefulSet controller adopting: a set whose template pins its Pods to
// Linux (spec.os) and reads its environment from a ConfigMap adopts a Pod made by hand without the
// pin. On a Windows node that Pod reads a key noetl_ehdb_fencing as the fencing switch, which on
// Linux is another variable. Adding that key was judged on the set alone (unarmed) and admitted;
// the Pod, armed, runs as an account with no lease access. Refused now, naming the Pod.
func TestRedTeamAdoptedWithoutTheOwnersOS(t *testing.T) {
	rt := newRedTeam(t)
	ctx := context.Background()
	cs := rt.cs
	rt.liveShard0(t)
	const account = "plain25"
	if _, err := cs.CoreV1().ServiceAccounts(rt.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: account}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cms := cs.CoreV1().ConfigMaps(rt.ns)
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "os25"}, Data: map[string]string{"LOG_LEVEL": "info"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	set := rt.writer("os25", wt.ServiceAccount(account), func(s *appsv1.StatefulSet) {
		s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
		s.Spec.Template.Spec.OS = &corev1.PodOS{Name: corev1.Linux}
		c := &s.Spec.Template.Spec.Containers[0]
		c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "NOETL_EHDB_FENCING" })
		c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "os25"}}})
	})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "os25-0", Labels: set.Spec.Template.Labels}, Spec: *set.Spec.Template.Spec.DeepCopy()}
	pod.Spec.Hostname, pod.Spec.Subdomain, pod.Spec.OS = "os25-0", set.Spec.ServiceName, nil
	if _, err := cs.CoreV1().Pods(rt.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the unarmed Pod: %v", err)
	}
	if _, err := cs.AppsV1().StatefulSets(rt.ns).Create(ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the unarmed set: %v", err)
	}
	waitFor(t, 60*time.Second, "the StatefulSet controller adopting os25-0", func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(rt.ns).Get(ctx, "os25-0", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ref := metav1.GetControllerOf(p)
		return ref != nil && ref.Kind == "StatefulSet" && ref.Name == "os25", nil
	})
	var err error
	waitFor(t, 30*time.Second, "the guard refusing the key only a Windows node reads as the switch", func(ctx context.Context) (bool, error) {
		cm, gerr := cms.Get(ctx, "os25", metav1.GetOptions{})
		if gerr != nil {
			return false, gerr
		}
		cm.Data["noetl_ehdb_fencing"] = "enforce"
		_, err = cms.Update(ctx, cm, dryUpdate)
		return err != nil, nil
	})
	if !strings.Contains(err.Error(), "denied the request") || !strings.Contains(err.Error(), "os25-0") || !strings.Contains(err.Error(), account) {
		t.Errorf("arming the adopted Pod: %v; want the guard to refuse it, naming the Pod and its account", err)
	}
}

// TestRedTeamALabelThatClaimsLinux replays red team F of stop 30 on the real API server: a bare
// Pod without spec.os, its lower-case noetl_ehdb_fencing read from a label (off), no election;
// then one label edit sets the label to enforce and adds kubernetes.io/os=linux. The guard took
// the label for proof of Linux, where noetl_ehdb_fencing is another variable, and admitted the
// edit; but the kubelet checks that label only when it admits the Pod, so on a Windows node the
// next container start reads the switch as enforce, with no election. Refused now.
func TestRedTeamALabelThatClaimsLinux(t *testing.T) {
	rt := newRedTeam(t)
	ctx := context.Background()
	pods := rt.cs.CoreV1().Pods(rt.ns)
	set := rt.writer("oslabel30")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "oslabel30-9", Labels: map[string]string{"f": "off"}}, Spec: *set.Spec.Template.Spec.DeepCopy()}
	c := &pod.Spec.Containers[0]
	c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "NOETL_EHDB_FENCING" || e.Name == "NOETL_EHDB_ELECTION" })
	c.Env = append(c.Env, corev1.EnvVar{Name: "noetl_ehdb_fencing", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['f']"}}})
	pod.Spec.OS, pod.Spec.NodeSelector = nil, nil
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the Pod, its switch off: %v", err)
	}
	created.Labels = map[string]string{"f": "enforce", corev1.LabelOSStable: "linux"}
	_, err = pods.Update(ctx, created, dryUpdate)
	if err == nil || !strings.Contains(err.Error(), "denied the request") || !strings.Contains(err.Error(), "election is not enabled") {
		t.Fatalf("the label edit arming it and claiming Linux: %v; want the guard to refuse it (the election is off)", err)
	}
}

// TestRedTeamArmedRevisionUnderATemplateWithoutTheSwitch replays red team E of stop 29 (#2) on the
// real API server: a StatefulSet created armed at replicas 0 (its order check deferred), then one
// update to replicas 1 under a partition above it, with the fencing variable dropped from its
// template. The update never reached the webhook (the entry's matchCondition looked at the new
// template only), and the controller made the pod from the armed current revision. The update is
// sent now (its old template could arm) and judged for what the revision runs: refused, on a shard
// whose Lease does not exist.
func TestRedTeamArmedRevisionUnderATemplateWithoutTheSwitch(t *testing.T) {
	rt := newRedTeam(t)
	ctx := context.Background()
	sets := rt.cs.AppsV1().StatefulSets(rt.ns)
	set := rt.writer("drop", func(s *appsv1.StatefulSet) { s.Spec.Replicas = ptr.To[int32](0) })
	if _, err := sets.Create(ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the armed set at replicas 0 (its order check deferred): %v", err)
	}
	waitFor(t, 60*time.Second, "the controller to record the set's revision", func(ctx context.Context) (bool, error) {
		got, err := sets.Get(ctx, set.Name, metav1.GetOptions{})
		return err == nil && got.Status.CurrentRevision != "", err
	})
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		got, err := sets.Get(ctx, set.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		c := &got.Spec.Template.Spec.Containers[0]
		c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "NOETL_EHDB_FENCING" })
		got.Spec.Replicas = ptr.To[int32](1)
		got.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
			RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To[int32](1)}}
		_, err = sets.Update(ctx, got, metav1.UpdateOptions{})
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "current revision") || !strings.Contains(err.Error(), "(shard 0) does not exist") {
		t.Fatalf("the update dropping the switch under a partition: %v; want it refused for ordinal 0 of the armed current revision", err)
	}
}

// TestRedTeamTheKubeletsConfigSource replays red team I of stop 31 on the real API server: a
// Deployment whose election namespace comes from its Pods' kubernetes.io/config.source annotation,
// written as the release namespace (where shard 0 is live). The kubelet sets that annotation to
// "api" on the copy of every Pod it runs, which is the copy the downward API reads, so the process
// elects in namespace "api", where its account may not write Leases, with its fence armed. The
// guard took the object's value and admitted it (for real, the controllers then made the Pod).
func TestRedTeamTheKubeletsConfigSource(t *testing.T) {
	rt := newRedTeam(t)
	rt.liveShard0(t)
	set := rt.writer("configsource", wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "0"))
	set.Spec.Template.Annotations = map[string]string{"kubernetes.io/config.source": rt.ns}
	c := &set.Spec.Template.Spec.Containers[0]
	c.Env = append(c.Env, corev1.EnvVar{Name: "NOETL_EHDB_ELECTION_NAMESPACE", ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['kubernetes.io/config.source']"}}})
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: set.Name}, Spec: appsv1.DeploymentSpec{Selector: set.Spec.Selector, Template: set.Spec.Template}}
	_, err := rt.cs.AppsV1().Deployments(rt.ns).Create(context.Background(), d, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "denied the request") || !strings.Contains(err.Error(), "namespace api") {
		t.Fatalf("the Deployment electing where config.source says: %v; want the guard to refuse it (the kubelet's value is \"api\")", err)
	}
}
