package charttest

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// TestRedTeamAdoptedCredentials replays on the real API server, with the StatefulSet controller
// adopting, what this session found (issue 17, class 2): a Pod made by hand with another
// account's token mounted where client-go reads it, adopted by a correct writer StatefulSet, was
// armed by a ConfigMap edit judged on the set's credentials alone.
func TestRedTeamAdoptedCredentials(t *testing.T) {
	rt := newRedTeam(t)
	ctx := context.Background()
	cs := rt.cs
	rt.liveShard0(t)
	cms := cs.CoreV1().ConfigMaps(rt.ns)
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "mode9"}, Data: map[string]string{"fencing": "shadow"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	set := rt.writer("tok9", func(s *appsv1.StatefulSet) {
		// OnDelete: the controller adopts the Pod and leaves it as it is.
		s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
		c := &s.Spec.Template.Spec.Containers[0]
		for i := range c.Env {
			if c.Env[i].Name == "NOETL_EHDB_FENCING" {
				c.Env[i] = corev1.EnvVar{Name: "NOETL_EHDB_FENCING", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "mode9"}, Key: "fencing"}}}
			}
		}
	})
	// The Pod the set will adopt: its name, hostname and labels, its account, and a Secret holding
	// another account's token mounted at the token path (so the plugin adds no token of its own).
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "tok9-0", Labels: set.Spec.Template.Labels}, Spec: *set.Spec.Template.Spec.DeepCopy()}
	pod.Spec.Hostname, pod.Spec.Subdomain = "tok9-0", set.Spec.ServiceName
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "stolen", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "default-token"}}})
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "stolen", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"})
	if _, err := cs.CoreV1().Pods(rt.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the unarmed Pod: %v", err)
	}
	if _, err := cs.AppsV1().StatefulSets(rt.ns).Create(ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the unarmed set: %v", err)
	}
	waitFor(t, 60*time.Second, "the StatefulSet controller adopting tok9-0", func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(rt.ns).Get(ctx, "tok9-0", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ref := metav1.GetControllerOf(p)
		return ref != nil && ref.Kind == "StatefulSet" && ref.Name == "tok9", nil
	})
	var err error
	waitFor(t, 30*time.Second, "the guard refusing to arm the adopted Pod", func(ctx context.Context) (bool, error) {
		cm, gerr := cms.Get(ctx, "mode9", metav1.GetOptions{})
		if gerr != nil {
			return false, gerr
		}
		cm.Data["fencing"] = "enforce"
		_, err = cms.Update(ctx, cm, dryUpdate)
		return err != nil, nil
	})
	if !strings.Contains(err.Error(), "denied the request") || !strings.Contains(err.Error(), "tok9-0") || !strings.Contains(err.Error(), "cannot authenticate") {
		t.Errorf("arming the adopted Pod: %v; want the guard to refuse it for its credentials, naming the Pod", err)
	}
}

// TestRedTeamEphemeralRelabel replays the ninth red team's relabel (issue 17, class 4): a Pod armed
// only in an ephemeral container that reads its election from a label. The label edit turning the
// election off never reached the webhook: the Pod entry's matchCondition looked at containers and
// initContainers only. The ephemeral container had not started (a Pod still pending, an image
// still pulling), so the kubelet would start it with the election off.
func TestRedTeamEphemeralRelabel(t *testing.T) {
	rt := newRedTeam(t)
	ctx := context.Background()
	pods := rt.cs.CoreV1().Pods(rt.ns)
	rt.liveShard0(t)
	p, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "eph9-0", Labels: map[string]string{"e": "true"}},
		Spec: corev1.PodSpec{ServiceAccountName: "noetl-cmdbus-writer", Containers: []corev1.Container{{Name: "app", Image: "busybox"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the unarmed Pod: %v", err)
	}
	token := ""
	for _, v := range p.Spec.Volumes {
		if strings.HasPrefix(v.Name, "kube-api-access-") {
			token = v.Name
		}
	}
	p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "armed", Image: "busybox",
		Env: []corev1.EnvVar{{Name: "NOETL_EHDB_FENCING", Value: "enforce"},
			{Name: "NOETL_EHDB_ELECTION", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['e']"}}},
			{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}},
		VolumeMounts: []corev1.VolumeMount{{Name: token, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}}}}}
	if _, err := pods.UpdateEphemeralContainers(ctx, p.Name, p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("an armed ephemeral container with its election on, its account's token and shard 0 live: %v", err)
	}
	p, err = pods.Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Labels["e"] = "false"
	_, err = pods.Update(ctx, p, dryUpdate)
	if err == nil || !strings.Contains(err.Error(), "denied the request") || !strings.Contains(err.Error(), `ephemeral container \"armed\"`) && !strings.Contains(err.Error(), `ephemeral container "armed"`) {
		t.Errorf("the label edit turning the ephemeral container's election off: %v; want the guard to refuse it", err)
	}
}

// TestRedTeamBindingLabels replays the ninth red team's binding (issue 17, class 4) on the real API
// server: binding an armed Pod with a Binding whose label turns off the election the Pod reads from
// that label. Binding copies the Binding's labels onto the Pod, and the webhook saw no binding.
func TestRedTeamBindingLabels(t *testing.T) {
	rt := newRedTeam(t)
	ctx := context.Background()
	pods := rt.cs.CoreV1().Pods(rt.ns)
	rt.liveShard0(t)
	w := rt.writer("bind9", func(s *appsv1.StatefulSet) {
		c := &s.Spec.Template.Spec.Containers[0]
		for i := range c.Env {
			if c.Env[i].Name == "NOETL_EHDB_ELECTION" {
				c.Env[i] = corev1.EnvVar{Name: "NOETL_EHDB_ELECTION", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['e']"}}}
			}
		}
	})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bind9-0", Labels: map[string]string{"e": "true"}}, Spec: w.Spec.Template.Spec}
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the armed Pod with its election on and shard 0 live: %v", err)
	}
	bind := func(labels map[string]string) error {
		return pods.Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "bind9-0", Labels: labels}, Target: corev1.ObjectReference{Kind: "Node", Name: "node-9"}},
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	}
	var err error
	waitFor(t, 30*time.Second, "the guard refusing the binding", func(ctx context.Context) (bool, error) {
		err = bind(map[string]string{"e": "false"})
		return err != nil, nil
	})
	if !strings.Contains(err.Error(), "denied the request") || !strings.Contains(err.Error(), "election is not enabled") {
		t.Errorf("a Binding whose label turns the election off: %v; want the guard to refuse it", err)
	}
	// The older bindings resource binds the same way (the tenth red team's path around it).
	err = rt.cs.CoreV1().RESTClient().Post().Namespace(rt.ns).Resource("bindings").Param("dryRun", metav1.DryRunAll).
		Body(&corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "bind9-0", Labels: map[string]string{"e": "false"}}, Target: corev1.ObjectReference{Kind: "Node", Name: "node-9"}}).Do(ctx).Error()
	if err == nil || !strings.Contains(err.Error(), "election is not enabled") {
		t.Errorf("the same Binding through POST .../bindings: %v; want the guard to refuse it", err)
	}
	if err := bind(nil); err != nil {
		t.Errorf("a plain binding, as the scheduler makes: %v", err)
	}
}

// TestRedTeamSecondWriterAccount replays the ninth red team's first break on the real API server:
// a second account bound to the lease verbs by hand passes the access check, but the chart's
// lease guard refuses its every Lease write, so an armed writer running as it never mints. The
// lease guard is read off the cluster as rendered; an account it admits is admitted.
func TestRedTeamSecondWriterAccount(t *testing.T) {
	rt := newRedTeamAdmitting(t, "admitted9")
	rt.liveShard0(t)
	bindLeases(t, rt, "second9", "second9")
	bindLeases(t, rt, "admitted9", "admitted9")
	sets := rt.cs.AppsV1().StatefulSets(rt.ns)
	var err error
	waitFor(t, 30*time.Second, "the bindings seen by the authorizer", func(ctx context.Context) (bool, error) {
		_, err = sets.Create(ctx, rt.writer("writer9", wt.ServiceAccount("second9")), dryRunCreate)
		return err != nil && strings.Contains(err.Error(), "lease guard"), nil
	})
	refused(t, "an armed writer as an account the lease guard does not admit", err, "lease guard", "second9", "could never write its Lease")
	waitFor(t, 30*time.Second, "an armed writer as an account the lease guard admits", func(ctx context.Context) (bool, error) {
		_, err = sets.Create(ctx, rt.writer("writer9", wt.ServiceAccount("admitted9")), dryRunCreate)
		return err == nil, nil
	})
}

// TestRedTeamNamespaceDeletion replays the ninth red team's namespace deletion on the real API
// server: deleting a namespace with an armed writer in it. The namespace controller deletes
// everything there, the writers with it; the guard refused it the writer's RBAC and its own, so
// the namespace stayed Terminating (with the webhook's own Pods deleted too, failurePolicy Fail
// would refuse the same deletes for ever).
func TestRedTeamNamespaceDeletion(t *testing.T) {
	rt := newRedTeam(t)
	ctx := context.Background()
	rt.liveShard0(t)
	if _, err := rt.cs.AppsV1().StatefulSets(rt.ns).Create(ctx, rt.writer("ns9"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("the armed writer: %v", err)
	}
	// Red team N of stop 33: the namespace controller's name, got by a token of its account or by
	// impersonation, deleted the writer's RoleBinding and the election's ConfigMap in a namespace
	// that was not being deleted, unreviewed. Refused now; the real one, below, still finishes.
	if _, err := rt.cs.CoreV1().ConfigMaps(rt.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "flags9"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bindings, err := rt.cs.RbacV1().RoleBindings(rt.ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(bindings.Items) == 0 {
		t.Fatalf("the writer's RoleBinding: %v (%d found)", err, len(bindings.Items))
	}
	nc := impersonating(t, rt.testRelease, "system:serviceaccount:kube-system:namespace-controller", "system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated")
	dryDelete := metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
	for what, del := range map[string]func() error{
		"the writer's RoleBinding": func() error { return nc.RbacV1().RoleBindings(rt.ns).Delete(ctx, bindings.Items[0].Name, dryDelete) },
		"a ConfigMap":              func() error { return nc.CoreV1().ConfigMaps(rt.ns).Delete(ctx, "flags9", dryDelete) },
	} {
		err := answerOnce(10*time.Second, func(err error) bool { return err != nil }, func(context.Context) error { return del() })
		if err == nil || !strings.Contains(err.Error(), "namespace controller deletes only in a namespace being deleted") {
			t.Errorf("%s deleted as the namespace controller in a live namespace: %v; want the chart's policy to refuse it", what, err)
		}
	}
	if err := rt.cs.CoreV1().Namespaces().Delete(ctx, rt.ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 90*time.Second, "the namespace deleted", func(ctx context.Context) (bool, error) {
		_, err := rt.cs.CoreV1().Namespaces().Get(ctx, rt.ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// TestRedTeamNarrowedWebhookClusterRole replays the twenty-third red team's careless cluster
// admin: the list of the lease guards dropped from the webhook's ClusterRole. The webhook took it
// for an older chart's (a rollback, which lists neither the lease guards nor ClusterRoles) and
// admitted, with a warning, an armed writer whose account the lease guard refuses. A role narrowed
// of one read alone is not a rollback: the writer is "could not verify" (could_not_verify).
func TestRedTeamNarrowedWebhookClusterRole(t *testing.T) {
	rt := newRedTeam(t)
	ctx := context.Background()
	rt.liveShard0(t)
	bindLeases(t, rt, "second9", "second9")
	roles := rt.cs.RbacV1().ClusterRoles()
	l, err := roles.List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + rt.name + ",app.kubernetes.io/component=webhook"})
	if err != nil || len(l.Items) != 1 {
		t.Fatalf("the webhook's ClusterRole: %v (%d found)", err, len(l.Items))
	}
	narrowed := l.Items[0].DeepCopy()
	narrowed.Rules = slices.DeleteFunc(narrowed.Rules, func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.Resources, "validatingadmissionpolicies")
	})
	if len(narrowed.Rules) == len(l.Items[0].Rules) {
		t.Fatalf("the webhook's ClusterRole grants no list of the lease guards: %+v", l.Items[0].Rules)
	}
	if _, err := roles.Update(ctx, narrowed, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("narrowing the webhook's ClusterRole (as a cluster admin): %v", err)
	}
	sets := rt.cs.AppsV1().StatefulSets(rt.ns)
	waitFor(t, 30*time.Second, "the narrowed ClusterRole seen by the authorizer", func(ctx context.Context) (bool, error) {
		_, err = sets.Create(ctx, rt.writer("writer9", wt.ServiceAccount("second9")), dryRunCreate)
		return err != nil && strings.Contains(err.Error(), "could not tell whether the lease guard"), nil
	})
	refused(t, "an armed writer as an account the lease guard does not admit, its lease guard unreadable", err, "could not tell whether the lease guard", "validatingadmissionpolicies", "narrowed, not rolled back")
}
